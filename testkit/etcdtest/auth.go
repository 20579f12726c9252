package etcdtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// RootPassword is the password of the root user EnableAuth creates.
const RootPassword = "root-secret"

// EnableAuth turns password authentication on: a root user (RootPassword)
// with the root role, then auth enable. Later clients need a user.
func (s *Server) EnableAuth(ctx context.Context) error {
	c, err := s.ClientAs("", "")
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.UserAdd(ctx, "root", RootPassword); err != nil {
		return fmt.Errorf("add root user: %w", err)
	}
	if _, err := c.UserGrantRole(ctx, "root", "root"); err != nil {
		return fmt.Errorf("grant root: %w", err)
	}
	if _, err := c.AuthEnable(ctx); err != nil {
		return fmt.Errorf("auth enable: %w", err)
	}
	return nil
}

// AddUser adds user with password and a role of its own (named after the
// user) with readwrite on every key under prefix. Run after EnableAuth.
func (s *Server) AddUser(ctx context.Context, user, password, prefix string) error {
	c, err := s.ClientAs("root", RootPassword)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.UserAdd(ctx, user, password); err != nil {
		return fmt.Errorf("add user %s: %w", user, err)
	}
	if _, err := c.RoleAdd(ctx, user); err != nil {
		return fmt.Errorf("add role %s: %w", user, err)
	}
	if err := s.Grant(ctx, user, prefix); err != nil {
		return err
	}
	if _, err := c.UserGrantRole(ctx, user, user); err != nil {
		return fmt.Errorf("grant role %s: %w", user, err)
	}
	return nil
}

// Grant gives role readwrite on every key under prefix.
func (s *Server) Grant(ctx context.Context, role, prefix string) error {
	c, err := s.ClientAs("root", RootPassword)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.RoleGrantPermission(ctx, role, prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		return fmt.Errorf("grant %s on %s: %w", role, prefix, err)
	}
	return nil
}

// Revoke takes role's permission on prefix (as granted by Grant) away.
func (s *Server) Revoke(ctx context.Context, role, prefix string) error {
	c, err := s.ClientAs("root", RootPassword)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.RoleRevokePermission(ctx, role, prefix, clientv3.GetPrefixRangeEnd(prefix)); err != nil {
		return fmt.Errorf("revoke %s on %s: %w", role, prefix, err)
	}
	return nil
}

// ClientAs returns a client authenticated as user ("" for none), trusting
// the server's CA when it serves TLS; the caller closes it.
func (s *Server) ClientAs(user, password string) (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: s.Endpoints, DialTimeout: 15 * time.Second,
		Username: user, Password: password, Logger: zap.NewNop()}
	if s.CAFile != "" {
		tc, err := s.ClientTLS()
		if err != nil {
			return nil, err
		}
		cfg.TLS = tc
	}
	return clientv3.New(cfg)
}

// ClientTLS trusts the server's CA (TLS servers only).
func (s *Server) ClientTLS() (*tls.Config, error) {
	pemBytes, err := os.ReadFile(s.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemBytes)
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// WriteCA writes a fresh self-signed CA and a certificate it signs for
// 127.0.0.1 into dir: ca.pem, cert.pem, key.pem (returned in that order).
func WriteCA(dir string) (ca, cert, key string, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return "", "", "", err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caTmpl, &srvKey.PublicKey, caKey)
	if err != nil {
		return "", "", "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return "", "", "", err
	}
	ca, cert, key = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{{ca, "CERTIFICATE", caDER}, {cert, "CERTIFICATE", srvDER}, {key, "EC PRIVATE KEY", keyDER}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			return "", "", "", err
		}
	}
	return ca, cert, key, nil
}

// NewWithAuth starts a server for one test (o's Dir is a fresh temporary
// one) with auth on: root, and user with password allowed readwrite on
// prefix only. It returns the server and a root client, both stopped or
// closed at cleanup.
func NewWithAuth(t testing.TB, o Options, user, password, prefix string) (*Server, *clientv3.Client) {
	t.Helper()
	o.Dir = t.TempDir()
	s, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.EnableAuth(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.AddUser(ctx, user, password, prefix); err != nil {
		t.Fatal(err)
	}
	root, err := s.ClientAs("root", RootPassword)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return s, root
}

// NewTLS starts a TLS server for one test (stopped at cleanup) and returns
// it with the path of another CA that did not sign its certificate.
func NewTLS(t testing.TB) (s *Server, untrustedCA string) {
	t.Helper()
	s, err := Start(Options{Dir: t.TempDir(), TLSDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	if untrustedCA, _, _, err = WriteCA(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	return s, untrustedCA
}

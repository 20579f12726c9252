package lbproxy

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
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// selfSigned writes a certificate for host (and its key) into dir and
// returns the file names and the certificate for the client's root pool.
func selfSigned(t *testing.T, dir, host string) (certFile, keyFile string, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host},
		DNSNames: []string{host}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ = x509.ParseCertificate(der)
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, host+".crt"), filepath.Join(dir, host+".key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile, cert
}

// The TLS front serves HTTP/2 and HTTP/1.1, picks the certificate by SNI,
// and tells the backend the request came over https.
func TestTLSFrontSNIAndHTTP2(t *testing.T) {
	var gotProto, gotXFP string
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotProto, gotXFP = r.Proto, r.Header.Get("X-Forwarded-Proto")
		io.WriteString(w, "over-tls")
	}))
	defer backend.Close()
	port := backend.Listener.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()
	state := fmt.Sprintf(`topology: {idcs: [IDC1], proxy_clusters: {BFE1: {idc: IDC1}}}
products: {p: {hosts: [a.test, b.test], rules: [{cond: "default_t()", cluster: c}]}}
clusters:
  c:
    subclusters:
      S1: {idc: IDC1, instances: [{addr: 127.0.0.1, port: %d, weight: 1}]}
`, port)
	cfgFile := filepath.Join(dir, "state.yaml")
	os.WriteFile(cfgFile, []byte(state), 0o644)
	ca, ka, certA := selfSigned(t, dir, "a.test")
	cb, kb, certB := selfSigned(t, dir, "b.test")

	tl, _ := net.Listen("tcp", "127.0.0.1:0")
	al, _ := net.Listen("tcp", "127.0.0.1:0")
	cfg := Config{ConfigFile: cfgFile, ProxyCluster: "BFE1", ID: "p1", TLSListener: tl, AdminListener: al,
		Certs: []CertPair{{Cert: ca, Key: ka}, {Cert: cb, Key: kb}}, TraceExporter: "none",
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))}
	r := startWith(t, cfg)

	pool := x509.NewCertPool()
	pool.AddCert(certA)
	pool.AddCert(certB)
	for _, host := range []string{"a.test", "b.test"} {
		tr := &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: host},
			ForceAttemptHTTP2: true,
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, r.addrs.HTTPS)
			},
		}
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		res, err := c.Get("https://" + host + "/x")
		if err != nil {
			t.Fatalf("%s: %v", host, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		tr.CloseIdleConnections()
		if res.StatusCode != 200 || string(body) != "over-tls" {
			t.Fatalf("%s: %d %q", host, res.StatusCode, body)
		}
		if res.Proto != "HTTP/2.0" {
			t.Errorf("%s: client spoke %s, want HTTP/2.0", host, res.Proto)
		}
		if got := res.TLS.PeerCertificates[0].DNSNames[0]; got != host {
			t.Errorf("SNI %s got the certificate of %s", host, got)
		}
		if gotXFP != "https" || gotProto != "HTTP/1.1" {
			t.Errorf("backend saw %s with X-Forwarded-Proto %q, want HTTP/1.1 and https", gotProto, gotXFP)
		}
	}
}

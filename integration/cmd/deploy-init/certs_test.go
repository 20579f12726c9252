package main

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestIssueChainsAndIsIdempotent(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c, created, err := loadOrCreateCA(dir, now)
	if err != nil || !created {
		t.Fatalf("CA: created=%v err=%v", created, err)
	}
	if ok, err := c.issue(dir, "etcd1", true, nil, now); !ok || err != nil {
		t.Fatalf("server: %v %v", ok, err)
	}
	if ok, err := c.issue(dir, "bfe1-p1", false, nil, now); !ok || err != nil {
		t.Fatalf("client: %v %v", ok, err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(c.cert)

	srv, err := readCert(filepath.Join(dir, "etcd1.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Verify(x509.VerifyOptions{Roots: roots, DNSName: "etcd1", CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("server certificate for etcd1: %v", err)
	}
	if _, err := srv.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1", CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("server certificate as a peer client on 127.0.0.1: %v", err)
	}
	cl, err := readCert(filepath.Join(dir, "bfe1-p1.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if cl.Subject.CommonName != "bfe1-p1" {
		t.Errorf("client CN %q, want the user name bfe1-p1", cl.Subject.CommonName)
	}
	if slices.Contains(cl.ExtKeyUsage, x509.ExtKeyUsageServerAuth) || len(cl.DNSNames) != 0 {
		t.Errorf("client certificate has server usage or names: %v %v", cl.ExtKeyUsage, cl.DNSNames)
	}
	if _, err := cl.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "bfe1-p1-key.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}

	// A second run keeps everything.
	before, _ := os.ReadFile(filepath.Join(dir, "bfe1-p1.pem"))
	c2, created, err := loadOrCreateCA(dir, now.Add(time.Hour))
	if err != nil || created {
		t.Fatalf("second CA load: created=%v err=%v", created, err)
	}
	if !c2.cert.Equal(c.cert) {
		t.Error("CA changed on the second run")
	}
	if ok, err := c2.issue(dir, "bfe1-p1", false, nil, now); ok || err != nil {
		t.Errorf("re-issue: created=%v err=%v, want kept", ok, err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, "bfe1-p1.pem"))
	if string(before) != string(after) {
		t.Error("client certificate rewritten on the second run")
	}
}

package tlsfiles

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writePair(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "operator"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile
}

func TestClient(t *testing.T) {
	dir := t.TempDir()
	cert, key := writePair(t, dir)
	if c, err := Client("", "", ""); c != nil || err != nil {
		t.Fatalf("nothing given: %v %v", c, err)
	}
	c, err := Client(cert, cert, key)
	if err != nil || c.RootCAs == nil || len(c.Certificates) != 1 {
		t.Fatalf("full: %+v %v", c, err)
	}
	if c, err := Client(cert, "", ""); err != nil || c.RootCAs == nil || len(c.Certificates) != 0 {
		t.Fatalf("CA only: %+v %v", c, err)
	}
	junk := filepath.Join(dir, "junk")
	os.WriteFile(junk, []byte("not pem"), 0o600)
	for _, tc := range []struct{ ca, cert, key, want string }{
		{junk, "", "", "no PEM certificate"},
		{filepath.Join(dir, "missing"), "", "", "CA bundle"},
		{"", cert, "", "go together"},
		{"", junk, junk, "client certificate"},
	} {
		if _, err := Client(tc.ca, tc.cert, tc.key); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want %q", tc, err, tc.want)
		}
	}
}

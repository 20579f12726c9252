// Package tlsfiles builds client TLS settings from PEM files, the way every
// Sluice binary takes them on its command line (--etcd-cacert, --etcd-cert,
// --etcd-key; lbctl's --cacert, --cert, --key; lbagent's --probe-*). It reads
// local files only.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Client returns a TLS client config that trusts the CA bundle in ca (the
// system roots when empty) and presents the certificate and key in cert and
// key (none when both are empty). It returns nil, nil when all three are
// empty: plain connections.
func Client(ca, cert, key string) (*tls.Config, error) {
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("CA bundle: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA bundle %s: no PEM certificate found", ca)
		}
		tc.RootCAs = pool
	}
	if (cert == "") != (key == "") {
		return nil, errors.New("a client certificate and its key go together: give both or neither")
	}
	if cert != "" {
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{kp}
	}
	return tc, nil
}

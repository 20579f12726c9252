//go:build e2e

package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/integration/fleet"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/h2attack"
)

// Catalogue F12: HTTP/2 rapid reset. An extra BFE2 proxy with a TLS
// listener; one client opens an h2 connection and sends 20 000 requests,
// each cancelled (RST_STREAM) right after its HEADERS, as fast as it can,
// while 4 workers load the plain listeners of BFE2. The figures: how many
// of the cancelled requests reached a backend (bounded by the 20 000
// sent), the proxy closing the attacking connection (GOAWAY, counted by
// sluice_proxy_h2_premature_reset_closes_total), 0 failed
// requests for the other clients with the slowest answer bounded, and the
// proxy's goroutines back within 100 of the baseline after the attack.
func TestFaultsHTTP2RapidReset(t *testing.T) {
	f := startFleet(t, fleet.Options{})
	waitInstances(t, f, "BFE2", "demo-main", demoMainFull)
	dir := t.TempDir()
	caFile, certFile, keyFile, err := etcdtest.WriteCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	tlsAddr := fmt.Sprintf("127.0.0.1:%d", fleet.FreePort())
	listen, admin := fmt.Sprintf("127.0.0.1:%d", fleet.FreePort()), fmt.Sprintf("127.0.0.1:%d", fleet.FreePort())
	startBin(t, dir, "bfe2-tls", "lbproxy", "--proxy-cluster", "BFE2", "--id", "bfe2-tls", "--etcd", f.Endpoints,
		"--listen", listen, "--listen-tls", tlsAddr, "--tls-cert", certFile, "--tls-key", keyFile,
		"--admin", admin, "--cache-dir", filepath.Join(dir, "cache"), "--access-log", "off")
	adminURL := "http://" + admin
	if err := fleet.WaitHTTP(t.Context(), adminURL+"/readyz", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	baseline := metricValue(t, adminURL, "go_goroutines")
	before := allBackendsTotal(t, f)

	l := startLoad(append(proxyURLs(f, "BFE2"), "http://"+listen), 42)
	defer l.end()
	l.waitSent(t, 100)

	conn, err := tls.Dial("tcp", tlsAddr, &tls.Config{RootCAs: roots, NextProtos: []string{"h2"}, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN chose %q, want h2", p)
	}
	conn.SetDeadline(time.Now().Add(60 * time.Second))
	const attack = 20000
	res := h2attack.Run(conn, "demo.local", attack, 5*time.Second)
	sent, werr, attackTook, ended := res.Sent, res.WriteErr, res.Took, res.Ended

	// After the attack: requests through the attacked proxy's TLS listener
	// with a well-behaved h2 client are served.
	h2c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{RootCAs: roots}}}
	defer h2c.CloseIdleConnections()
	eventually(t, 20*time.Second, "the TLS listener serves h2 after the attack", func() error {
		req, _ := http.NewRequest("GET", "https://"+tlsAddr+"/", nil)
		req.Host = "demo.local"
		resp, err := h2c.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
			return fmt.Errorf("%s %d", resp.Proto, resp.StatusCode)
		}
		return nil
	})
	failed, total, slowest, failures := l.end()
	reached := allBackendsTotal(t, f) - before - total + failed
	var goroutines float64
	eventually(t, 20*time.Second, "the attacked proxy's goroutines back near the baseline", func() error {
		if goroutines = metricValue(t, adminURL, "go_goroutines"); goroutines > baseline+100 {
			return fmt.Errorf("%v goroutines, baseline %v", goroutines, baseline)
		}
		return nil
	})
	t.Logf("F12 rapid reset: %d HEADERS+RST_STREAM pairs sent in %.2f s (write error: %v); the connection: %s; about %d cancelled requests reached a backend; other clients: %d of %d failed, slowest %.3f s; goroutines %v (baseline %v)",
		sent, attackTook.Seconds(), werr, ended, reached, failed, total, slowest.Seconds(), goroutines, baseline)
	if failed != 0 {
		t.Errorf("F12: %d of %d requests of other clients failed during the attack: %v", failed, total, failures)
	}
	if slowest > 3*time.Second {
		t.Errorf("F12: slowest answer to another client %s during the attack, want ≤ 3 s", slowest)
	}
	if reached > int64(sent) {
		t.Errorf("F12: %d requests reached backends for %d sent", reached, sent)
	}
	// --h2-max-premature-resets (default 100): the attacking connection
	// gets GOAWAY (or is closed) and is counted once.
	if !res.GoAway() && !strings.HasPrefix(ended, "closed") {
		t.Errorf("F12: the attacking connection %s, want GOAWAY or closed", ended)
	}
	if n := metricValue(t, adminURL, "sluice_proxy_h2_premature_reset_closes_total"); n != 1 {
		t.Errorf("F12: sluice_proxy_h2_premature_reset_closes_total %v, want 1", n)
	}
}

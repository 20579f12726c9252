package server

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// upstreamEnv selects the upstream client of newProxy (empty: the default).
const upstreamEnv = "SLUICE_TEST_UPSTREAM_CLIENT"

// TestStdUpstreamClientSuite runs every test of this package once more with
// the std upstream client (ReverseProxy + http.Transport), the path upgrades
// still take and the --upstream-client std fallback, so that both stay
// correct.
func TestStdUpstreamClientSuite(t *testing.T) {
	if suiteRun(t) {
		return
	}
	cmd := exec.Command(os.Args[0], "-test.count=1")
	cmd.Env = append(os.Environ(), upstreamEnv+"="+UpstreamStd)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("std upstream client run failed: %v\n%s", err, out)
	}
}

// frontEnv selects the front of newProxy (empty: net/http).
const frontEnv = "SLUICE_TEST_FRONT"

// TestFastHTTPFrontSuite runs every test of this package once more behind
// the fasthttp front (with the default upstream client), so that both fronts
// give the same answers to the same requests, hostile ones included.
func TestFastHTTPFrontSuite(t *testing.T) {
	if suiteRun(t) {
		return
	}
	cmd := exec.Command(os.Args[0], "-test.count=1")
	cmd.Env = append(os.Environ(), frontEnv+"="+FrontFastHTTP)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("fasthttp front run failed: %v\n%s", err, out)
	}
}

// h2ServerEnv selects the HTTP/2 server of tlsProxy (empty: FrontOptions'
// default, sluice).
const h2ServerEnv = "SLUICE_TEST_H2SERVER"

// suiteRun reports (and logs) whether this process is one of the suite
// runs below, which do not start the others again.
func suiteRun(t *testing.T) bool {
	for _, e := range []string{upstreamEnv, frontEnv, h2ServerEnv} {
		if v := os.Getenv(e); v != "" {
			t.Logf("already a suite run (%s=%q)", e, v)
			return true
		}
	}
	return false
}

// TestXNetH2ServerSuite runs this package's TLS-front tests once more
// with --h2-server xnet (net/http's HTTP/2 server), so that both HTTP/2
// servers give the same answers: the TLS front, rapid reset, idle,
// connection-limit and streaming tests.
func TestXNetH2ServerSuite(t *testing.T) {
	if suiteRun(t) {
		return
	}
	cmd := exec.Command(os.Args[0], "-test.count=1", "-test.run", "TLS|H2|Tls|Stream|Park|Idle|ConnLimit")
	cmd.Env = append(os.Environ(), h2ServerEnv+"="+H2ServerXNet)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("xnet HTTP/2 server run failed: %v\n%s", err, out)
	}
}

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
	if os.Getenv(upstreamEnv) != "" || os.Getenv(frontEnv) != "" {
		t.Logf("already a suite run (%s=%q, %s=%q)", upstreamEnv, os.Getenv(upstreamEnv), frontEnv, os.Getenv(frontEnv))
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
	if os.Getenv(upstreamEnv) != "" || os.Getenv(frontEnv) != "" {
		t.Logf("already a suite run (%s=%q, %s=%q)", upstreamEnv, os.Getenv(upstreamEnv), frontEnv, os.Getenv(frontEnv))
		return
	}
	cmd := exec.Command(os.Args[0], "-test.count=1")
	cmd.Env = append(os.Environ(), frontEnv+"="+FrontFastHTTP)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("fasthttp front run failed: %v\n%s", err, out)
	}
}

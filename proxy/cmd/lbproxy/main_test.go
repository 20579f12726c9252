package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// version, --version and --help work without the flags serving needs; a
// serving start from etcd without --proxy-cluster says which flag is missing.
func TestVersionHelpAndMissingProxyCluster(t *testing.T) {
	t.Setenv("SLUICE_PROXY_CLUSTER", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"lbproxy", "version"}, "lbproxy dev\n"},
		{[]string{"lbproxy", "--version"}, "lbproxy version dev\n"},
		{[]string{"lbproxy", "--help"}, "--proxy-cluster"},
	} {
		var out bytes.Buffer
		app := newApp()
		app.Writer = &out
		if err := app.Run(c.args); err != nil || !strings.Contains(out.String(), c.want) {
			t.Errorf("%v: %v, printed %q, want %q", c.args, err, out.String(), c.want)
		}
	}
	app := newApp()
	app.Writer = &bytes.Buffer{}
	if err := app.Run([]string{"lbproxy", "--etcd", "127.0.0.1:1"}); err == nil || !strings.Contains(err.Error(), "--proxy-cluster (or SLUICE_PROXY_CLUSTER) is required with --etcd") {
		t.Fatalf("--etcd without --proxy-cluster: %v", err)
	}
}

// Issue 17.4: --bfe-conf alone parses (no "Required flag proxy-cluster");
// what fails here is the missing directory, named.
func TestBFEConfNeedsNoProxyClusterFlag(t *testing.T) {
	t.Setenv("SLUICE_PROXY_CLUSTER", "")
	dir := filepath.Join(t.TempDir(), "missing")
	err := newApp().Run([]string{"lbproxy", "--bfe-conf", dir, "--access-log", "off"})
	if err == nil || strings.Contains(err.Error(), "Required flag") || !strings.Contains(err.Error(), "--bfe-conf") {
		t.Fatalf("lbproxy --bfe-conf %s: %v, want the directory's error, not a missing flag", dir, err)
	}
}

// The etcd flags are api/etcdclient's: --help shows the canonical names,
// and SLUICE_ETCD_ENDPOINTS alone selects the etcd source.
func TestEtcdFlagsHelpAndEnv(t *testing.T) {
	t.Setenv("SLUICE_PROXY_CLUSTER", "")
	var out bytes.Buffer
	app := newApp()
	app.Writer = &out
	if err := app.Run([]string{"lbproxy", "--help"}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"--etcd-endpoints value, --etcd value", "$SLUICE_ETCD_ENDPOINTS", "--etcd-dial-timeout", "--etcd-cacert", "--etcd-user"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("--help lacks %q", s)
		}
	}
	t.Setenv("SLUICE_ETCD_ENDPOINTS", "127.0.0.1:1")
	app = newApp()
	app.Writer = &bytes.Buffer{}
	if err := app.Run([]string{"lbproxy"}); err == nil || !strings.Contains(err.Error(), "required with --etcd-endpoints") {
		t.Fatalf("SLUICE_ETCD_ENDPOINTS without --proxy-cluster: %v", err)
	}
}

// Issue 23: negative connection limits are refused, naming the flag.
func TestClientConnFlagsChecked(t *testing.T) {
	t.Setenv("SLUICE_PROXY_CLUSTER", "")
	for _, c := range []struct{ flag, want string }{
		{"--max-client-conns=-1", "--max-client-conns -1: want 0 (no limit) or a positive count"},
		{"--max-client-conns-per-ip=-3", "--max-client-conns-per-ip -3: want 0 (no limit) or a positive count"},
	} {
		app := newApp()
		app.Writer = &bytes.Buffer{}
		err := app.Run([]string{"lbproxy", "--config", filepath.Join(t.TempDir(), "none.yaml"), c.flag})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.flag, err, c.want)
		}
	}
}

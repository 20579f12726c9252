package lbctl

import (
	"bytes"
	"strings"
	"testing"
)

// The etcd flags are api/etcdclient's: --help shows the canonical names
// with lbctl's old ones as aliases, and SLUICE_ETCD_ENDPOINTS sets the
// endpoints (a bad one is named, exit 2, before any dial).
func TestEtcdFlagsHelpAndEnv(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"lbctl", "--help"}, &out, &errb, strings.NewReader("")); code != ExitOK {
		t.Fatalf("--help: exit %d %q", code, errb.String())
	}
	for _, s := range []string{"--etcd-endpoints value, --etcd value, --endpoints value", "$SLUICE_ETCD_ENDPOINTS",
		"--etcd-user value, --user value", "--etcd-cacert value, --cacert value", "--etcd-dial-timeout", "127.0.0.1:2379"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("--help lacks %q:\n%s", s, out.String())
		}
	}
	t.Setenv("SLUICE_ETCD_ENDPOINTS", "bogus:::1")
	out.Reset()
	errb.Reset()
	code := Main([]string{"lbctl", "weights", "get"}, &out, &errb, strings.NewReader(""))
	if want := `etcd endpoint "bogus:::1"`; code != ExitUsage || !strings.Contains(errb.String(), want) {
		t.Fatalf("SLUICE_ETCD_ENDPOINTS=bogus:::1: exit %d %q, want exit %d and %q", code, errb.String(), ExitUsage, want)
	}
}

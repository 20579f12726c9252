package main

import (
	"bytes"
	"strings"
	"testing"
)

// version, --version and --help work without the flags serving needs; a
// serving start without --proxy-cluster says which flag is missing.
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
	if err := app.Run([]string{"lbproxy"}); err == nil || !strings.Contains(err.Error(), "--proxy-cluster (or SLUICE_PROXY_CLUSTER) is required") {
		t.Fatalf("no --proxy-cluster: %v", err)
	}
}

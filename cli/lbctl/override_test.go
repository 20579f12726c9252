package lbctl

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/proxy/lbproxy"
)

// runProxy runs a real lbproxy from a config file and returns its admin
// address; it stops when the test ends.
func runProxy(t *testing.T, file, proxyCluster string) string {
	t.Helper()
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	al, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan lbproxy.Addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- lbproxy.Run(ctx, lbproxy.Config{ConfigFile: file, ProxyCluster: proxyCluster, ID: "p1",
			Listener: l, AdminListener: al, TraceExporter: "none", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Started: func(a lbproxy.Addrs) { started <- a }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("lbproxy: %v", err)
		}
	})
	select {
	case a := <-started:
		return a.Admin
	case err := <-done:
		t.Fatalf("lbproxy: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("lbproxy did not start")
	}
	return ""
}

func TestOverrideSetListClear(t *testing.T) {
	h := newHarness(t)
	admin := runProxy(t, "testdata/static.yaml", "BFE2")
	var got strings.Builder
	step := func(want int, args ...string) {
		t.Helper()
		out, errs, code := h.run("", args...)
		if code != want {
			t.Fatalf("%v: exit %d, want %d\n%s%s", args, code, want, out, errs)
		}
		fmt.Fprintf(&got, "$ lbctl %s\nexit %d\n%s%s", strings.Join(args, " "), code, out, errs)
	}
	step(0, "override", "list", "--proxy", admin)
	step(0, "override", "set", "--proxy", admin, "--instance", "127.0.0.1:18401", "--drain", "--ttl", "2m")
	step(0, "override", "set", "--proxy", admin, "--instance", "127.0.0.1:18101", "--weight", "3", "-o", "json")
	step(0, "override", "list", "--proxy", admin)
	step(0, "override", "list", "--proxy", admin, "-o", "json")
	step(0, "override", "clear", "--proxy", admin, "--instance", "127.0.0.1:18401")
	step(0, "override", "list", "--proxy", admin, "-o", "yaml")
	step(ExitUsage, "override", "set", "--proxy", admin, "--instance", "127.0.0.1:18401")
	step(ExitUsage, "override", "set", "--proxy", admin, "--instance", "demo:80", "--drain")
	step(ExitError, "override", "set", "--proxy", admin, "--instance", "127.0.0.1:9", "--drain")
	golden(t, "override", strings.ReplaceAll(got.String(), admin, "ADMIN"))
}

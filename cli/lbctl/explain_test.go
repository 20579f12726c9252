package lbctl

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/proxy/lbproxy"
	"github.com/sluicelb/sluice/proxy/server"
)

func TestExplainOffline(t *testing.T) {
	h := newHarness(t)
	cases := []struct {
		method, url, cluster, instance string
	}{
		{"GET", "http://demo.local/static/app.js", "demo-static", "127.0.0.1:18301"},
		{"POST", "http://demo.local/setting/a", "demo-post", "127.0.0.1:18401"},
		{"GET", "http://other.example/x", "demo-main", ""},
	}
	for _, c := range cases {
		out := h.mustRun("-o", "json", "explain", "--config", "testdata/static.yaml", "--proxy-cluster", "BFE2",
			"--url", c.url, "--method", c.method, "--client-ip", "10.1.2.3")
		var ex server.Explanation
		if err := json.Unmarshal([]byte(out), &ex); err != nil {
			t.Fatalf("%s: %v\n%s", c.url, err, out)
		}
		if ex.Product != "demo" || ex.Cluster != c.cluster || ex.ClientIP != "10.1.2.3" {
			t.Errorf("%s %s: %+v", c.method, c.url, ex)
		}
		if c.instance != "" && ex.Balance.Instance != c.instance {
			t.Errorf("%s: instance %q, want %s", c.url, ex.Balance.Instance, c.instance)
		}
		if c.cluster == "demo-main" && ex.Balance.SubCluster != "SC1" && ex.Balance.SubCluster != "SC2" {
			t.Errorf("demo-main pick: %+v", ex.Balance)
		}
	}
	out := h.mustRun("explain", "--config", "testdata/static.yaml", "--proxy-cluster", "BFE2", "--url", "http://demo.local/static/x")
	for _, want := range []string{"rule \"static\"", "cluster demo-static", "Instance", "127.0.0.1:18301"} {
		if !strings.Contains(out, want) {
			t.Errorf("table output lacks %q:\n%s", want, out)
		}
	}
	if _, _, code := h.run("", "explain", "--url", "http://x/"); code != ExitUsage {
		t.Errorf("explain without --proxy/--config: exit %d", code)
	}
}

// explain never names one instance for wrr when the sub-cluster has two:
// it lists both with their weights and the next pick (issue 15 item 8).
func TestExplainOfflineWRRListsCandidates(t *testing.T) {
	h := newHarness(t)
	args := []string{"explain", "--config", "testdata/static.yaml", "--proxy-cluster", "BFE2", "--url", "http://other.example/x", "--client-ip", "10.1.2.5"}
	var ex server.Explanation
	if err := json.Unmarshal([]byte(h.mustRun(append([]string{"-o", "json"}, args...)...)), &ex); err != nil {
		t.Fatal(err)
	}
	b := ex.Balance
	if b.SubCluster != "SC1" || b.Deterministic || b.Instance != "" || len(b.Candidates) != 2 {
		t.Fatalf("10.1.2.5 → %+v; want SC1 with two candidates and no instance", b)
	}
	next := 0
	for _, c := range b.Candidates {
		if c.Weight != 10 {
			t.Errorf("candidate %+v: want effective weight 10", c)
		}
		if c.Next {
			next++
		}
	}
	if next != 1 {
		t.Errorf("%d candidates marked next, want 1: %+v", next, b.Candidates)
	}
	out := h.mustRun(args...)
	for _, want := range []string{"Sub-cluster       SC1 (reason hash)", "not fixed by the request: algorithm wrr chooses per request among",
		"127.0.0.1:18101  10      0          next pick (cursor 1 of", "127.0.0.1:18102  10      0"} {
		if !strings.Contains(out, want) {
			t.Errorf("table output lacks %q:\n%s", want, out)
		}
	}
	out = h.mustRun("explain", "--config", "testdata/static.yaml", "--proxy-cluster", "BFE2", "--url", "http://demo.local/static/x")
	if !strings.Contains(out, "127.0.0.1:18301 (algorithm wrr, decided by the only available instance): every such request goes there") {
		t.Errorf("single instance:\n%s", out)
	}
}

func TestPlanScenarioOffline(t *testing.T) {
	h := newHarness(t)
	example := filepath.Join("..", "..", "scheduler", "scenario", "testdata", "example.yaml")
	out := h.mustRun("plan", "--scenario", example)
	want, err := os.ReadFile(filepath.Join("..", "..", "scheduler", "scenario", "testdata", "example.table.golden"))
	if err != nil {
		t.Fatal(err)
	}
	if out != string(want) {
		t.Fatalf("lbctl plan --scenario differs from lbscheduler plan's golden output:\n%s", out)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(h.mustRun("-o", "json", "plan", "--scenario", example)), &doc); err != nil {
		t.Fatal(err)
	}
	if _, _, code := h.run("", "plan", "--scenario", "testdata/demo.yaml"); code != ExitError {
		t.Fatalf("a desired state is not a scenario: exit %d", code)
	}
}

// explain --proxy asks a running lbproxy's admin API; its answer matches the
// offline one for the same configuration.
func TestExplainLiveAgainstProxy(t *testing.T) {
	h := newHarness(t)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	al, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan lbproxy.Addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- lbproxy.Run(ctx, lbproxy.Config{ConfigFile: "testdata/static.yaml", ProxyCluster: "BFE2", ID: "p1",
			Listener: l, AdminListener: al, TraceExporter: "none", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Started: func(a lbproxy.Addrs) { started <- a }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("lbproxy: %v", err)
		}
	}()
	var addrs lbproxy.Addrs
	select {
	case addrs = <-started:
	case err := <-done:
		t.Fatalf("lbproxy: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("lbproxy did not start")
	}
	args := []string{"explain", "--proxy-cluster", "BFE2", "--url", "http://demo.local/setting/x", "--method", "POST", "--client-ip", "10.9.8.7"}
	var live, offline server.Explanation
	if err := json.Unmarshal([]byte(h.mustRun(append([]string{"-o", "json"}, append(args, "--proxy", addrs.Admin)...)...)), &live); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(h.mustRun(append([]string{"-o", "json"}, append(args, "--config", "testdata/static.yaml")...)...)), &offline); err != nil {
		t.Fatal(err)
	}
	if live.Cluster != "demo-post" || live.Balance.Instance != "127.0.0.1:18401" || live.ClientIP != "10.9.8.7" {
		t.Fatalf("live explanation %+v", live)
	}
	if live.Cluster != offline.Cluster || live.Rule != offline.Rule || live.Balance.Instance != offline.Balance.Instance {
		t.Fatalf("live %+v\noffline %+v", live, offline)
	}
	if _, errs, code := h.run("", "explain", "--proxy-cluster", "BFE2", "--url", "not a url", "--proxy", addrs.Admin); code == 0 || !strings.Contains(errs, "absolute http or https URL") {
		t.Fatalf("bad URL: exit %d %s", code, errs)
	}
}

package lbctl

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

package lbctl

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/snapshot"
)

func TestHistoryDiffRollback(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	drain := snapshot.Intent{Kind: snapshot.IntentDrain, Object: "demo-static/STATIC1", Author: "carol", Reason: "maintenance"}
	pinned := snapshot.Intent{Kind: snapshot.IntentPin, Object: "demo-main", Author: "alice", Reason: "canary 30/70"}
	v1 := demoSnapshot("BFE2", 1, map[string]int{"SC1": 50, "SC2": 50}, false)
	v1.Meta.Intents = []snapshot.Intent{drain}
	v2 := demoSnapshot("BFE2", 2, map[string]int{"SC1": 30, "SC2": 70}, true)
	v2.Meta.Intents = []snapshot.Intent{pinned}
	h.publish(v1)
	h.publish(v2)

	// Each version says which intents it added (who, why) and dropped.
	out := h.mustRun("history", "--proxy-cluster", "BFE2")
	golden(t, "history", out)
	var metas []snapshot.Meta
	if err := json.Unmarshal([]byte(h.mustRun("-o", "json", "history", "--proxy-cluster", "BFE2")), &metas); err != nil {
		t.Fatal(err)
	}
	if len(metas) != 2 || metas[0].Version != 1 || metas[1].Version != 2 || len(metas[1].Intents) != 1 || metas[1].Intents[0] != pinned {
		t.Fatalf("history %+v", metas)
	}

	golden(t, "diff", h.mustRun("diff", "--proxy-cluster", "BFE2", "v1", "2"))
	if _, _, code := h.run("", "diff", "--proxy-cluster", "BFE2", "1"); code != ExitUsage {
		t.Fatalf("diff with one version: exit %d", code)
	}
	if _, errs, code := h.run("", "diff", "--proxy-cluster", "BFE2", "1", "9"); code != ExitError || !strings.Contains(errs, "v9 does not exist") {
		t.Fatalf("diff with a missing version: exit %d %s", code, errs)
	}

	// Rollback pins v1's rows; declining writes nothing.
	if _, _, code := h.run("n\n", "rollback", "--proxy-cluster", "BFE2", "--to", "1"); code != ExitAborted {
		t.Fatalf("declined rollback: exit %d", code)
	}
	h.mustRun("rollback", "--proxy-cluster", "BFE2", "--to", "1", "--yes")
	s, _ := h.desired()
	var pin *config.Pin
	for i := range s.Pins {
		if s.Pins[i].ProxyCluster == "BFE2" && s.Pins[i].Cluster == "demo-main" {
			pin = &s.Pins[i]
		}
	}
	if pin == nil || pin.Weights["SC1"] != 50 || pin.Weights["SC2"] != 50 || !strings.Contains(pin.Reason, "rollback of BFE2 to v1") {
		t.Fatalf("rollback pin %+v", pin)
	}
}

func TestPercentRowKeepsTheSum(t *testing.T) {
	got := percentRow(snapshot.Row{Denominator: 10000, Weights: map[string]int{"A": 3333, "B": 3333, "C": 3334}})
	if got["A"]+got["B"]+got["C"] != 100 || got["C"] != 34 {
		t.Fatalf("%v", got)
	}
}

func TestHealthAndProxiesJSON(t *testing.T) {
	h := newHarness(t)
	now := time.Now().UTC()
	in := report.Instance{Cluster: "demo-main", SubCluster: "SC1", IDC: "IDC1", Addr: "127.0.0.1", Port: 18001, Weight: 10, State: config.StateDraining, Reason: "SIGTERM", UpdatedAt: now}
	k, _ := h.layout.Instance("demo-main", "SC1", mustAddrPort("127.0.0.1:18001"))
	b, _ := json.Marshal(in)
	h.cli.Put(t.Context(), k, string(b))
	h.publish(demoSnapshot("BFE1", 3, map[string]int{"SC1": 50, "SC2": 50}, false))
	h.status(report.ProxyStatus{ProxyCluster: "BFE1", ID: "p1", AppliedVersion: 3, EtcdConnected: false, Source: "disk-cache", UpdatedAt: now})

	var ins []report.Instance
	if err := json.Unmarshal([]byte(h.mustRun("-o", "json", "health", "--cluster", "demo-main")), &ins); err != nil {
		t.Fatal(err)
	}
	if len(ins) != 1 || ins[0].State != config.StateDraining || ins[0].Reason != "SIGTERM" {
		t.Fatalf("health %+v", ins)
	}
	if out := h.mustRun("health"); !strings.Contains(out, "draining") || !strings.Contains(out, "127.0.0.1:18001") {
		t.Fatalf("health table:\n%s", out)
	}
	if out := h.mustRun("health", "--cluster", "nope"); !strings.Contains(out, "(no agent registrations)") {
		t.Fatalf("health of an unknown cluster:\n%s", out)
	}
	out := h.mustRun("proxies")
	for _, want := range []string{"BFE1", "p1", "v3", "disk-cache", "DISCONNECTED"} {
		if !strings.Contains(out, want) {
			t.Errorf("proxies table lacks %q:\n%s", want, out)
		}
	}
	// A proxy that lost etcd is STALE in rollout status, and named.
	_, errs, code := h.run("", "rollout", "status")
	if code != ExitNotConverged || !strings.Contains(errs, "BFE1/p1 STALE (not connected to etcd)") {
		t.Fatalf("rollout status: exit %d %s", code, errs)
	}
}

func mustAddrPort(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

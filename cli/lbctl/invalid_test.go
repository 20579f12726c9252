package lbctl

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
)

// A hand-written shift intent that fails the scheduler's decoding is shown
// as invalid with the rule by shift list and get shifts, and the rule the
// scheduler reports is shown by rollout status — never silently absent.
func TestInvalidIntentIsShown(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	k, _ := h.layout.Shift("s-hand")
	if _, err := h.cli.Put(context.Background(), k, `{"id": "s-hand", "proxy_cluster": "BFE1", "percent": "fifty"}`); err != nil {
		t.Fatal(err)
	}
	out := h.mustRun("shift", "list")
	if !strings.Contains(out, "s-hand") || !strings.Contains(out, stateInvalid) || !strings.Contains(out, "ignored by the scheduler: ") || !strings.Contains(out, "percent") {
		t.Fatalf("shift list does not show the invalid intent:\n%s", out)
	}
	var rows []shiftView
	if err := json.Unmarshal([]byte(h.mustRun("-o", "json", "get", "shifts")), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].ID != "s-hand" || rows[0].State != stateInvalid || !strings.HasPrefix(rows[0].Invalid, "ignored by the scheduler: ") {
		t.Fatalf("get shifts -o json: %+v", rows)
	}

	now := time.Now().UTC()
	h.publishIn("L1", demoSnapshot("BFE1", 4, map[string]int{"SC1": 50, "SC2": 50}, false))
	h.status(report.ProxyStatus{ProxyCluster: "BFE1", ID: "p1", AppliedLineage: "L1", AppliedVersion: 4, EtcdConnected: true, UpdatedAt: now})
	why := "shift intent ignored: percent: want a number"
	h.schedStatus(report.SchedulerStatus{LeaderID: "S1", InputRevision: 9, Invalid: map[string]string{k: why},
		ProxyClusters: map[string]report.PublishResult{"BFE1": {Result: report.PublishUnchanged, Lineage: "L1", Version: 4, InputRevision: 9}}})
	out = h.mustRun("rollout", "status", "--proxy-cluster", "BFE1")
	if !strings.Contains(out, k) || !strings.Contains(out, "INVALID ("+why+")") {
		t.Fatalf("rollout status does not show the ignored input:\n%s", out)
	}
}

// A desired state written by hand that decodes but breaks a rule (a drain
// of a sub-cluster that does not exist) is ignored by the scheduler: get
// drains shows what is stored and exits 1 saying it is not in force.
func TestGetDrainsOfAnInvalidStoredState(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	st, _ := h.desired()
	st.Drains = append(st.Drains, config.Drain{Cluster: "demo-main", SubCluster: "SC9", Reason: "by hand"})
	b, _ := json.Marshal(st)
	if _, err := h.cli.Put(context.Background(), h.layout.Desired(), string(b)); err != nil {
		t.Fatal(err)
	}
	out, errs, code := h.run("", "get", "drains")
	if code != ExitError || !strings.Contains(out, "SC9") || !strings.Contains(errs, "the scheduler ignores it and keeps the last valid one; these drains are not in force") ||
		!strings.Contains(errs, "drains[0].subcluster") {
		t.Fatalf("get drains: exit %d\nstdout %s\nstderr %s", code, out, errs)
	}
}

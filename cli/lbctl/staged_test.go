package lbctl

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/rollout"
	"github.com/sluicelb/sluice/api/snapshot"
)

func (h *harness) staged(s rollout.Staged) {
	h.t.Helper()
	k, _ := h.layout.Rollout(s.ProxyCluster)
	b, _ := json.Marshal(s)
	if _, err := h.cli.Put(context.Background(), k, string(b)); err != nil {
		h.t.Fatal(err)
	}
}

// rollout status shows a staged rollout's stage and gates; each proxy's
// target is what its stage runs; the operator requests are checked
// against the rollout's state before anything is written.
func TestStagedRolloutStatusAndRequests(t *testing.T) {
	h := newHarness(t)
	if _, errs, code := h.run("", "rollout", "pause", "--proxy-cluster", "BFE1"); code != ExitUsage || !strings.Contains(errs, `proxy cluster "BFE1" has no staged rollout in progress (none)`) {
		t.Fatalf("pause without a rollout: exit %d\n%s", code, errs)
	}
	stable := demoSnapshot("BFE1", 4, map[string]int{"SC1": 50, "SC2": 50}, false)
	h.publish(stable)
	cand := demoSnapshot("BFE1", 5, map[string]int{"SC1": 60, "SC2": 40}, false)
	cand.Meta.Hash = snapshot.ContentHash(cand)
	ck, _ := h.layout.Current("BFE1")
	pj, _ := json.Marshal(snapshot.Pointer{Version: 4, Hash: stable.Meta.Hash,
		Candidate: &snapshot.Candidate{Version: 5, Hash: cand.Meta.Hash, Rollout: "BFE1-v5", IDs: []string{"p1"}}})
	if _, err := h.cli.Put(context.Background(), ck, string(pj)); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	h.status(report.ProxyStatus{ProxyCluster: "BFE1", ID: "p1", AppliedVersion: 5, EtcdConnected: true, UpdatedAt: now, Rollout: "BFE1-v5", InStage: true})
	h.status(report.ProxyStatus{ProxyCluster: "BFE1", ID: "p2", AppliedVersion: 4, EtcdConnected: true, UpdatedAt: now, Rollout: "BFE1-v5"})
	h.staged(rollout.Staged{ID: "BFE1-v5", ProxyCluster: "BFE1", State: rollout.StageBaking, StableVersion: 4, CandidateVersion: 5,
		Stage: 0, Stages: 2, Selected: []string{"p1"}, StartedAt: now, StageStarted: now, BakeStarted: now,
		Gates: []rollout.Gate{{Name: "5xx", OK: true, Judged: true, Detail: "stage 5xx 0.0% of 40 answers"}}})
	// Each proxy runs its stage's target, but the rollout still moves: not
	// converged (exit 4), and the line says why.
	out, errs, code := h.run("", "rollout", "status", "--proxy-cluster", "BFE1")
	if code != ExitNotConverged || !strings.Contains(errs, "not converged: BFE1 WAITING (staged rollout BFE1-v5 at stage 1 of 2 (BAKING))") || strings.Contains(out, "converged: every") {
		t.Fatalf("rollout status mid-rollout: exit %d\n%s\n%s", code, out, errs)
	}
	for _, want := range []string{"p1", "SYNCED", "ROLLOUT BFE1-v5", "BAKING stage 1/2", "stable v4 → candidate v5", "gate 5xx", "stage 5xx 0.0% of 40 answers"} {
		if !strings.Contains(out, want) {
			t.Fatalf("rollout status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "PENDING") || strings.Contains(out, "AHEAD") {
		t.Fatalf("each proxy's target is its stage's version:\n%s", out)
	}
	if _, errs, code := h.run("", "rollout", "resume", "--proxy-cluster", "BFE1"); code != ExitUsage || !strings.Contains(errs, "BFE1-v5 is BAKING") {
		t.Fatalf("resume of a baking rollout: exit %d\n%s", code, errs)
	}
	h.mustRun("rollout", "promote", "--all", "--proxy-cluster", "BFE1")
	k, _ := h.layout.RolloutOp("BFE1")
	r, err := h.cli.Get(context.Background(), k)
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("no request written: %v", err)
	}
	var op rollout.RolloutOp
	if err := json.Unmarshal(r.Kvs[0].Value, &op); err != nil || op.Op != rollout.OpPromote || !op.All || op.Author != defaultAuthor() {
		t.Fatalf("request %s (%v)", r.Kvs[0].Value, err)
	}
}

// A --wait whose write a staged rollout rolled back ends at once (exit 4)
// on a table that says BLOCKED — what rollout status says once the
// scheduler reports the rollback —, not WAITING.
func TestWaitEndsBlockedOnARollback(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	_, rev0 := h.desired()
	now := time.Now().UTC()
	h.publishIn("L1", demoSnapshot("BFE1", 4, map[string]int{"SC1": 50, "SC2": 50}, false))
	h.status(report.ProxyStatus{ProxyCluster: "BFE1", ID: "p1", AppliedLineage: "L1", AppliedVersion: 4, EtcdConnected: true, UpdatedAt: now})
	sched := func(rev int64, result, why string) {
		h.schedStatus(report.SchedulerStatus{LeaderID: "S1", InputRevision: rev, ProxyClusters: map[string]report.PublishResult{
			"BFE1": {Result: result, Lineage: "L1", Version: 4, InputRevision: rev, Reason: why}}})
	}
	sched(rev0, report.PublishPublished, "")
	done := h.runAsync("weights", "set", "--cluster", "demo-main", "--proxy-cluster", "BFE1", "SC1=0", "SC2=100", "--wait", "--wait-timeout", "30s")
	rev := h.nextRevision(rev0)
	// The candidate of that write failed its gate and was rolled back; the
	// stable content is live again (v4 here).
	rec := rollout.Staged{ID: "BFE1-v5", ProxyCluster: "BFE1", State: rollout.StageRolledBack, StableVersion: 4, CandidateVersion: 5,
		CandidateHash: "sha256:c5", InputRevision: rev, Reason: "gate 5xx failed", StartedAt: now, EndedAt: now}
	h.staged(rec)
	r := <-done
	want := []string{fmt.Sprintf("BFE1 BLOCKED (rollout BFE1-v5 of input revision %d was rolled back: gate 5xx failed)", rev)}
	if got := clusterLines(r.out); r.code != ExitNotConverged || !slices.Equal(got, want) {
		t.Fatalf("weights set --wait ended on a rollback: exit %d, lines %q, want %q\n%s\n%s", r.code, got, want, r.out, r.errs)
	}
	// The scheduler reports it: rollout status and a second --wait say the
	// same BLOCKED line.
	why := "rollout BFE1-v5 was rolled back (gate 5xx failed); lbctl rollout retry or new inputs release it"
	sched(rev, report.PublishRolledBack, why)
	want = []string{fmt.Sprintf("BFE1 BLOCKED (input revision %d not published: %s)", rev, why)}
	status, _, code := h.run("", "rollout", "status")
	waited, _, wcode := h.run("", "rollout", "status", "--wait", "--wait-timeout", "30s", "--revision", fmt.Sprint(rev))
	if got, wgot := clusterLines(status), clusterLines(waited); code != ExitNotConverged || wcode != ExitNotConverged || !slices.Equal(got, want) || !slices.Equal(wgot, want) {
		t.Fatalf("after the scheduler's report: rollout status exit %d %q, --wait exit %d %q, want %q\n%s\n%s", code, got, wcode, wgot, want, status, waited)
	}
}

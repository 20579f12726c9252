package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/report"
	rs "github.com/sluicelb/sluice/api/rollout"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/scheduler/internal/publish"
	"github.com/sluicelb/sluice/testkit/etcdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var layout = keys.MustNew("/sluice")

// harness: a real etcd, a leader's publisher and controller on a fake
// clock, and proxies simulated by their status and demand records (each
// "applies" what the pointer names for its id, like configwatch).
type harness struct {
	t      *testing.T
	ctx    context.Context
	cli    *clientv3.Client
	pub    *publish.Publisher
	lead   *publish.Leadership
	c      *Controller
	mu     sync.Mutex
	clock  time.Time
	ids    []string
	ran    map[string][]uint64 // versions each proxy applied
	reject map[string]string   // proxy → reason it rejects candidates with
}

func newHarness(t *testing.T, ids ...string) *harness {
	_, cli := etcdtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	h := &harness{t: t, ctx: ctx, cli: cli, clock: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), ids: ids,
		ran: map[string][]uint64{}, reject: map[string]string{}}
	h.pub = publish.New(cli, layout, publish.Options{Author: "test", Now: h.now})
	l, err := publish.NewElector(cli, layout, "S1", 5*time.Second).Campaign(ctx, "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Resign(context.Background()) })
	h.lead = l
	h.c = New(cli, layout, h.pub, Options{Now: h.now})
	return h
}

func (h *harness) now() time.Time { h.mu.Lock(); defer h.mu.Unlock(); return h.clock }
func (h *harness) advance(d time.Duration) {
	h.mu.Lock()
	h.clock = h.clock.Add(d)
	h.mu.Unlock()
}

// snap is BFE1's snapshot with SC1 weight w (SC2 the rest).
func snap(w int) *snapshot.Snapshot {
	s := &snapshot.Snapshot{
		Meta:     snapshot.Meta{ProxyCluster: "BFE1"},
		Settings: snapshot.Settings{IDC: "IDC1"},
		Products: map[string]config.Product{"demo": {Hosts: []string{"demo.example"}, Rules: []config.Rule{{Cond: "default_t()", Cluster: "demo-main"}}}},
		Clusters: map[string]snapshot.Cluster{"demo-main": {
			SubClusters: map[string]config.SubCluster{
				"SC1": {IDC: "IDC1", Instances: []config.Instance{{Addr: "127.0.0.1", Port: 8001, Weight: 1}}},
				"SC2": {IDC: "IDC2", Instances: []config.Instance{{Addr: "127.0.0.1", Port: 8002, Weight: 1}}},
			},
			Policy: config.DefaultPolicy(),
			Row:    snapshot.Row{Denominator: 100, Weights: map[string]int{"SC1": w, "SC2": 100 - w}},
		}},
	}
	s.Meta.Hash = snapshot.ContentHash(s)
	return s
}

func (h *harness) publish(s *snapshot.Snapshot, pol *config.RolloutPolicy) Outcome {
	h.t.Helper()
	out, err := h.c.Publish(h.ctx, h.lead, "BFE1", s.Meta.Hash, func() (*snapshot.Snapshot, string) { return s, "test" }, pol, "", 7)
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

func (h *harness) pointer() snapshot.Pointer {
	h.t.Helper()
	p, _, err := h.pub.Current(h.ctx, "BFE1")
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// follow makes every proxy apply what the pointer names for it (or reject
// a candidate) and report it.
func (h *harness) follow() {
	h.t.Helper()
	ptr := h.pointer()
	for _, id := range h.ids {
		eff := ptr.For(id)
		st := report.ProxyStatus{ProxyCluster: "BFE1", ID: id, EtcdConnected: true, UpdatedAt: h.now(), AppliedLineage: ptr.Lineage}
		ran := h.ran[id]
		if why := h.reject[id]; why != "" && ptr.Candidate != nil && eff.Version == ptr.Candidate.Version {
			st.RejectedVersion, st.RejectedReason = eff.Version, why
		} else if len(ran) == 0 || ran[len(ran)-1] < eff.Version {
			h.ran[id] = append(ran, eff.Version)
		}
		st.AppliedVersion = h.ran[id][len(h.ran[id])-1]
		h.put(layout.Status, id, st)
	}
}

// traffic writes each proxy's demand report: 100 answers, bad of them
// 5xx, all within 2 ms.
func (h *harness) traffic(bad func(id string) int) {
	h.t.Helper()
	h.trafficSlow(bad, func(string) int { return 1 })
}

// trafficSlow is traffic with each proxy's answers in latency bucket
// bucket(id).
func (h *harness) trafficSlow(bad func(id string) int, bucket func(id string) int) {
	h.t.Helper()
	h.follow() // proxies rewrite their status every report interval too
	for _, id := range h.ids {
		tr := report.Traffic{Requests: 100, SubClusters: map[string]uint64{"SC1": 50, "SC2": 50},
			Status: report.StatusCounts{S2xx: uint64(100 - bad(id)), S5xx: uint64(bad(id))}, LatencyMs: make([]uint64, report.LatencyBuckets)}
		tr.LatencyMs[bucket(id)] = 100
		h.put(layout.Demand, id, report.Demand{ProxyCluster: "BFE1", ID: id, WindowSeconds: 10, UpdatedAt: h.now(),
			Clusters: map[string]report.ClusterDemand{"demo-main": {RPS: 10, Traffic: &tr}}})
	}
}

func (h *harness) put(key func(pc, id string) (string, error), id string, v any) {
	h.t.Helper()
	k, _ := key("BFE1", id)
	raw, _ := json.Marshal(v)
	if _, err := h.cli.Put(h.ctx, k, string(raw)); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) step(pol *config.RolloutPolicy) rs.Staged {
	h.t.Helper()
	rec, _, err := h.c.Step(h.ctx, h.lead, "BFE1", pol)
	if err != nil {
		h.t.Fatal(err)
	}
	return rec
}

func (h *harness) op(op string) {
	h.t.Helper()
	k, _ := layout.RolloutOp("BFE1")
	raw, _ := json.Marshal(rs.RolloutOp{Op: op, Author: "alice", At: h.now()})
	if _, err := h.cli.Put(h.ctx, k, string(raw)); err != nil {
		h.t.Fatal(err)
	}
}

var ids4 = []string{"p1", "p2", "p3", "p4"}

func twoStages() *config.RolloutPolicy {
	return &config.RolloutPolicy{Stages: []config.RolloutStage{
		{Count: new(1), Bake: new(config.Duration(10 * time.Second))},
		{Percent: new(100.0), Bake: new(config.Duration(10 * time.Second))},
	}}
}

func none(string) int { return 0 }

// failing: proxy id answers percent 5xx, the others none.
func failing(id string, percent int) func(string) int {
	return func(p string) int {
		if p == id {
			return percent
		}
		return 0
	}
}

// start publishes the stable v1 to every proxy, then the candidate v2.
func (h *harness) start(pol *config.RolloutPolicy) (canary string) {
	h.t.Helper()
	h.publish(snap(50), nil)
	h.follow()
	out := h.publish(snap(60), pol)
	if out.Outcome != publish.Published || out.Version != 2 {
		h.t.Fatalf("candidate publish %+v, want v2 published", out)
	}
	ptr := h.pointer()
	if ptr.Version != 1 || ptr.Candidate == nil || ptr.Candidate.Version != 2 || len(ptr.Candidate.IDs) != 1 {
		h.t.Fatalf("pointer %+v, want stable v1 with candidate v2 on one proxy", ptr)
	}
	return ptr.Candidate.IDs[0]
}

// A good change goes through every stage: only the canary runs it during
// the first stage, then everyone, then it is the stable snapshot.
func TestGoodChangePromotedThroughStages(t *testing.T) {
	h := newHarness(t, ids4...)
	pol := twoStages()
	canary := h.start(pol)
	if rec := h.step(pol); rec.State != rs.StageProgressing {
		t.Fatalf("before any proxy applied: %s, want PROGRESSING", rec.State)
	}
	h.follow()
	if rec := h.step(pol); rec.State != rs.StageBaking || strings.Join(rec.Selected, ",") != canary {
		t.Fatalf("after the canary applied: %+v, want BAKING with %s selected", rec, canary)
	}
	for _, id := range ids4 {
		want := "[1]"
		if id == canary {
			want = "[1 2]"
		}
		if got := fmt.Sprint(h.ran[id]); got != want {
			t.Fatalf("stage 1: %s ran %s, want %s", id, got, want)
		}
	}
	h.advance(5 * time.Second)
	h.traffic(none)
	if rec := h.step(pol); rec.State != rs.StageBaking {
		t.Fatalf("mid-bake: %s, want BAKING", rec.State)
	}
	h.advance(6 * time.Second)
	h.traffic(none)
	rec := h.step(pol)
	if rec.State != rs.StageProgressing || rec.Stage != 1 {
		t.Fatalf("after the bake: %+v, want stage 2 PROGRESSING", rec)
	}
	h.follow()
	if rec := h.step(pol); rec.State != rs.StageBaking {
		t.Fatalf("stage 2 applied: %s, want BAKING", rec.State)
	}
	h.advance(11 * time.Second)
	h.traffic(none)
	if rec := h.step(pol); rec.State != rs.StageDone {
		t.Fatalf("after the last bake: %+v, want DONE", rec)
	}
	if p := h.pointer(); p.Version != 2 || p.Candidate != nil {
		t.Fatalf("pointer %+v, want plain v2", p)
	}
	if m, ok := h.pointer().Push.ManifestFor(h.pointer()); !ok || m.Meta.Hash != h.pointer().Hash {
		t.Fatalf("promoted pointer's push: ok %v, manifest hash %s; want v2's", ok, m.Meta.Hash)
	}
}

// A change whose canary answers 5xx while the stable proxies do not is
// rolled back: the stable content comes back as v3, the other proxies never
// ran v2, and the same inputs are held until retried.
func TestBadChangeRolledBack(t *testing.T) {
	h := newHarness(t, ids4...)
	pol := twoStages()
	canary := h.start(pol)
	h.follow()
	h.step(pol)
	h.advance(2 * time.Second)
	h.traffic(failing(canary, 40))
	rec := h.step(pol)
	if rec.State != rs.StageRolledBack || rec.FailedGate != "5xx" || rec.RollbackVersion != 3 ||
		!strings.Contains(rec.Reason, "stage 5xx 40.0% of 100 answers") || !strings.Contains(rec.Reason, "stable 0.0% of 300 answers") {
		t.Fatalf("record %+v, want ROLLED_BACK by the 5xx gate with its figures, rollback v3", rec)
	}
	p := h.pointer()
	if p.Version != 3 || p.Candidate != nil || p.Hash != snap(50).Meta.Hash {
		t.Fatalf("pointer %+v, want plain v3 with the stable content", p)
	}
	h.follow()
	for _, id := range ids4 {
		want := "[1 3]"
		if id == canary {
			want = "[1 2 3]"
		}
		if got := fmt.Sprint(h.ran[id]); got != want {
			t.Fatalf("%s ran %s, want %s", id, got, want)
		}
	}
	out := h.publish(snap(60), pol)
	if out.Held == "" || out.Outcome != publish.Unchanged || h.pointer().Version != 3 {
		t.Fatalf("same inputs again: %+v, want held", out)
	}
	h.op(rs.OpRetry)
	if out := h.publish(snap(60), pol); out.Outcome != publish.Published || out.Version != 4 {
		t.Fatalf("after retry: %+v, want a new rollout of v4", out)
	}
}

// A 5xx burst on every proxy at once is not the canary's: the stage passes.
func TestFleetWideBurstNotBlamedOnCanary(t *testing.T) {
	h := newHarness(t, ids4...)
	pol := twoStages()
	h.start(pol)
	h.follow()
	h.step(pol)
	h.advance(11 * time.Second)
	h.traffic(func(string) int { return 50 })
	rec := h.step(pol)
	if rec.State != rs.StageProgressing || rec.Stage != 1 || rec.Baseline == nil || rec.Baseline.Ratio5xx != 0.5 {
		t.Fatalf("record %+v, want the next stage (the burst hit the stable proxies too) and their 50 %% baseline", rec)
	}
	// The last stage has no stable proxies: the burst still going on is
	// judged against the stable proxies' baseline, not blamed.
	h.follow()
	h.step(pol)
	h.advance(11 * time.Second)
	h.traffic(func(string) int { return 50 })
	if rec := h.step(pol); rec.State != rs.StageDone {
		t.Fatalf("last stage: %+v, want DONE", rec)
	}
}

// A rejection by a selected proxy fails the apply gate with its reason.
func TestCanaryRejectionFailsApplyGate(t *testing.T) {
	h := newHarness(t, ids4...)
	pol := twoStages()
	canary := h.start(pol)
	h.reject[canary] = "apply: cluster demo-main: boom"
	h.follow()
	rec := h.step(pol)
	if rec.State != rs.StageRolledBack || rec.FailedGate != "apply" || !strings.Contains(rec.Reason, "proxy "+canary+" rejected v2: apply: cluster demo-main: boom") {
		t.Fatalf("record %+v, want ROLLED_BACK by the apply gate naming %s and its reason", rec, canary)
	}
}

// A proxy that does not apply within the apply timeout fails the gate.
func TestApplyTimeout(t *testing.T) {
	h := newHarness(t, ids4...)
	pol := twoStages()
	pol.Gates.ApplyTimeout = new(config.Duration(5 * time.Second))
	canary := h.start(pol)
	h.advance(6 * time.Second)
	h.follow() // reports, but the canary's record still says v1
	h.ran[canary] = h.ran[canary][:1]
	h.put(layout.Status, canary, report.ProxyStatus{ProxyCluster: "BFE1", ID: canary, EtcdConnected: true, UpdatedAt: h.now(),
		AppliedLineage: h.pointer().Lineage, AppliedVersion: 1})
	rec := h.step(pol)
	if rec.State != rs.StageRolledBack || !strings.Contains(rec.Reason, "did not apply v2 within 5s: "+canary) {
		t.Fatalf("record %+v, want ROLLED_BACK naming the late proxy", rec)
	}
}

// Pause holds the stage past its bake; resume restarts it; abort brings
// the stable content back.
func TestPauseResumeAbort(t *testing.T) {
	h := newHarness(t, ids4...)
	pol := twoStages()
	h.start(pol)
	h.follow()
	h.step(pol)
	h.op(rs.OpPause)
	if rec := h.step(pol); rec.State != rs.StagePaused || rec.PausedState != rs.StageBaking {
		t.Fatalf("after pause: %+v", rec)
	}
	h.advance(20 * time.Second)
	h.traffic(none)
	if rec := h.step(pol); rec.State != rs.StagePaused || rec.Stage != 0 {
		t.Fatalf("paused past the bake: %+v, want still PAUSED in stage 1", rec)
	}
	h.op(rs.OpResume)
	if rec := h.step(pol); rec.State != rs.StageBaking || !rec.BakeStarted.Equal(h.now()) {
		t.Fatalf("after resume: %+v, want BAKING from now", rec)
	}
	h.op(rs.OpAbort)
	rec := h.step(pol)
	if rec.State != rs.StageAborted || !strings.Contains(rec.Reason, "aborted by alice") {
		t.Fatalf("after abort: %+v", rec)
	}
	if p := h.pointer(); p.Candidate != nil || p.Version != 3 || p.Hash != snap(50).Meta.Hash {
		t.Fatalf("pointer %+v, want plain v3 with the stable content", p)
	}
	// The operator's abort holds the same inputs, like a rollback.
	if out := h.publish(snap(60), pol); out.Held == "" || h.pointer().Version != 3 {
		t.Fatalf("aborted inputs again: %+v, want held", out)
	}
	if out := h.publish(snap(70), pol); out.Outcome != publish.Published || out.Version != 4 {
		t.Fatalf("new inputs after an abort: %+v, want a new rollout of v4", out)
	}
}

// Manual promotion waits for lbctl rollout promote.
func TestManualPromotion(t *testing.T) {
	h := newHarness(t, ids4...)
	pol := twoStages()
	pol.Promotion = config.PromotionManual
	h.start(pol)
	h.follow()
	h.step(pol)
	h.advance(11 * time.Second)
	h.traffic(none)
	if rec := h.step(pol); rec.State != rs.StageAwaitingPromotion {
		t.Fatalf("after the bake: %+v, want AWAITING_PROMOTION", rec)
	}
	h.op(rs.OpPromote)
	if rec := h.step(pol); rec.State != rs.StageProgressing || rec.Stage != 1 {
		t.Fatalf("after promote: %+v, want stage 2", rec)
	}
}

// A new change mid-rollout: the stable content first, then a new rollout.
func TestSupersededRollout(t *testing.T) {
	h := newHarness(t, ids4...)
	pol := twoStages()
	h.start(pol)
	h.follow()
	out := h.publish(snap(70), pol)
	p := h.pointer()
	if out.Outcome != publish.Published || p.Version != 3 || p.Hash != snap(50).Meta.Hash || p.Candidate == nil || p.Candidate.Version != 4 {
		t.Fatalf("superseding publish %+v pointer %+v, want stable content v3 with candidate v4", out, p)
	}
}

// The canary's 5xx are not judged before the stable proxies have reported
// since the bake started (they may be failing as much); then they are.
func TestCanaryWaitsForStableReports(t *testing.T) {
	h := newHarness(t, ids4...)
	pol := twoStages()
	canary := h.start(pol)
	h.follow()
	h.step(pol)
	h.advance(2 * time.Second)
	h.traffic(failing(canary, 40))
	// The stable proxies' reports predate the bake: only the canary's count.
	for _, id := range ids4 {
		if id != canary {
			h.put(layout.Demand, id, report.Demand{ProxyCluster: "BFE1", ID: id, UpdatedAt: h.now().Add(-time.Minute)})
		}
	}
	if rec := h.step(pol); rec.State != rs.StageBaking {
		t.Fatalf("without stable reports: %+v, want still BAKING", rec)
	}
	h.advance(time.Second)
	h.traffic(failing(canary, 40))
	if rec := h.step(pol); rec.State != rs.StageRolledBack {
		t.Fatalf("with stable reports: %+v, want ROLLED_BACK", rec)
	}
}

// promote --all skips the remaining stages, also from PAUSED.
func TestPromoteAll(t *testing.T) {
	h := newHarness(t, ids4...)
	pol := twoStages()
	h.start(pol)
	h.follow()
	h.step(pol)
	h.op(rs.OpPause)
	h.step(pol)
	k, _ := layout.RolloutOp("BFE1")
	raw, _ := json.Marshal(rs.RolloutOp{Op: rs.OpPromote, All: true, Author: "alice"})
	if _, err := h.cli.Put(h.ctx, k, string(raw)); err != nil {
		t.Fatal(err)
	}
	rec := h.step(pol)
	if rec.State != rs.StageUrgent || !strings.Contains(rec.Reason, "every proxy at once by alice") {
		t.Fatalf("after promote --all: %+v", rec)
	}
	if p := h.pointer(); p.Candidate != nil || p.Version != 2 {
		t.Fatalf("pointer %+v, want plain v2", p)
	}
	// The candidate's push rides on to the promotion: the proxies outside
	// the stage read little or nothing.
	if m, ok := h.pointer().Push.ManifestFor(h.pointer()); !ok || m.Meta.Hash != h.pointer().Hash {
		t.Fatalf("promoted pointer's push: ok %v, manifest hash %s; want v2's", ok, m.Meta.Hash)
	}
}

// A canary that stops reporting during the bake (killed, crash-looping on
// the candidate) fails the apply gate: it is not silently dropped.
func TestCanaryGoneFailsGate(t *testing.T) {
	h := newHarness(t, ids4...)
	pol := twoStages()
	canary := h.start(pol)
	h.follow()
	h.step(pol)
	frozen := h.now()
	h.advance(31 * time.Second) // past the bake and the apply timeout (30s)
	others := slicesWithout(ids4, canary)
	h.ids = others
	h.traffic(none) // everyone but the canary reports
	rec := h.step(pol)
	want := fmt.Sprintf("%s (no report since %s)", canary, frozen.Format(time.RFC3339))
	if rec.State != rs.StageRolledBack || rec.FailedGate != "apply" || !strings.Contains(rec.Reason, want) {
		t.Fatalf("record %+v, want ROLLED_BACK by the apply gate naming %q", rec, want)
	}
}

func slicesWithout(ids []string, drop string) []string {
	var out []string
	for _, id := range ids {
		if id != drop {
			out = append(out, id)
		}
	}
	return out
}

// A canary answering slowly (p99 ≤ 500 ms against the stable ≤ 2 ms, taken
// as 25 ms: limit 75 ms) is rolled back by the p99 gate.
func TestSlowCanaryRolledBackByP99(t *testing.T) {
	h := newHarness(t, ids4...)
	pol := twoStages()
	canary := h.start(pol)
	h.follow()
	h.step(pol)
	h.advance(2 * time.Second)
	h.trafficSlow(none, func(id string) int {
		if id == canary {
			return 8 // ≤ 500 ms
		}
		return 1
	})
	rec := h.step(pol)
	if rec.State != rs.StageRolledBack || rec.FailedGate != "p99" || !strings.Contains(rec.Reason, "stage p99 ≤ 500 ms, stable p99 ≤ 2 ms; limit 75 ms") {
		t.Fatalf("record %+v, want ROLLED_BACK by the p99 gate with its figures", rec)
	}
}

// A canary dropping traffic its row does not blackhole fails the blackhole
// gate; with share_tolerance_points set, a realised share off its weight
// fails the share gate.
func TestShareAndBlackholeGates(t *testing.T) {
	for _, c := range []struct {
		name     string
		gates    config.RolloutGates
		subs     map[string]uint64
		gate     string
		contains string
	}{
		{"blackhole", config.RolloutGates{}, map[string]uint64{"SC1": 40, "SC2": 40, config.Blackhole: 20}, "blackhole",
			"cluster demo-main: blackhole share 20.0 points, weight 0.0 + 5"},
		{"share", config.RolloutGates{ShareTolerance: 10, BlackholeEpsilon: new(-1.0)}, map[string]uint64{"SC1": 90, "SC2": 10}, "share",
			"cluster demo-main sub-cluster SC1: realised 90.0 points, weight 60.0 ± 10"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, ids4...)
			pol := twoStages()
			pol.Gates = c.gates
			canary := h.start(pol) // the candidate's row: SC1 60, SC2 40
			h.follow()
			h.step(pol)
			h.advance(2 * time.Second)
			h.traffic(none)
			tr := report.Traffic{Requests: 100, SubClusters: c.subs, Status: report.StatusCounts{S2xx: 100}, LatencyMs: make([]uint64, report.LatencyBuckets)}
			tr.LatencyMs[1] = 100
			h.put(layout.Demand, canary, report.Demand{ProxyCluster: "BFE1", ID: canary, UpdatedAt: h.now(),
				Clusters: map[string]report.ClusterDemand{"demo-main": {Traffic: &tr}}})
			rec := h.step(pol)
			if rec.State != rs.StageRolledBack || rec.FailedGate != c.gate || !strings.Contains(rec.Reason, c.contains) {
				t.Fatalf("record %+v, want ROLLED_BACK by the %s gate: %q", rec, c.gate, c.contains)
			}
		})
	}
}

// bake: 0s is no bake: once the canary applied the candidate, the next
// judgement passes the stage without waiting; the bake absent, the stage
// bakes its 60 s.
func TestZeroBake(t *testing.T) {
	for _, c := range []struct {
		name  string
		bake  *config.Duration
		state string
		stage int
	}{{"bake: 0s", new(config.Duration(0)), rs.StageProgressing, 1}, {"bake absent", nil, rs.StageBaking, 0}} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, ids4...)
			pol := &config.RolloutPolicy{Stages: []config.RolloutStage{{Count: new(1), Bake: c.bake}, {Percent: new(100.0), Bake: c.bake}}}
			h.start(pol)
			h.follow()
			if rec := h.step(pol); rec.State != rs.StageBaking {
				t.Fatalf("after the canary applied: %+v, want BAKING", rec)
			}
			h.advance(time.Second)
			h.traffic(none)
			if rec := h.step(pol); rec.State != c.state || rec.Stage != c.stage {
				t.Fatalf("a second later: %+v, want stage %d %s", rec, c.stage+1, c.state)
			}
		})
	}
}

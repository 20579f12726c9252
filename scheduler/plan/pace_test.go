package plan

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
)

// TestMaxStepIsPacedPerStepInterval drives the planner as the scheduler
// does, with an injected clock: every round publishes what it computed (the
// snapshot created at that instant) and the next round starts 50 ms later.
// A demand burst whose optimum is 50 points away moves the row at most
// max_step points per step_interval.
func TestMaxStepIsPacedPerStepInterval(t *testing.T) {
	st := twoIDC(1000, 1000)
	st.Scheduler.MaxStepPercent = 10
	st.Scheduler.StepInterval = config.Duration(30 * time.Second)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := NewPlanner()
	prev := prevWith(st, map[string]map[string]int{"BFE1": {"SC1": 50, "SC2": 50}, "BFE2": {"SC1": 0, "SC2": 100}})
	round := func(now time.Time) (*Plan, Result) {
		t.Helper()
		pl, err := p.ComputePlan(View{State: st, Demand: demand(100, 100), Now: now}, prev)
		if err != nil {
			t.Fatal(err)
		}
		res := mustCompute(t, p, View{State: st, Demand: demand(100, 100), Now: now}, prev)
		next := map[string]*snapshot.Snapshot{}
		for pc, s := range res.Snapshots {
			c := *s
			c.Meta.CreatedAt = now
			if prev[pc] != nil && prev[pc].Meta.Hash == c.Meta.Hash {
				c.Meta.CreatedAt = prev[pc].Meta.CreatedAt // unchanged: not republished
			}
			next[pc] = &c
		}
		prev = next
		return pl, res
	}
	sc1 := func() int { return prev["BFE1"].Clusters["demo-main"].Row.Weights["SC1"] }

	// Ten rounds in 500 ms (the old behaviour moved 50 points here).
	var pl *Plan
	var res Result
	for i := range 10 {
		pl, res = round(t0.Add(time.Duration(i) * 50 * time.Millisecond))
	}
	if got := sc1(); got != 60 {
		t.Fatalf("after ten rounds in 500ms SC1 = %d, want 60 (one step of 10)", got)
	}
	if want := t0.Add(30 * time.Second); !pl.NextPace.Equal(want) {
		t.Fatalf("NextPace %v, want %v", pl.NextPace, want)
	}
	if g := guardrails(res, "BFE1", "demo-main"); !strings.Contains(g, "max_step_percent=10 per step_interval=30s") {
		t.Fatalf("guardrails %q do not say the row is paced", g)
	}
	// Just before the interval ends: still held.
	round(t0.Add(30*time.Second - time.Millisecond))
	if got := sc1(); got != 60 {
		t.Fatalf("at 29.999s SC1 = %d, want 60", got)
	}
	// Each interval allows one more step, never more.
	for i := 1; i <= 2; i++ {
		at := t0.Add(time.Duration(i) * 30 * time.Second)
		for j := range 5 {
			round(at.Add(time.Duration(j) * 50 * time.Millisecond))
		}
		if got, want := sc1(), min(100, 60+10*i); got != want {
			t.Fatalf("interval %d: SC1 = %d, want %d", i, got, want)
		}
	}

	// The safe direction is never paced: SC2 loses its instance while the
	// row is held, and its weight leaves at once.
	moved := sc1() // 80, and paced until 90s
	sc := st.Clusters["demo-main"].SubClusters["SC2"]
	sc.Instances = []config.Instance{{Addr: "10.0.2.1", Port: 8080, Weight: 1, CapacityRPS: 1000, State: config.StateUnhealthy}}
	st.Clusters["demo-main"].SubClusters["SC2"] = sc
	pl, _ = round(t0.Add(2*30*time.Second + time.Second))
	if pl.NextPace.IsZero() {
		t.Fatalf("the row is not paced at 61s")
	}
	if got := sc1(); got != 100 || moved != 80 {
		t.Fatalf("SC2 unavailable: SC1 = %d (was %d), want 100 at once", got, moved)
	}
}

// A pure plan (no clock, as lbctl runs it) is not paced.
func TestNoPacingWithoutClock(t *testing.T) {
	st := twoIDC(1000, 1000)
	st.Scheduler.MaxStepPercent = 10
	p := NewPlanner()
	prev := prevWith(st, map[string]map[string]int{"BFE1": {"SC1": 50, "SC2": 50}})
	for range 3 {
		res := mustCompute(t, p, View{State: st, Demand: demand(100, 100)}, prev)
		prev["BFE1"] = res.Snapshots["BFE1"]
	}
	if got := prev["BFE1"].Clusters["demo-main"].Row.Weights["SC1"]; got != 80 {
		t.Fatalf("SC1 = %d, want 80 (three unpaced steps)", got)
	}
}

// A row that dropped everything (every sub-cluster drained) comes back at
// once when a sub-cluster is undrained, even while paced: held, it would be
// a full drop without allow_full_drop, which the publisher refuses.
func TestFullDropIsNotPacedBack(t *testing.T) {
	st := twoIDC(1000, 1000)
	st.Scheduler.MaxStepPercent = 10
	st.Scheduler.StepInterval = config.Duration(30 * time.Second)
	st.Drains = []config.Drain{{Cluster: "demo-main", SubCluster: "SC1"}, {Cluster: "demo-main", SubCluster: "SC2"}}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := NewPlanner()
	prev := prevWith(st, map[string]map[string]int{"BFE1": {"SC1": 50, "SC2": 50}, "BFE2": {"SC1": 50, "SC2": 50}})
	round := func(now time.Time) Result {
		t.Helper()
		res := mustCompute(t, p, View{State: st, Demand: demand(100, 100), Now: now}, prev)
		next := map[string]*snapshot.Snapshot{}
		for pc, s := range res.Snapshots {
			c := *s
			c.Meta.CreatedAt = now
			next[pc] = &c
		}
		prev = next
		return res
	}
	round(t0)
	if r := prev["BFE1"].Clusters["demo-main"].Row; r.Weights[config.Blackhole] != 100 || !r.AllowFullDrop {
		t.Fatalf("everything drained: row %+v, want a full drop allowed", r)
	}
	st.Drains = st.Drains[:1] // SC2 back, 100 ms later: well within the interval
	res := round(t0.Add(100 * time.Millisecond))
	wantRow(t, res, "BFE1", "demo-main", map[string]int{"SC1": 0, "SC2": 100})
	if n := strings.Join(res.Snapshots["BFE1"].Clusters["demo-main"].Explanation.Notes, "; "); !strings.Contains(n, "the previous row dropped everything") {
		t.Fatalf("notes %q do not say why max-step was not applied", n)
	}
}

// TestMaxStep100IsNotPaced: max_step_percent=100 turns the guardrail off,
// pacing included: a row that moved at t0 moves again 50 ms later, within
// its step_interval.
func TestMaxStep100IsNotPaced(t *testing.T) {
	settings := func(st *config.State) *config.State {
		st.Scheduler.MaxStepPercent = 100
		st.Scheduler.StepInterval = config.Duration(30 * time.Second)
		return st
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := NewPlanner()
	st := settings(twoIDC(1000, 1000))
	prev := prevWith(st, map[string]map[string]int{"BFE1": {"SC1": 50, "SC2": 50}, "BFE2": {"SC1": 0, "SC2": 100}})
	res := mustCompute(t, p, View{State: st, Demand: demand(100, 100), Now: t0}, prev)
	wantRow(t, res, "BFE1", "demo-main", map[string]int{"SC1": 100, "SC2": 0})
	next := map[string]*snapshot.Snapshot{}
	for pc, s := range res.Snapshots {
		c := *s
		c.Meta.CreatedAt = t0
		next[pc] = &c
	}
	// SC1 now serves 50 rps of BFE1's 100.
	res = mustCompute(t, p, View{State: settings(twoIDC(50, 1000)), Demand: demand(100, 100), Now: t0.Add(50 * time.Millisecond)}, next)
	wantRow(t, res, "BFE1", "demo-main", map[string]int{"SC1": 50, "SC2": 50})
}

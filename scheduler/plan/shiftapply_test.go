package plan

import (
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

func TestShiftResultsSayWhatMoved(t *testing.T) {
	st := twoIDC(1000, 1000)
	st.Pins = []config.Pin{{ProxyCluster: "BFE1", Cluster: "demo-main", Weights: map[string]int{"SC1": 15, "SC2": 85}}}
	sh := func(id string, pct int, to string) ActiveShift {
		return ActiveShift{Shift: config.Shift{ID: id, ProxyCluster: "BFE1", Cluster: "demo-main", From: "IDC1", To: to, Percent: 50}, AppliedPercent: pct}
	}
	for _, c := range []struct {
		sh   ActiveShift
		want ShiftResult
	}{
		{sh("capped", 50, "IDC2"), ShiftResult{Asked: 50, Moved: 15, Reason: "IDC1 had 15"}},
		{sh("fits", 10, "IDC2"), ShiftResult{Asked: 10, Moved: 10}},
		{sh("nowhere", 10, "IDC3"), ShiftResult{Asked: 10, Reason: "no available sub-cluster in IDC3"}},
		// Applied 0 % so far (a paced shift before its first step): nothing
		// to do, and nothing to explain.
		{sh("not started", 0, "IDC2"), ShiftResult{}},
	} {
		pl, err := NewPlanner().ComputePlan(View{State: st, Demand: demand(100, 100), Shifts: []ActiveShift{c.sh}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := pl.ShiftResults()
		if len(got) != 1 || got[c.sh.Shift.ID] != c.want {
			t.Errorf("%s: results %+v, want %+v", c.sh.Shift.ID, got, c.want)
		}
	}
}

// TestShiftThatMovedNothingKeepsMaxStep: only a shift that moved points
// takes over the pace of its row; one applied at 0 % leaves the max step
// on (prev 50/50, optimum 100/0, max_step_percent=10: 60/40).
func TestShiftThatMovedNothingKeepsMaxStep(t *testing.T) {
	st := twoIDC(1000, 1000)
	st.Scheduler.MaxStepPercent = 10
	prev := prevWith(st, map[string]map[string]int{"BFE1": {"SC1": 50, "SC2": 50}})
	sh := ActiveShift{Shift: config.Shift{ID: "s", ProxyCluster: "BFE1", Cluster: "demo-main", From: "IDC1", To: "IDC2", Percent: 50}}
	res := mustCompute(t, NewPlanner(), View{State: st, Demand: demand(100, 100), Shifts: []ActiveShift{sh}}, prev)
	wantRow(t, res, "BFE1", "demo-main", map[string]int{"SC1": 60, "SC2": 40})
}

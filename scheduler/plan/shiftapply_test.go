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

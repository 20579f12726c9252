package plan

import (
	"maps"
	"math"
	"reflect"
	"testing"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
)

// TestNormaliseZeroIsDefault: a State built in Go has zero settings; each
// zero means the default, as in a decoded State.
func TestNormaliseZeroIsDefault(t *testing.T) {
	d := config.DefaultSchedulerSettings()
	got := normalise(config.SchedulerSettings{})
	want := settings{den: d.Denominator, maxStep: d.MaxStepPercent, target: d.TargetUtilisationPercent,
		perWeight: d.CapacityPerWeightRPS, stepInterval: config.DefaultStepInterval}
	if got != want {
		t.Fatalf("normalise(zero) = %+v, want %+v", got, want)
	}
}

// TestAvailable: an instance takes traffic when its weight is positive and
// it is healthy (or says nothing).
func TestAvailable(t *testing.T) {
	for _, c := range []struct {
		in   config.Instance
		want bool
	}{
		{config.Instance{Weight: 1}, true},
		{config.Instance{Weight: 1, State: config.StateHealthy}, true},
		{config.Instance{Weight: 0}, false},
		{config.Instance{Weight: 1, State: config.StateDraining}, false},
		{config.Instance{Weight: 1, State: config.StateUnhealthy}, false},
	} {
		if got := Available(c.in); got != c.want {
			t.Errorf("Available(%+v) = %v, want %v", c.in, got, c.want)
		}
	}
}

// TestFixRowSum: a row that does not sum to den gets the difference on its
// largest entry (the first by name among equals); a row that does, or an
// empty one, is left as it is.
func TestFixRowSum(t *testing.T) {
	for _, c := range []struct {
		row, want map[string]int
	}{
		{map[string]int{"A": 33, "B": 34, "C": 32}, map[string]int{"A": 33, "B": 35, "C": 32}},
		{map[string]int{"A": 33, "B": 33, "C": 33}, map[string]int{"A": 34, "B": 33, "C": 33}},
		{map[string]int{"A": 60, "B": 41}, map[string]int{"A": 59, "B": 41}},
		{map[string]int{"A": 60, "B": 40}, map[string]int{"A": 60, "B": 40}},
		{map[string]int{}, map[string]int{}},
	} {
		row := maps.Clone(c.row)
		fixRowSum(row, 100)
		if !reflect.DeepEqual(row, c.want) {
			t.Errorf("fixRowSum(%v, 100) = %v, want %v", c.row, row, c.want)
		}
	}
}

func TestJoinComma(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{{nil, ""}, {[]string{"a"}, "a"}, {[]string{"a", "b", "c"}, "a, b, c"}} {
		if got := joinComma(c.in); got != c.want {
			t.Errorf("joinComma(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestCapacityFromWeight: an instance without capacity_rps serves its
// weight × capacity_per_weight_rps; the design example planned that way
// (SC1 weight 6, SC2 weight 8, 100 rps per weight) gives the rows of the
// same capacities given as capacity_rps (600 and 800).
func TestCapacityFromWeight(t *testing.T) {
	st := twoIDC(0, 0)
	for name, w := range map[string]int{"SC1": 6, "SC2": 8} {
		st.Clusters["demo-main"].SubClusters[name].Instances[0].Weight = w
	}
	res := mustCompute(t, NewPlanner(), View{State: st, Demand: demand(1000, 400)}, nil)
	wantRow(t, res, "BFE1", "demo-main", map[string]int{"SC1": 60, "SC2": 40})
	wantRow(t, res, "BFE2", "demo-main", map[string]int{"SC1": 0, "SC2": 100})
}

// TestPinMovesOffToWeightedOthersOnly: a pinned sub-cluster that is drained
// or has no available instance gives its points to the pin's other
// sub-clusters only when they have weight in the pin; sub-clusters at 0 in
// the pin are not "the pin's": the points go to the available ones by
// capacity (SC2 1, SC3 3: 25 and 75), not in equal shares.
func TestPinMovesOffToWeightedOthersOnly(t *testing.T) {
	scs := []string{"SC1", "SC2", "SC3"}
	byCap := func(k string) float64 { return map[string]float64{"SC2": 1, "SC3": 3}[k] }
	want := map[string]int{"SC1": 0, "SC2": 25, "SC3": 75}

	row := map[string]int{"SC1": 100, "SC2": 0, "SC3": 0}
	var e snapshot.Explanation
	subs := map[string]config.SubCluster{"SC1": {Excluded: true}, "SC2": {}, "SC3": {}}
	applyDrainToPin(row, scs, subs, []string{"SC2", "SC3"}, byCap, &e)
	if !reflect.DeepEqual(row, want) || !reflect.DeepEqual(e.Guardrails, []string{GuardDrain + ": SC1 is drained: its 100 pinned points moved to available sub-clusters by capacity"}) {
		t.Errorf("drain: row %v, guardrails %q; want %v, by capacity", row, e.Guardrails, want)
	}

	row = map[string]int{"SC1": 100, "SC2": 0, "SC3": 0}
	e = snapshot.Explanation{}
	applyUnavailableToPin(row, scs, map[string]bool{"SC2": true, "SC3": true}, []string{"SC2", "SC3"}, byCap, &e)
	if !reflect.DeepEqual(row, want) || !reflect.DeepEqual(e.Guardrails, []string{GuardUnavailable + ": SC1 has no available instance: its 100 pinned points moved to available sub-clusters by capacity"}) {
		t.Errorf("unavailable: row %v, guardrails %q; want %v, by capacity", row, e.Guardrails, want)
	}
}

// TestUnavailableRowKeepsPreviousOfSameDenominator: with no instance
// available anywhere the previous row is kept (a drained sub-cluster's
// points would go to the blackhole; SC3, drained at 0, adds no blackhole
// entry) — but only a previous row of the same denominator; another is
// spread by configured weight over the sub-clusters not drained.
func TestUnavailableRowKeepsPreviousOfSameDenominator(t *testing.T) {
	scs := []string{"SC1", "SC2", "SC3"}
	subs := map[string]config.SubCluster{"SC1": {}, "SC2": {}, "SC3": {Excluded: true}}
	weightSum := map[string]float64{"SC1": 1, "SC2": 1, "SC3": 1}
	var e snapshot.Explanation
	prev := &snapshot.Row{Denominator: 100, Weights: map[string]int{"SC1": 70, "SC2": 30, "SC3": 0}}
	if got, want := unavailableRow(prev, scs, subs, weightSum, 100, &e), map[string]int{"SC1": 70, "SC2": 30}; !reflect.DeepEqual(got, want) {
		t.Errorf("same denominator: row %v, want %v", got, want)
	}
	e = snapshot.Explanation{}
	prev.Denominator = 10000
	if got, want := unavailableRow(prev, scs, subs, weightSum, 100, &e), map[string]int{"SC1": 50, "SC2": 50}; !reflect.DeepEqual(got, want) {
		t.Errorf("other denominator: row %v, want %v", got, want)
	}
	if want := []string{"no sub-cluster has an available instance and there is no previous row: spread by configured instance weight"}; !reflect.DeepEqual(e.Notes, want) {
		t.Errorf("notes %q, want %q", e.Notes, want)
	}
}

// TestReadDemandZeroIsUnknown: an observed demand of 0 (or none, or not a
// number) counts as unknown and takes default_demand_rps, like a missing one.
func TestReadDemandZeroIsUnknown(t *testing.T) {
	in := &clusterInput{name: "c", proxies: []string{"A", "B", "C", "D"}}
	readDemand(in, map[string]map[string]float64{"A": {"c": 0}, "B": {"c": 30}, "C": {"c": math.NaN()}}, settings{defaultDemand: 50})
	if want := []float64{50, 30, 50, 50}; !reflect.DeepEqual(in.demand, want) {
		t.Errorf("demand %v, want %v", in.demand, want)
	}
	if want := []bool{true, true, true, true}; !reflect.DeepEqual(in.known, want) {
		t.Errorf("known %v, want %v", in.known, want)
	}
}

package plan

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sluicelb/sluice/api/snapshot"
)

// TestGenerationsAndPrev: with generations, a cluster is recomputed exactly
// when its generation moves or its previous row changes, and every result
// equals a fresh planner's.
func TestGenerationsAndPrev(t *testing.T) {
	st := randomState(rand.New(rand.NewPCG(3, 3)), 4, 10, 4)
	names := sortedKeys(st.Clusters)
	gens := map[string]uint64{}
	for i, n := range names {
		gens[n] = uint64(i + 1)
	}
	v := View{State: st, Generations: gens}
	p := NewPlanner()
	check := func(res Result, prev map[string]*snapshot.Snapshot, want []string) {
		t.Helper()
		if want != nil && !slices.Equal(res.Recomputed, want) {
			t.Fatalf("recomputed %v, want %v", res.Recomputed, want)
		}
		fresh := mustCompute(t, NewPlanner(), View{State: st}, prev)
		for pc, s := range res.Snapshots {
			if fresh.Snapshots[pc].Meta.Hash != s.Meta.Hash {
				t.Fatalf("%s: cached result differs from a fresh computation", pc)
			}
		}
	}
	first := mustCompute(t, p, v, nil)
	check(first, nil, names)
	// Fixed point: the result handed back until nothing is recomputed.
	prev := first.Snapshots
	for range 3 {
		res := mustCompute(t, p, v, prev)
		check(res, prev, nil)
		prev = res.Snapshots
	}
	res := mustCompute(t, p, v, prev)
	check(res, prev, []string{})
	prev = res.Snapshots
	// A moved generation recomputes that cluster only, even with prev the
	// very result of the last call.
	gens[names[3]] = 100
	res = mustCompute(t, p, v, prev)
	check(res, prev, []string{names[3]})
	// Same inputs, same live prev: nothing.
	res = mustCompute(t, p, v, prev)
	check(res, prev, []string{})
	// A foreign prev whose row for one cluster differs recomputes it only.
	pc := sortedKeys(st.Topology.ProxyClusters)[1]
	other := *prev[pc]
	other.Clusters = map[string]snapshot.Cluster{}
	for n, c := range prev[pc].Clusters {
		other.Clusters[n] = c
	}
	c := other.Clusters[names[5]]
	w := map[string]int{}
	for k, x := range c.Row.Weights {
		w[k] = x
	}
	sc := sortedKeys(st.Clusters[names[5]].SubClusters)
	w[sc[0]], w[sc[len(sc)-1]] = w[sc[0]]+w[sc[len(sc)-1]], 0
	if len(sc) == 1 {
		w[sc[0]]--
		w["GSLB_BLACKHOLE"]++
	}
	c.Row.Weights = w
	c.Explanation = nil
	other.Clusters[names[5]] = c
	prev2 := map[string]*snapshot.Snapshot{}
	for k, s := range prev {
		prev2[k] = s
	}
	prev2[pc] = &other
	res = mustCompute(t, p, v, prev2)
	check(res, prev2, []string{names[5]})
	// Without generations the planner still finds a changed cluster.
	res = mustCompute(t, p, View{State: st}, prev2)
	check(res, prev2, names) // generation 0 ≠ cached generations: all
	res = mustCompute(t, p, View{State: st}, prev2)
	check(res, prev2, []string{})
}

package plan

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
)

// fleet is the scale target of docs/scheduler.md: nb proxy clusters, nc backend
// clusters of ns sub-clusters (3 instances each) over 5 IDCs, every
// (proxy cluster, cluster) with a demand; total demand is about 90 % of
// capacity, so capacities bind and the solver must route around them.
func fleet(nb, nc, ns int) View {
	r := rand.New(rand.NewPCG(42, 42))
	const nidc = 5
	st := &config.State{
		Topology:  config.Topology{ProxyClusters: map[string]config.ProxyCluster{}, LocalityCost: map[string]map[string]int{}},
		Clusters:  map[string]config.Cluster{},
		Scheduler: config.DefaultSchedulerSettings(),
	}
	for i := range nidc {
		a := fmt.Sprintf("IDC%d", i)
		st.Topology.IDCs = append(st.Topology.IDCs, a)
		st.Topology.LocalityCost[a] = map[string]int{}
		for j := range nidc {
			if i != j {
				st.Topology.LocalityCost[a][fmt.Sprintf("IDC%d", j)] = 5 + 5*((i+j)%4)
			}
		}
	}
	for b := range nb {
		st.Topology.ProxyClusters[fmt.Sprintf("PC%03d", b)] = config.ProxyCluster{IDC: fmt.Sprintf("IDC%d", b%nidc)}
	}
	dem := map[string]map[string]float64{}
	for c := range nc {
		name := fmt.Sprintf("cluster-%03d", c)
		cl := config.Cluster{SubClusters: map[string]config.SubCluster{}, Policy: config.DefaultPolicy()}
		var capSum float64
		for s := range ns {
			sc := config.SubCluster{IDC: fmt.Sprintf("IDC%d", s%nidc)}
			for i := range 3 {
				capRPS := 500 + r.IntN(1000)
				capSum += float64(capRPS) * 0.8
				sc.Instances = append(sc.Instances, config.Instance{Addr: fmt.Sprintf("10.%d.%d.%d", c/250, c%250, s*3+i+1), Port: 8080, Weight: 10, CapacityRPS: capRPS})
			}
			cl.SubClusters[fmt.Sprintf("SC%02d", s)] = sc
		}
		st.Clusters[name] = cl
		for b := range nb {
			pc := fmt.Sprintf("PC%03d", b)
			if dem[pc] == nil {
				dem[pc] = map[string]float64{}
			}
			// Skewed demand: some proxy clusters are much busier.
			dem[pc][name] = capSum * 0.9 / float64(nb) * (0.2 + 1.6*r.Float64())
		}
	}
	return View{State: st, Demand: dem}
}

// BenchmarkComputeFull is a full plan from a cold cache: 100 proxy clusters
// × 200 clusters × 10 sub-clusters (target ≤ 1 s on one core).
func BenchmarkComputeFull(b *testing.B) {
	v := fleet(100, 200, 10)
	var prev map[string]*snapshot.Snapshot
	if res, err := NewPlanner().Compute(v, nil); err == nil {
		prev = res.Snapshots
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewPlanner().Compute(v, prev); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkComputeOneClusterChanged is a warm planner after one cluster's
// capacity changed (target ≤ 10 ms), with the per-cluster generations the
// inventory provides and the live snapshots as prev (as the scheduler's
// loop passes them): one cluster solved, 100 content hashes, no snapshot
// assembled (Planner.ComputePlan).
func BenchmarkComputeOneClusterChanged(b *testing.B) {
	benchOneClusterChanged(b, benchOpts{gens: true})
}

// BenchmarkComputeOneClusterChangedAssembled is the same through Compute,
// which also assembles the 100 snapshots (100 maps of 200 clusters), with
// each result handed back as the next prev.
func BenchmarkComputeOneClusterChangedAssembled(b *testing.B) {
	benchOneClusterChanged(b, benchOpts{gens: true, assemble: true})
}

// BenchmarkComputeOneClusterChangedNoGenerations is the first without
// generations: the planner digests every cluster's inputs to find the
// changed one.
func BenchmarkComputeOneClusterChangedNoGenerations(b *testing.B) {
	benchOneClusterChanged(b, benchOpts{})
}

// BenchmarkComputeOneClusterChangedNoHash is the first without the 100
// snapshot content hashes.
func BenchmarkComputeOneClusterChangedNoHash(b *testing.B) {
	benchOneClusterChanged(b, benchOpts{gens: true, skipHash: true})
}

type benchOpts struct{ gens, skipHash, assemble bool }

func benchOneClusterChanged(b *testing.B, o benchOpts) {
	v := fleet(100, 200, 10)
	if o.gens {
		v.Generations = map[string]uint64{}
		for i, name := range sortedKeys(v.State.Clusters) {
			v.Generations[name] = uint64(i + 1)
		}
	}
	p := NewPlanner()
	p.skipHash = o.skipHash
	res, err := p.Compute(v, nil)
	if err != nil {
		b.Fatal(err)
	}
	prev := res.Snapshots
	name := "cluster-100"
	orig := v.State.Clusters[name]
	changed := orig
	changed.SubClusters = map[string]config.SubCluster{}
	for k, sc := range orig.SubClusters {
		changed.SubClusters[k] = sc
	}
	sc := changed.SubClusters["SC00"]
	sc.Instances = slices.Clone(sc.Instances)
	sc.Instances[0].CapacityRPS /= 2
	changed.SubClusters["SC00"] = sc
	// Steady state: the last result handed back as prev (after this, with
	// !o.assemble, prev stays: the live snapshots).
	for range 3 {
		res, err := p.Compute(v, prev)
		if err != nil {
			b.Fatal(err)
		}
		prev = res.Snapshots
	}
	b.ReportAllocs()
	i := 0
	gen := uint64(1000)
	for b.Loop() {
		if i%2 == 0 {
			v.State.Clusters[name] = changed
		} else {
			v.State.Clusters[name] = orig
		}
		i++
		if o.gens {
			gen++
			v.Generations[name] = gen
		}
		if o.assemble {
			res, err := p.Compute(v, prev)
			if err != nil {
				b.Fatal(err)
			}
			if len(res.Recomputed) != 1 {
				b.Fatalf("recomputed %v", res.Recomputed)
			}
			prev = res.Snapshots
			continue
		}
		pl, err := p.ComputePlan(v, prev)
		if err != nil {
			b.Fatal(err)
		}
		if len(pl.Recomputed) != 1 || len(pl.Hashes) != 100 {
			b.Fatalf("recomputed %v, %d hashes", pl.Recomputed, len(pl.Hashes))
		}
	}
}

// BenchmarkSolve is one cluster's optimisation: 100 × 10.
func BenchmarkSolve(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	p := Problem{Capacity: make([]float64, 10), DropCost: 31}
	var capSum float64
	for s := range p.Capacity {
		p.Capacity[s] = 1000 + 1000*r.Float64()
		capSum += p.Capacity[s]
	}
	for bi := range 100 {
		p.Demand = append(p.Demand, capSum*0.9/100*(0.2+1.6*r.Float64()))
		row := make([]float64, 10)
		for s := range row {
			if s%5 != bi%5 {
				row[s] = float64(5 + 5*((s+bi)%4))
			}
		}
		p.Cost = append(p.Cost, row)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Solve(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkContentHash is the share of a recompute spent on snapshot
// content hashes: all 100 snapshots of the fleet from cached cluster sums.
func BenchmarkContentHash(b *testing.B) {
	v := fleet(100, 200, 10)
	p := NewPlanner()
	res, err := p.Compute(v, nil)
	if err != nil {
		b.Fatal(err)
	}
	names := sortedKeys(v.State.Clusters)
	routes := snapshot.RoutesHash(v.State.Products, v.State.DefaultProduct)
	sums := make([][32]byte, len(names))
	b.ReportAllocs()
	for b.Loop() {
		for bi, pc := range p.proxies {
			for i, n := range names {
				sums[i] = p.cache[n].out.sums[bi]
			}
			snapshot.ContentHashFrom(res.Snapshots[pc], routes, names, sums)
		}
	}
}

// BenchmarkContentHashFull is snapshot.ContentHash of one fleet snapshot
// from scratch (what a proxy or the validator pays per snapshot).
func BenchmarkContentHashFull(b *testing.B) {
	v := fleet(100, 200, 10)
	res, err := NewPlanner().Compute(v, nil)
	if err != nil {
		b.Fatal(err)
	}
	s := res.Snapshots["PC000"]
	b.ReportAllocs()
	for b.Loop() {
		snapshot.ContentHash(s)
	}
}

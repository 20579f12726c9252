package plan

import (
	"errors"
	"fmt"
	"math"
)

// ErrInvalidProblem is returned (wrapped) by Solve for malformed input:
// mismatched lengths, negative or non-finite numbers.
var ErrInvalidProblem = errors.New("invalid problem")

// Problem is the optimisation of docs/scheduler.md for one backend cluster: route
// each proxy cluster's demand to sub-clusters (or drop it) at least cost.
//
//	minimise   Σ Cost[b][s]·f[b][s] + DropCost·Σ d[b] + Lambda·Σ_b Σ_s |f[b][s]/Demand[b] − Prev[b][s]|
//	subject to Σ_s f[b][s] + d[b] = Demand[b]   for every b
//	           Σ_b f[b][s] ≤ Capacity[s]        for every s
//	           f, d ≥ 0
//
// Rows with Demand 0 have no flow and no stability term.
type Problem struct {
	// ProxyClusters label the rows (len B). Optional; used in errors only.
	ProxyClusters []string
	// SubClusters label the columns (len S). Optional; used in errors only.
	SubClusters []string
	// Demand[b] in requests/s, ≥ 0 (len B).
	Demand []float64
	// Capacity[s] in requests/s, ≥ 0 (len S).
	Capacity []float64
	// Cost[b][s] ≥ 0 per request/s sent from b to s (B×S).
	Cost [][]float64
	// DropCost ≥ 0 per request/s dropped (M). Callers make it larger than
	// any path cost so that only what cannot be served is dropped.
	DropCost float64
	// Prev[b][s] is the previous weight of s in b's row as a fraction of the
	// row (0..1). Optional (nil, or a nil row): no stability term there.
	Prev [][]float64
	// Lambda ≥ 0 weighs the stability term Σ|w_new − w_old| (weights as
	// fractions). 0 disables it.
	Lambda float64
}

// Solution is an optimal point of a Problem.
type Solution struct {
	// Flow[b][s] in requests/s.
	Flow [][]float64
	// Drop[b] in requests/s.
	Drop []float64
	// Objective is the value of the objective at (Flow, Drop), stability
	// term included.
	Objective float64
}

// Solve finds an exact optimum of p by successive shortest paths on the
// transportation network (one source per proxy cluster, one sink per
// sub-cluster plus an uncapacitated drop sink). The stability term is
// convex piecewise linear in f, so each (b, s) pair is two parallel arcs: up
// to the previous flow at cost Cost−λ/Demand, beyond it at Cost+λ/Demand.
//
// Sources are added one at a time; after each augmentation along a shortest
// residual path the flow is optimal for the supplies added so far (the
// residual graph keeps no negative cycle), so the final flow is optimal.
// Shortest paths use Bellman–Ford (queue-based), since reverse arcs have
// negative cost; a fast path skips it when the cheapest arc out of the
// source already reaches spare capacity (every residual path from a sink to
// spare capacity has non-negative cost, so nothing can beat it).
//
// Solve is pure and safe for concurrent use.
func Solve(p Problem) (Solution, error) {
	if err := checkProblem(p); err != nil {
		return Solution{}, err
	}
	s := newSolver(p)
	for b := range s.nb {
		s.route(b)
	}
	return s.solution(), nil
}

func checkProblem(p Problem) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("solve: %w: %s", ErrInvalidProblem, fmt.Sprintf(format, args...))
	}
	ok := func(x float64) bool { return x >= 0 && !math.IsInf(x, 0) && !math.IsNaN(x) }
	nb, ns := len(p.Demand), len(p.Capacity)
	if len(p.ProxyClusters) != 0 && len(p.ProxyClusters) != nb {
		return bad("%d proxy cluster names for %d demands", len(p.ProxyClusters), nb)
	}
	if len(p.SubClusters) != 0 && len(p.SubClusters) != ns {
		return bad("%d sub-cluster names for %d capacities", len(p.SubClusters), ns)
	}
	if len(p.Cost) != nb {
		return bad("cost has %d rows, want %d", len(p.Cost), nb)
	}
	if p.Prev != nil && len(p.Prev) != nb {
		return bad("prev has %d rows, want %d", len(p.Prev), nb)
	}
	for b, d := range p.Demand {
		if !ok(d) {
			return bad("demand[%d] = %v must be finite and ≥ 0", b, d)
		}
		if len(p.Cost[b]) != ns {
			return bad("cost[%d] has %d entries, want %d", b, len(p.Cost[b]), ns)
		}
		for s, c := range p.Cost[b] {
			if !ok(c) {
				return bad("cost[%d][%d] = %v must be finite and ≥ 0", b, s, c)
			}
		}
		if p.Prev != nil && p.Prev[b] != nil {
			if len(p.Prev[b]) != ns {
				return bad("prev[%d] has %d entries, want %d", b, len(p.Prev[b]), ns)
			}
			for s, w := range p.Prev[b] {
				if !ok(w) {
					return bad("prev[%d][%d] = %v must be finite and ≥ 0", b, s, w)
				}
			}
		}
	}
	for s, c := range p.Capacity {
		if !ok(c) {
			return bad("capacity[%d] = %v must be finite and ≥ 0", s, c)
		}
	}
	if !ok(p.DropCost) {
		return bad("drop cost %v must be finite and ≥ 0", p.DropCost)
	}
	if !ok(p.Lambda) {
		return bad("lambda %v must be finite and ≥ 0", p.Lambda)
	}
	return nil
}

// arc is one (b, s) pair's two parallel arcs: k=0 up to cap0, k=1 unbounded.
type arc struct {
	cost [2]float64
	cap0 float64
	x    [2]float64
}

type solver struct {
	p      Problem
	nb, ns int
	arcs   []arc // nb*ns
	drop   []float64
	rem    []float64 // spare capacity per sink
	eps    float64
	// costTol is the least improvement a relaxation must make.
	costTol float64

	// Bellman–Ford scratch: nodes 0..nb-1 are sources, nb..nb+ns-1 sinks,
	// nb+ns is the drop sink.
	dist   []float64
	pred   []int32 // predecessor node
	predK  []int8  // arc kind used to reach the node (0/1, or 2 for drop)
	inq    []bool
	pushes []int32
	queue  []int32
	excess float64
}

func newSolver(p Problem) *solver {
	nb, ns := len(p.Demand), len(p.Capacity)
	s := &solver{p: p, nb: nb, ns: ns, arcs: make([]arc, nb*ns), drop: make([]float64, nb), rem: make([]float64, ns)}
	scale := 1.0
	for _, d := range p.Demand {
		scale = max(scale, d)
	}
	for i, c := range p.Capacity {
		s.rem[i] = c
		scale = max(scale, c)
	}
	s.eps = scale * 1e-12
	maxCost := p.DropCost
	for _, row := range p.Cost {
		for _, c := range row {
			maxCost = max(maxCost, c)
		}
	}
	if nb > 0 && p.Lambda > 0 {
		for _, d := range p.Demand {
			if d > 0 {
				maxCost = max(maxCost, p.Lambda/d)
			}
		}
	}
	// Relaxations must improve by more than float noise: a cycle whose cost
	// is zero in exact arithmetic can sum to -1e-16 in floats.
	s.costTol = max(1, maxCost) * 1e-9
	for b := range nb {
		var slope float64
		if p.Lambda > 0 && p.Demand[b] > 0 {
			slope = p.Lambda / p.Demand[b]
		}
		for j := range ns {
			a := &s.arcs[b*ns+j]
			c := p.Cost[b][j]
			a.cost = [2]float64{c - slope, c + slope}
			if slope > 0 && p.Prev != nil && p.Prev[b] != nil {
				a.cap0 = p.Prev[b][j] * p.Demand[b]
			}
		}
	}
	n := nb + ns + 1
	s.dist = make([]float64, n)
	s.pred = make([]int32, n)
	s.predK = make([]int8, n)
	s.inq = make([]bool, n)
	s.pushes = make([]int32, n)
	return s
}

// bestArc returns the cheapest residual arc kind from b to sink j.
func (s *solver) bestArc(b, j int) int {
	a := &s.arcs[b*s.ns+j]
	if a.cap0-a.x[0] > s.eps {
		return 0
	}
	return 1
}

func (s *solver) route(b int) {
	s.excess = s.p.Demand[b]
	for s.excess > s.eps {
		if !s.direct(b) {
			s.augment(b)
		}
	}
	if s.excess > 0 {
		// A rounding crumb below eps: count it as dropped so conservation holds.
		s.drop[b] += s.excess
		s.excess = 0
	}
}

// direct augments along the cheapest arc out of b when it reaches spare
// capacity, reporting whether it did.
func (s *solver) direct(b int) bool {
	best, bestJ, bestK := s.p.DropCost, -1, 2
	bestSat := false
	for j := range s.ns {
		k := s.bestArc(b, j)
		c := s.arcs[b*s.ns+j].cost[k]
		sat := s.rem[j] <= s.eps
		if c < best || (c == best && bestSat && !sat) {
			best, bestJ, bestK, bestSat = c, j, k, sat
		}
	}
	if bestSat {
		return false
	}
	if bestJ < 0 {
		s.drop[b] += s.excess
		s.excess = 0
		return true
	}
	a := &s.arcs[b*s.ns+bestJ]
	amt := min(s.excess, s.rem[bestJ])
	if bestK == 0 {
		amt = min(amt, a.cap0-a.x[0])
	}
	a.x[bestK] += amt
	s.rem[bestJ] -= amt
	s.excess -= amt
	return true
}

// augment finds a shortest residual path from source b to spare capacity
// (a sink with rem > eps, or the drop sink) and pushes as much as it allows.
func (s *solver) augment(b int) {
	nb, ns := s.nb, s.ns
	dropNode := nb + ns
	for i := range s.dist {
		s.dist[i] = math.Inf(1)
		s.pred[i] = -1
		s.inq[i] = false
		s.pushes[i] = 0
	}
	s.dist[b] = 0
	s.queue = append(s.queue[:0], int32(b))
	s.inq[b] = true
	for head := 0; head < len(s.queue); head++ {
		u := int(s.queue[head])
		s.inq[u] = false
		du := s.dist[u]
		if u < nb {
			for j := range ns {
				k := s.bestArc(u, j)
				if nd := du + s.arcs[u*ns+j].cost[k]; nd < s.dist[nb+j]-s.costTol {
					s.relax(nb+j, nd, u, int8(k))
				}
			}
			if nd := du + s.p.DropCost; nd < s.dist[dropNode] {
				s.dist[dropNode], s.pred[dropNode], s.predK[dropNode] = nd, int32(u), 2
			}
			continue
		}
		// A sink: backwards along arcs that carry flow into it.
		j := u - nb
		for b2 := range nb {
			a := &s.arcs[b2*ns+j]
			// Undo the dearer kind first: its reverse arc is cheaper.
			for k := 1; k >= 0; k-- {
				if a.x[k] > s.eps {
					if nd := du - a.cost[k]; nd < s.dist[b2]-s.costTol {
						s.relax(b2, nd, u, int8(k))
					}
					break
				}
			}
		}
	}
	// Pick the cheapest endpoint with spare capacity.
	target, td := dropNode, s.dist[dropNode]
	for j := range ns {
		if s.rem[j] > s.eps && s.dist[nb+j] < td {
			target, td = nb+j, s.dist[nb+j]
		}
	}
	amt := s.excess
	if target != dropNode {
		amt = min(amt, s.rem[target-nb])
	}
	for v := target; v != b; v = int(s.pred[v]) {
		u := int(s.pred[v])
		if v == dropNode {
			continue
		}
		k := s.predK[v]
		if u < nb { // forward u → sink v
			if k == 0 {
				a := &s.arcs[u*ns+(v-nb)]
				amt = min(amt, a.cap0-a.x[0])
			}
		} else { // backward sink u → source v
			amt = min(amt, s.arcs[v*ns+(u-nb)].x[k])
		}
	}
	for v := target; v != b; v = int(s.pred[v]) {
		u := int(s.pred[v])
		if v == dropNode {
			s.drop[u] += amt
			continue
		}
		k := s.predK[v]
		if u < nb {
			s.arcs[u*ns+(v-nb)].x[k] += amt
		} else {
			a := &s.arcs[v*ns+(u-nb)]
			a.x[k] = max(0, a.x[k]-amt)
		}
	}
	if target != dropNode {
		s.rem[target-nb] -= amt
	}
	s.excess -= amt
}

func (s *solver) relax(v int, d float64, u int, k int8) {
	s.dist[v], s.pred[v], s.predK[v] = d, int32(u), k
	if !s.inq[v] && s.pushes[v] <= int32(len(s.dist)) {
		// Without a negative cycle a node is queued at most n−1 times; the
		// bound only guards against numerical trouble.
		s.pushes[v]++
		s.inq[v] = true
		s.queue = append(s.queue, int32(v))
	}
}

func (s *solver) solution() Solution {
	sol := Solution{Flow: make([][]float64, s.nb), Drop: s.drop}
	for b := range s.nb {
		row := make([]float64, s.ns)
		for j := range s.ns {
			a := s.arcs[b*s.ns+j]
			row[j] = a.x[0] + a.x[1]
		}
		sol.Flow[b] = row
	}
	sol.Objective = Objective(s.p, sol.Flow, sol.Drop)
	return sol
}

// Objective evaluates p's objective at (flow, drop).
func Objective(p Problem, flow [][]float64, drop []float64) float64 {
	var obj float64
	for b := range p.Demand {
		for j, f := range flow[b] {
			obj += p.Cost[b][j] * f
			if p.Lambda > 0 && p.Demand[b] > 0 {
				var prev float64
				if p.Prev != nil && p.Prev[b] != nil {
					prev = p.Prev[b][j]
				}
				obj += p.Lambda * math.Abs(f/p.Demand[b]-prev)
			}
		}
		obj += p.DropCost * drop[b]
	}
	return obj
}

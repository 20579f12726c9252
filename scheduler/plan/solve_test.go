package plan

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize/convex/lp"
)

// oracle solves p with gonum's simplex (a different algorithm) in standard
// form: variables f[b][s], d[b], slack per capacity row and, with a stability
// term, v⁺/v⁻ with f − D·prev = v⁺ − v⁻ (so |f − D·prev| = v⁺ + v⁻ at the optimum).
func oracle(t *testing.T, p Problem) float64 {
	t.Helper()
	nb, ns := len(p.Demand), len(p.Capacity)
	stab := p.Lambda > 0
	nf := nb * ns
	nv := nf + nb + ns
	rows := nb + ns
	if stab {
		nv += 2 * nf
		rows += nf
	}
	c := make([]float64, nv)
	A := mat.NewDense(rows, nv, nil)
	bv := make([]float64, rows)
	for b := range nb {
		for s := range ns {
			c[b*ns+s] = p.Cost[b][s]
			A.Set(b, b*ns+s, 1)
		}
		c[nf+b] = p.DropCost
		A.Set(b, nf+b, 1)
		bv[b] = p.Demand[b]
	}
	for s := range ns {
		for b := range nb {
			A.Set(nb+s, b*ns+s, 1)
		}
		A.Set(nb+s, nf+nb+s, 1)
		bv[nb+s] = p.Capacity[s]
	}
	if stab {
		base := nf + nb + ns
		for b := range nb {
			for s := range ns {
				var prev float64
				if p.Prev != nil && p.Prev[b] != nil {
					prev = p.Prev[b][s]
				}
				i := b*ns + s
				r := nb + ns + i
				// In requests/s so every coefficient is ±1 (gonum's simplex
				// struggles with badly scaled rows): f − v⁺ + v⁻ = D·prev,
				// each v costing λ/D. Rows with D = 0 have f = 0 and no term.
				A.Set(r, i, 1)
				A.Set(r, base+i, -1)
				A.Set(r, base+nf+i, 1)
				bv[r] = prev * p.Demand[b]
				if p.Demand[b] > 0 {
					c[base+i] = p.Lambda / p.Demand[b]
					c[base+nf+i] = p.Lambda / p.Demand[b]
				}
			}
		}
	}
	// Start from the feasible basis "drop everything": d[b], capacity
	// slacks and v⁻ (= D·prev when f = 0). Its matrix is the identity.
	basis := make([]int, 0, rows)
	for b := range nb {
		basis = append(basis, nf+b)
	}
	for s := range ns {
		basis = append(basis, nf+nb+s)
	}
	if stab {
		for i := range nf {
			basis = append(basis, nf+nb+ns+nf+i)
		}
	}
	opt, _, err := lp.Simplex(c, A, bv, 0, basis)
	// Transportation problems are very degenerate and gonum's simplex can
	// stall on a singular basis; perturbing the right-hand side by 1e-10
	// (relative) breaks the ties and moves the optimum by far less than the
	// 1e-6 the comparison allows.
	r := rand.New(rand.NewPCG(uint64(nb), uint64(ns)))
	for try := 0; err != nil && try < 8; try++ {
		pb := make([]float64, len(bv))
		for i, v := range bv {
			pb[i] = v + (1e-10*max(1, math.Abs(v)))*r.Float64()
		}
		opt, _, err = lp.Simplex(c, A, pb, 0, basis)
	}
	if err != nil {
		t.Fatalf("oracle: %v (problem %+v)", err, p)
	}
	return opt
}

func randomProblem(r *rand.Rand) Problem {
	nb := 1 + r.IntN(6)
	ns := 1 + r.IntN(5)
	p := Problem{Demand: make([]float64, nb), Capacity: make([]float64, ns), Cost: make([][]float64, nb)}
	var totalDemand float64
	maxCost := 0.0
	for b := range nb {
		if r.IntN(8) > 0 {
			p.Demand[b] = float64(r.IntN(1000)) + r.Float64()
		}
		totalDemand += p.Demand[b]
		p.Cost[b] = make([]float64, ns)
		for s := range ns {
			p.Cost[b][s] = float64(r.IntN(4) * r.IntN(30)) // many ties and zeros
			maxCost = max(maxCost, p.Cost[b][s])
		}
	}
	// Load factor from heavy underload to heavy overload.
	load := []float64{0.2, 0.6, 0.95, 1, 1.3, 3}[r.IntN(6)]
	for s := range ns {
		if r.IntN(6) > 0 {
			p.Capacity[s] = r.Float64()
		}
	}
	var sum float64
	for _, c := range p.Capacity {
		sum += c
	}
	if sum > 0 {
		for s := range p.Capacity {
			p.Capacity[s] *= totalDemand / load / sum
		}
	}
	p.DropCost = maxCost + 1 + float64(r.IntN(50))
	if r.IntN(2) == 0 {
		p.Lambda = []float64{0.01, 0.5, 3, 40}[r.IntN(4)]
		p.Prev = make([][]float64, nb)
		for b := range nb {
			if r.IntN(4) == 0 {
				continue
			}
			row := make([]float64, ns)
			left := 1.0
			for s := range ns {
				w := left * r.Float64()
				if s == ns-1 || r.IntN(3) == 0 {
					w = left * float64(r.IntN(2))
				}
				row[s] = w
				left -= w
			}
			p.Prev[b] = row
		}
	}
	return p
}

func TestSolveMatchesLPOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 5))
	const n = 1000
	for i := range n {
		p := randomProblem(r)
		sol, err := Solve(p)
		if err != nil {
			t.Fatalf("scenario %d: %v", i, err)
		}
		checkFeasible(t, i, p, sol)
		want := oracle(t, p)
		if d := math.Abs(sol.Objective - want); d > 1e-6*max(1, math.Abs(want)) {
			t.Fatalf("scenario %d: objective %.9g, oracle %.9g (diff %g)\nproblem %+v\nflow %v drop %v",
				i, sol.Objective, want, d, p, sol.Flow, sol.Drop)
		}
	}
}

func checkFeasible(t *testing.T, i int, p Problem, sol Solution) {
	t.Helper()
	tol := 1e-7
	for b, d := range p.Demand {
		sum := sol.Drop[b]
		if sol.Drop[b] < -tol {
			t.Fatalf("scenario %d: drop[%d] = %v < 0", i, b, sol.Drop[b])
		}
		for s, f := range sol.Flow[b] {
			if f < -tol {
				t.Fatalf("scenario %d: flow[%d][%d] = %v < 0", i, b, s, f)
			}
			sum += f
		}
		if math.Abs(sum-d) > tol*max(1, d) {
			t.Fatalf("scenario %d: row %d sums to %v, demand %v", i, b, sum, d)
		}
	}
	for s, c := range p.Capacity {
		var load float64
		for b := range p.Demand {
			load += sol.Flow[b][s]
		}
		if load > c+tol*max(1, c) {
			t.Fatalf("scenario %d: sub-cluster %d load %v > capacity %v", i, s, load, c)
		}
	}
}

func TestSolveDropsOnlyWhatCannotBeServed(t *testing.T) {
	p := Problem{
		Demand:   []float64{100, 50},
		Capacity: []float64{60, 40},
		Cost:     [][]float64{{0, 10}, {10, 0}},
		DropCost: 11,
	}
	sol, err := Solve(p)
	if err != nil {
		t.Fatal(err)
	}
	// 150 demand, 100 capacity: exactly 50 dropped, each IDC serves locally first.
	if got := sol.Drop[0] + sol.Drop[1]; math.Abs(got-50) > 1e-9 {
		t.Fatalf("dropped %v, want 50", got)
	}
	if sol.Flow[0][0] != 60 || sol.Flow[1][1] != 40 {
		t.Fatalf("flows %v, want local 60 and 40", sol.Flow)
	}
	// Objective: all local (cost 0) + 50 dropped × 11.
	if sol.Objective != 550 {
		t.Fatalf("objective %v, want 550", sol.Objective)
	}
}

func TestSolveStabilityKeepsEqualCostSplit(t *testing.T) {
	// Two equal-cost sub-clusters: without stability any split is optimal;
	// with it the previous 30/70 split is kept.
	p := Problem{
		Demand: []float64{100}, Capacity: []float64{1000, 1000},
		Cost: [][]float64{{5, 5}}, DropCost: 6,
		Prev: [][]float64{{0.3, 0.7}}, Lambda: 1,
	}
	sol, err := Solve(p)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(sol.Flow[0][0]-30) > 1e-9 || math.Abs(sol.Flow[0][1]-70) > 1e-9 {
		t.Fatalf("flow %v, want [30 70]", sol.Flow[0])
	}
}

func TestSolveRejectsBadInput(t *testing.T) {
	cases := map[string]Problem{
		"negative demand": {Demand: []float64{-1}, Capacity: []float64{1}, Cost: [][]float64{{0}}},
		"nan capacity":    {Demand: []float64{1}, Capacity: []float64{math.NaN()}, Cost: [][]float64{{0}}},
		"cost shape":      {Demand: []float64{1}, Capacity: []float64{1, 2}, Cost: [][]float64{{0}}},
		"prev shape":      {Demand: []float64{1}, Capacity: []float64{1}, Cost: [][]float64{{0}}, Prev: [][]float64{{0, 1}}},
		"inf drop":        {Demand: []float64{1}, Capacity: []float64{1}, Cost: [][]float64{{0}}, DropCost: math.Inf(1)},
	}
	for name, p := range cases {
		if _, err := Solve(p); !errors.Is(err, ErrInvalidProblem) {
			t.Errorf("%s: err = %v, want ErrInvalidProblem", name, err)
		}
	}
}

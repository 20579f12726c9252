package plan

// The stages of computeCluster (cluster.go), in the order it runs them.

import (
	"fmt"
	"slices"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
)

// clusterPlanner is the state computeCluster's stages share.
type clusterPlanner struct {
	in   clusterInput
	set  settings
	scs  []string // sub-clusters, sorted
	keys []string // scs and the blackhole

	subs        map[string]config.SubCluster
	capacity    []float64 // per sub-cluster, at the target utilisation
	capByName   map[string]float64
	availSC     map[string]bool
	availList   []string
	weightSum   map[string]float64
	totalCap    float64
	knownDemand float64
	overload    bool

	exps     []*snapshot.Explanation // per proxy cluster
	rows     []map[string]int
	modes    map[string]string
	plan     ClusterPlan
	residual []float64 // capacity the pins left
	known    []int     // rows solved on known demand
	fallback []int     // rows without demand
}

func (c *clusterPlanner) byCap(k string) float64 { return c.capByName[k] }
func (c *clusterPlanner) isAvail(k string) bool  { return c.availSC[k] }

// newClusterPlanner computes each sub-cluster's capacity and availability.
func newClusterPlanner(in clusterInput) *clusterPlanner {
	set := in.set
	scs := sortedKeys(in.cfg.SubClusters)
	c := &clusterPlanner{in: in, set: set, scs: scs, keys: append(slices.Clone(scs), config.Blackhole),
		subs: make(map[string]config.SubCluster, len(scs)), capacity: make([]float64, len(scs)),
		capByName: make(map[string]float64, len(scs)), availSC: make(map[string]bool, len(scs)),
		weightSum: make(map[string]float64, len(scs))}
	for j, name := range scs {
		sc := in.cfg.SubClusters[name]
		insts := sc.Instances
		if in.members != nil {
			insts = in.members[name]
		}
		excluded := sc.Excluded || in.drained[name]
		var cp float64
		for _, inst := range insts {
			c.weightSum[name] += float64(inst.Weight)
			if !available(inst) {
				continue
			}
			if inst.CapacityRPS > 0 {
				cp += float64(inst.CapacityRPS)
			} else {
				cp += float64(inst.Weight) * float64(set.perWeight)
			}
		}
		cp = cp * float64(set.target) / 100
		if excluded {
			cp = 0
		}
		c.capacity[j], c.capByName[name] = cp, cp
		c.availSC[name] = cp > 0
		c.totalCap += cp
		c.subs[name] = config.SubCluster{IDC: sc.IDC, Instances: slices.Clone(insts), Excluded: excluded}
	}
	for _, name := range scs {
		if c.availSC[name] {
			c.availList = append(c.availList, name)
		}
	}
	nb := len(in.proxies)
	c.exps = make([]*snapshot.Explanation, nb)
	c.rows = make([]map[string]int, nb)
	c.modes = make(map[string]string, nb)
	c.plan = ClusterPlan{
		ProxyClusters: in.proxies, SubClusters: scs, Mode: c.modes,
		DemandRPS: make([]float64, nb), CapacityRPS: c.capacity,
		Flow: make([][]float64, nb), Drop: make([]float64, nb),
	}
	for b := range nb {
		c.plan.Flow[b] = make([]float64, len(scs))
		if in.known[b] {
			c.knownDemand += in.demand[b]
		}
	}
	c.overload = c.knownDemand > c.totalCap*(1+1e-9)
	return c
}

// pinnedRows starts every row's explanation and fills the pinned rows
// first: their traffic uses capacity the solver must not hand out again.
func (c *clusterPlanner) pinnedRows() {
	in, set, scs := c.in, c.set, c.scs
	c.residual = slices.Clone(c.capacity)
	for b, pc := range in.proxies {
		costs := make(map[string]int, len(scs))
		capExp := make(map[string]float64, len(scs))
		for _, name := range scs {
			costs[name] = in.topo.Cost(in.topo.ProxyClusters[pc].IDC, c.subs[name].IDC)
			capExp[name] = round6(c.capByName[name])
		}
		c.exps[b] = &snapshot.Explanation{DemandRPS: in.demand[b], CapacityRPS: capExp, Cost: costs}
		pin := in.pins[pc]
		if pin == nil {
			continue
		}
		c.modes[pc] = ModePinned
		c.exps[b].Mode = ModePinned
		row := make(map[string]int, len(c.keys))
		for k, w := range pin.Weights {
			row[k] = w * set.den / 100
		}
		fixRowSum(row, set.den)
		applyDrainToPin(row, scs, c.subs, c.availList, c.byCap, c.exps[b])
		applyUnavailableToPin(row, scs, c.availSC, c.availList, c.byCap, c.exps[b])
		c.rows[b] = row
		c.plan.DemandRPS[b] = in.demand[b]
		if in.known[b] {
			for j, name := range scs {
				f := in.demand[b] * float64(row[name]) / float64(set.den)
				c.plan.Flow[b][j] = f
				c.residual[j] = max(0, c.residual[j]-f)
			}
			c.plan.Drop[b] = in.demand[b] * float64(row[config.Blackhole]) / float64(set.den)
		}
	}
}

// classify gives every unpinned row its mode: unavailable (no capacity at
// all), optimal (known demand) or fallback (no demand known).
func (c *clusterPlanner) classify() {
	for b, pc := range c.in.proxies {
		if c.rows[b] != nil {
			continue
		}
		switch {
		case c.totalCap == 0:
			c.modes[pc] = ModeUnavailable
		case c.in.known[b]:
			c.modes[pc] = ModeOptimal
			c.known = append(c.known, b)
		default:
			c.modes[pc] = ModeFallback
			c.fallback = append(c.fallback, b)
		}
		c.exps[b].Mode = c.modes[pc]
	}
}

// solve runs the exact solver for rows idx with the given demand on capv
// and rounds each optimum into a row.
func (c *clusterPlanner) solve(idx []int, demand func(b int) float64, capv []float64) error {
	if len(idx) == 0 {
		return nil
	}
	in, set, scs := c.in, c.set, c.scs
	p := Problem{Capacity: capv}
	maxCost, minD := 0.0, 0.0
	for _, b := range idx {
		d := demand(b)
		p.ProxyClusters = append(p.ProxyClusters, in.proxies[b])
		p.Demand = append(p.Demand, d)
		cost := make([]float64, len(scs))
		for j, name := range scs {
			cost[j] = float64(c.exps[b].Cost[name])
			maxCost = max(maxCost, cost[j])
		}
		p.Cost = append(p.Cost, cost)
		if d > 0 && (minD == 0 || d < minD) {
			minD = d
		}
		// The stability reference is the previous optimum when known:
		// with the rounded row instead, each publish would pull the
		// optimum towards its own rounding error and drift for a few
		// rounds; with the optimum, unchanged inputs are a fixed point.
		var prevW []float64
		if opt := in.prevOpt[in.proxies[b]]; opt != nil {
			prevW = make([]float64, len(scs))
			for j, name := range scs {
				prevW[j] = max(0, opt[name]) / float64(set.den)
			}
		} else if r := in.prevRows[in.proxies[b]]; r != nil && r.Denominator > 0 {
			prevW = make([]float64, len(scs))
			for j, name := range scs {
				prevW[j] = float64(r.Weights[name]) / float64(r.Denominator)
			}
		}
		p.Prev = append(p.Prev, prevW)
	}
	// The stability slope λ/D stays ≤ 0.25 per request/s, below half
	// the smallest cost step (1), and M covers the dearest path plus it.
	p.Lambda = stabilityFraction * minD
	p.DropCost = maxCost + 1
	sol, err := Solve(p)
	if err != nil {
		return fmt.Errorf("plan cluster %s: %w", in.name, err)
	}
	c.plan.Objective += sol.Objective
	for i, b := range idx {
		d := p.Demand[i]
		c.plan.DemandRPS[b] = d
		c.plan.Flow[b] = sol.Flow[i]
		c.plan.Drop[b] = sol.Drop[i]
		if d <= 0 {
			continue
		}
		// The row is rounded from the optimum as recorded (to 1e-6
		// points), so float noise in the solver cannot flip a tie and
		// the same optimum always gives the same row.
		opt := make(map[string]float64, len(c.keys))
		for j, name := range scs {
			opt[name] = round6(sol.Flow[i][j] / d * float64(set.den))
		}
		if bh := round6(sol.Drop[i] / d * float64(set.den)); bh > 0 {
			opt[config.Blackhole] = bh
		}
		c.exps[b].Optimum = opt
		c.rows[b] = largestRemainder(c.keys, opt, set.den)
	}
	return nil
}

// solveFallback plans the rows without demand (capacity-proportional
// fallback) on what the known rows left.
func (c *clusterPlanner) solveFallback() error {
	if len(c.fallback) == 0 {
		return nil
	}
	left := slices.Clone(c.residual)
	var leftSum float64
	for j := range c.scs {
		for _, b := range c.known {
			left[j] -= c.plan.Flow[b][j]
		}
		left[j] = max(0, left[j])
		leftSum += left[j]
	}
	if leftSum <= c.totalCap*1e-9 {
		// Known demand uses everything: plan the unknown rows as if
		// they were alone, so they still get a sensible spread.
		left, leftSum = slices.Clone(c.capacity), c.totalCap
	}
	pseudo := leftSum / float64(len(c.fallback))
	if err := c.solve(c.fallback, func(int) float64 { return pseudo }, left); err != nil {
		return err
	}
	for _, b := range c.fallback {
		c.exps[b].DemandRPS = 0
		c.exps[b].Notes = append(c.exps[b].Notes, fmt.Sprintf(
			"no demand known: capacity-proportional fallback (pseudo-demand %.6g rps = spare capacity / %d rows without demand, cheapest locality first)", round6(pseudo), len(c.fallback)))
	}
	return nil
}

// unavailableRows fills the rows of a cluster with no capacity at all.
func (c *clusterPlanner) unavailableRows() {
	for b, pc := range c.in.proxies {
		if c.modes[pc] != ModeUnavailable {
			continue
		}
		c.rows[b] = unavailableRow(c.in.prevRows[pc], c.scs, c.subs, c.weightSum, c.set.den, c.exps[b])
	}
}

// shiftAndGuard applies row b's shifts, then the guardrails: blackhole only
// under overload, the blackhole cap, no weight on an unavailable
// sub-cluster, and the max step from the previous row.
func (c *clusterPlanner) shiftAndGuard(b int) {
	in, set, scs := c.in, c.set, c.scs
	pc := in.proxies[b]
	row := c.rows[b]
	shifted := false
	if c.modes[pc] != ModeUnavailable {
		for _, sh := range in.shifts[pc] {
			r := applyShift(row, sh, scs, c.subs, c.availSC, c.byCap, set, c.exps[b])
			c.plan.addShift(sh.Shift.ID, r)
			if r.Moved > 0 {
				shifted = true
			}
		}
	}
	if c.modes[pc] == ModePinned || c.modes[pc] == ModeUnavailable {
		return
	}
	e := c.exps[b]
	bh := row[config.Blackhole]
	if bh > 0 && (!c.overload || c.modes[pc] == ModeFallback) {
		if spread(row, bh, c.availList, c.byCap) {
			row[config.Blackhole] = 0
			why := fmt.Sprintf("demand %.6g rps ≤ capacity %.6g rps", round6(c.knownDemand), round6(c.totalCap))
			if c.modes[pc] == ModeFallback {
				why = "no demand known"
			}
			e.Guardrails = append(e.Guardrails, fmt.Sprintf("%s: %s %d→0 points, spread over sub-clusters by capacity (%s)",
				GuardBlackholeOnly, config.Blackhole, bh, why))
		}
	}
	limit := min(set.points(in.cfg.Policy.Blackhole.MaxPercent), set.den-1)
	if bh = row[config.Blackhole]; bh > limit {
		if spread(row, bh-limit, c.availList, c.byCap) {
			row[config.Blackhole] = limit
			e.Guardrails = append(e.Guardrails, fmt.Sprintf(
				"%s: %s %d→%d points (policy.blackhole.max_percent=%d; never 100 without a pin allowing it); the excess is spread over sub-clusters, which are projected above capacity",
				GuardBlackholeCap, config.Blackhole, bh, limit, in.cfg.Policy.Blackhole.MaxPercent))
		}
	}
	for _, name := range scs {
		if w := row[name]; w > 0 && !c.availSC[name] {
			row[name] = 0
			if !spread(row, w, c.availList, c.byCap) {
				row[config.Blackhole] += w
			}
			e.Guardrails = append(e.Guardrails, fmt.Sprintf("%s: %s %d→0 points", GuardUnavailable, name, w))
		}
	}
	prev := in.prevRows[pc]
	switch {
	case prev == nil:
	case shifted:
		e.Notes = append(e.Notes, "max-step not applied: the row carries a shift, whose ramp sets the pace")
	case prev.Denominator != set.den:
		e.Notes = append(e.Notes, fmt.Sprintf("max-step not applied: denominator changed %d→%d", prev.Denominator, set.den))
	case prev.Weights[config.Blackhole] >= prev.Denominator:
		// Nothing was available (everything drained or down): service comes
		// back at once. Held, the row would drop everything without the
		// unavailable mode's allow_full_drop — a snapshot nobody may publish.
		e.Notes = append(e.Notes, "max-step not applied: the previous row dropped everything (nothing was available)")
	default:
		step := set.points(set.maxStep)
		until, paced := in.paced[pc]
		paced = paced && set.maxStep < 100 // 100 disables the guardrail
		if paced {
			step = 0
		}
		out, held := maxStep(c.keys, prev.Weights, row, step, c.isAvail)
		if len(held) > 0 {
			c.rows[b] = out
			why := fmt.Sprintf("max_step_percent=%d", set.maxStep)
			if paced {
				why += fmt.Sprintf(" per step_interval=%s: the row moved less than that ago, next step at %s", set.stepInterval, until.UTC().Format(time.RFC3339))
			}
			e.Guardrails = append(e.Guardrails, fmt.Sprintf("%s: %s (%s)", GuardMaxStep, joinComma(held), why))
		}
	}
}

// output projects utilisation with the final rows and the known demand and
// assembles the snapshot entry of every proxy cluster.
func (c *clusterPlanner) output() clusterOutput {
	in, set, scs := c.in, c.set, c.scs
	load := make(map[string]float64, len(scs))
	for b := range in.proxies {
		if !in.known[b] {
			continue
		}
		for _, name := range scs {
			load[name] += in.demand[b] * float64(c.rows[b][name]) / float64(set.den)
		}
	}
	util := make(map[string]float64, len(scs))
	var noCap []string
	for _, name := range scs {
		switch {
		case c.capByName[name] > 0:
			util[name] = round6(load[name] / c.capByName[name])
		case load[name] > 0:
			noCap = append(noCap, name)
		}
	}
	c.plan.Utilisation = util

	out := clusterOutput{rows: make([]snapshot.Cluster, len(in.proxies)), plan: c.plan}
	for b, pc := range in.proxies {
		e := c.exps[b]
		e.Utilisation = util
		for _, name := range noCap {
			e.Notes = append(e.Notes, fmt.Sprintf("%s gets %.6g rps of projected load with no capacity", name, round6(load[name])))
		}
		row := c.rows[b]
		for k, v := range row {
			if v == 0 && k == config.Blackhole {
				delete(row, k)
			}
		}
		for _, name := range scs {
			row[name] += 0 // every sub-cluster appears in the row, even at 0
		}
		r := snapshot.Row{Denominator: set.den, Weights: row}
		if pin := in.pins[pc]; pin != nil {
			r.Pinned, r.AllowFullDrop = true, pin.AllowFullDrop || in.dropOK
		}
		if c.modes[pc] == ModeUnavailable && row[config.Blackhole] == set.den {
			r.AllowFullDrop = true
		}
		out.rows[b] = snapshot.Cluster{SubClusters: c.subs, Policy: in.cfg.Policy, Row: r, Explanation: e}
	}
	out.sums = clusterSums(c.subs, &in.cfg.Policy, out.rows)
	return out
}

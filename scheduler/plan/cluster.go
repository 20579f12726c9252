package plan

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
)

// Row modes recorded in explanations and ClusterPlan.Mode.
const (
	ModeOptimal     = "optimal"
	ModeFallback    = "capacity-proportional"
	ModePinned      = "pinned"
	ModeUnavailable = "unavailable"
)

// Guardrail names, the first word of every Explanation.Guardrails entry.
const (
	GuardDrain         = "drain"
	GuardBlackholeOnly = "blackhole-only-under-overload"
	GuardBlackholeCap  = "blackhole-cap"
	GuardUnavailable   = "no-available-instance"
	GuardMaxStep       = "max-step"
	GuardHysteresis    = "hysteresis"
)

// settings are the scheduler settings with zero values replaced by defaults
// (a State built in Go rather than decoded has zeros).
type settings struct {
	den, maxStep, hysteresis, target, perWeight int
	defaultDemand                               float64
	stepInterval                                time.Duration
}

func normalise(s config.SchedulerSettings) settings {
	d := config.DefaultSchedulerSettings()
	or := func(v, def int) int {
		if v <= 0 {
			return def
		}
		return v
	}
	return settings{
		den:           or(s.Denominator, d.Denominator),
		maxStep:       or(s.MaxStepPercent, d.MaxStepPercent),
		hysteresis:    max(0, s.HysteresisPercent),
		target:        or(s.TargetUtilisationPercent, d.TargetUtilisationPercent),
		perWeight:     or(s.CapacityPerWeightRPS, d.CapacityPerWeightRPS),
		defaultDemand: float64(max(0, s.DefaultDemandRPS)),
		stepInterval:  cmp.Or(s.StepInterval.D(), config.DefaultStepInterval),
	}
}

// points converts a percentage of the row into points of the denominator.
func (s settings) points(percent int) int { return percent * s.den / 100 }

// clusterInput is everything one backend cluster's plan depends on; its
// digest is the cache key.
type clusterInput struct {
	name    string
	cfg     config.Cluster
	members map[string][]config.Instance // nil: static instances
	drained map[string]bool
	proxies []string // sorted
	topo    *config.Topology
	set     settings
	demand  []float64 // per proxy; 0 when unknown
	known   []bool
	pins    map[string]*config.Pin
	shifts  map[string][]ActiveShift
	// paced[pc] is set when pc's row moved less than step_interval ago: it
	// is held (but in the safe direction) until then.
	paced    map[string]time.Time
	prevRows map[string]*snapshot.Row
	// prevOpt is the previous plan's optimum (points, before rounding) per
	// proxy cluster, from the previous snapshot's explanation.
	prevOpt map[string]map[string]float64
}

// clusterOutput is one backend cluster's plan: its snapshot entry per proxy
// cluster and the optimisation details.
type clusterOutput struct {
	// rows[b] is the entry for proxy cluster in.proxies[b].
	rows []snapshot.Cluster
	plan ClusterPlan
	// sums[b] is snapshot.ClusterHash of rows[b], for the content hash.
	sums [][sha256.Size]byte
}

func available(in config.Instance) bool {
	return in.Weight > 0 && (in.State == "" || in.State == config.StateHealthy)
}

// computeCluster plans one backend cluster: capacities, pins and drains as
// constraints, the exact optimum, rounding, shifts, then guardrails.
func computeCluster(in clusterInput) (clusterOutput, error) {
	set := in.set
	scs := sortedKeys(in.cfg.SubClusters)
	keys := append(slices.Clone(scs), config.Blackhole)
	subs := make(map[string]config.SubCluster, len(scs))
	capacity := make([]float64, len(scs))
	capByName := make(map[string]float64, len(scs))
	availSC := make(map[string]bool, len(scs))
	weightSum := make(map[string]float64, len(scs))
	var totalCap float64
	for j, name := range scs {
		sc := in.cfg.SubClusters[name]
		insts := sc.Instances
		if in.members != nil {
			insts = in.members[name]
		}
		excluded := sc.Excluded || in.drained[name]
		var c float64
		for _, inst := range insts {
			weightSum[name] += float64(inst.Weight)
			if !available(inst) {
				continue
			}
			if inst.CapacityRPS > 0 {
				c += float64(inst.CapacityRPS)
			} else {
				c += float64(inst.Weight) * float64(set.perWeight)
			}
		}
		c = c * float64(set.target) / 100
		if excluded {
			c = 0
		}
		capacity[j], capByName[name] = c, c
		availSC[name] = c > 0
		totalCap += c
		subs[name] = config.SubCluster{IDC: sc.IDC, Instances: slices.Clone(insts), Excluded: excluded}
	}
	var availList []string
	for _, name := range scs {
		if availSC[name] {
			availList = append(availList, name)
		}
	}
	byCap := func(k string) float64 { return capByName[k] }
	isAvail := func(k string) bool { return availSC[k] }

	nb := len(in.proxies)
	exps := make([]*snapshot.Explanation, nb)
	rows := make([]map[string]int, nb)
	modes := make(map[string]string, nb)
	plan := ClusterPlan{
		ProxyClusters: in.proxies, SubClusters: scs, Mode: modes,
		DemandRPS: make([]float64, nb), CapacityRPS: capacity,
		Flow: make([][]float64, nb), Drop: make([]float64, nb),
	}
	var knownDemand float64
	for b := range nb {
		plan.Flow[b] = make([]float64, len(scs))
		if in.known[b] {
			knownDemand += in.demand[b]
		}
	}
	overload := knownDemand > totalCap*(1+1e-9)

	// Pinned rows first: their traffic uses capacity the solver must not
	// hand out again.
	residual := slices.Clone(capacity)
	for b, pc := range in.proxies {
		costs := make(map[string]int, len(scs))
		capExp := make(map[string]float64, len(scs))
		for _, name := range scs {
			costs[name] = in.topo.Cost(in.topo.ProxyClusters[pc].IDC, subs[name].IDC)
			capExp[name] = round6(capByName[name])
		}
		exps[b] = &snapshot.Explanation{DemandRPS: in.demand[b], CapacityRPS: capExp, Cost: costs}
		pin := in.pins[pc]
		if pin == nil {
			continue
		}
		modes[pc] = ModePinned
		exps[b].Mode = ModePinned
		row := make(map[string]int, len(keys))
		for k, w := range pin.Weights {
			row[k] = w * set.den / 100
		}
		fixRowSum(row, set.den)
		applyDrainToPin(row, scs, subs, availList, byCap, exps[b])
		applyUnavailableToPin(row, scs, availSC, availList, byCap, exps[b])
		rows[b] = row
		plan.DemandRPS[b] = in.demand[b]
		if in.known[b] {
			for j, name := range scs {
				f := in.demand[b] * float64(row[name]) / float64(set.den)
				plan.Flow[b][j] = f
				residual[j] = max(0, residual[j]-f)
			}
			plan.Drop[b] = in.demand[b] * float64(row[config.Blackhole]) / float64(set.den)
		}
	}

	// Solve the rows with known demand on the capacity the pins left, then
	// the rows without demand (capacity-proportional fallback) on what is
	// left after that.
	var known, fallback []int
	for b, pc := range in.proxies {
		if rows[b] != nil {
			continue
		}
		switch {
		case totalCap == 0:
			modes[pc] = ModeUnavailable
		case in.known[b]:
			modes[pc] = ModeOptimal
			known = append(known, b)
		default:
			modes[pc] = ModeFallback
			fallback = append(fallback, b)
		}
		exps[b].Mode = modes[pc]
	}
	solved := make([]bool, nb)
	run := func(idx []int, demand func(b int) float64, capv []float64) error {
		if len(idx) == 0 {
			return nil
		}
		p := Problem{Capacity: capv}
		maxCost, minD := 0.0, 0.0
		for _, b := range idx {
			d := demand(b)
			p.ProxyClusters = append(p.ProxyClusters, in.proxies[b])
			p.Demand = append(p.Demand, d)
			cost := make([]float64, len(scs))
			for j, name := range scs {
				cost[j] = float64(exps[b].Cost[name])
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
		plan.Objective += sol.Objective
		for i, b := range idx {
			d := p.Demand[i]
			plan.DemandRPS[b] = d
			plan.Flow[b] = sol.Flow[i]
			plan.Drop[b] = sol.Drop[i]
			solved[b] = true
			if d <= 0 {
				continue
			}
			// The row is rounded from the optimum as recorded (to 1e-6
			// points), so float noise in the solver cannot flip a tie and
			// the same optimum always gives the same row.
			opt := make(map[string]float64, len(keys))
			for j, name := range scs {
				opt[name] = round6(sol.Flow[i][j] / d * float64(set.den))
			}
			if bh := round6(sol.Drop[i] / d * float64(set.den)); bh > 0 {
				opt[config.Blackhole] = bh
			}
			exps[b].Optimum = opt
			rows[b] = largestRemainder(keys, opt, set.den)
		}
		return nil
	}
	if err := run(known, func(b int) float64 { return in.demand[b] }, residual); err != nil {
		return clusterOutput{}, err
	}
	if len(fallback) > 0 {
		left := slices.Clone(residual)
		var leftSum float64
		for j := range scs {
			for _, b := range known {
				left[j] -= plan.Flow[b][j]
			}
			left[j] = max(0, left[j])
			leftSum += left[j]
		}
		if leftSum <= totalCap*1e-9 {
			// Known demand uses everything: plan the unknown rows as if
			// they were alone, so they still get a sensible spread.
			left, leftSum = slices.Clone(capacity), totalCap
		}
		pseudo := leftSum / float64(len(fallback))
		if err := run(fallback, func(int) float64 { return pseudo }, left); err != nil {
			return clusterOutput{}, err
		}
		for _, b := range fallback {
			exps[b].DemandRPS = 0
			exps[b].Notes = append(exps[b].Notes, fmt.Sprintf(
				"no demand known: capacity-proportional fallback (pseudo-demand %.6g rps = spare capacity / %d rows without demand, cheapest locality first)", round6(pseudo), len(fallback)))
		}
	}
	for b, pc := range in.proxies {
		if modes[pc] != ModeUnavailable {
			continue
		}
		rows[b] = unavailableRow(in.prevRows[pc], scs, subs, weightSum, set.den, exps[b])
	}

	// Shifts, then guardrails.
	for b, pc := range in.proxies {
		row := rows[b]
		shifted := false
		if modes[pc] != ModeUnavailable {
			for _, sh := range in.shifts[pc] {
				r := applyShift(row, sh, scs, subs, availSC, byCap, set, exps[b])
				plan.addShift(sh.Shift.ID, r)
				if r.Moved > 0 {
					shifted = true
				}
			}
		}
		if modes[pc] == ModePinned || modes[pc] == ModeUnavailable {
			continue
		}
		e := exps[b]
		bh := row[config.Blackhole]
		if bh > 0 && (!overload || modes[pc] == ModeFallback) {
			if spread(row, bh, availList, byCap) {
				row[config.Blackhole] = 0
				why := fmt.Sprintf("demand %.6g rps ≤ capacity %.6g rps", round6(knownDemand), round6(totalCap))
				if modes[pc] == ModeFallback {
					why = "no demand known"
				}
				e.Guardrails = append(e.Guardrails, fmt.Sprintf("%s: %s %d→0 points, spread over sub-clusters by capacity (%s)",
					GuardBlackholeOnly, config.Blackhole, bh, why))
			}
		}
		limit := min(set.points(in.cfg.Policy.Blackhole.MaxPercent), set.den-1)
		if bh = row[config.Blackhole]; bh > limit {
			if spread(row, bh-limit, availList, byCap) {
				row[config.Blackhole] = limit
				e.Guardrails = append(e.Guardrails, fmt.Sprintf(
					"%s: %s %d→%d points (policy.blackhole.max_percent=%d; never 100 without a pin allowing it); the excess is spread over sub-clusters, which are projected above capacity",
					GuardBlackholeCap, config.Blackhole, bh, limit, in.cfg.Policy.Blackhole.MaxPercent))
			}
		}
		for _, name := range scs {
			if w := row[name]; w > 0 && !availSC[name] {
				row[name] = 0
				if !spread(row, w, availList, byCap) {
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
		default:
			step := set.points(set.maxStep)
			until, paced := in.paced[pc]
			paced = paced && set.maxStep < 100 // 100 disables the guardrail
			if paced {
				step = 0
			}
			out, held := maxStep(keys, prev.Weights, row, step, isAvail)
			if len(held) > 0 {
				rows[b] = out
				why := fmt.Sprintf("max_step_percent=%d", set.maxStep)
				if paced {
					why += fmt.Sprintf(" per step_interval=%s: the row moved less than that ago, next step at %s", set.stepInterval, until.UTC().Format(time.RFC3339))
				}
				e.Guardrails = append(e.Guardrails, fmt.Sprintf("%s: %s (%s)", GuardMaxStep, joinComma(held), why))
			}
		}
	}

	// Projected utilisation with the final rows and the known demand.
	load := make(map[string]float64, len(scs))
	for b := range in.proxies {
		if !in.known[b] {
			continue
		}
		for _, name := range scs {
			load[name] += in.demand[b] * float64(rows[b][name]) / float64(set.den)
		}
	}
	util := make(map[string]float64, len(scs))
	var noCap []string
	for _, name := range scs {
		switch {
		case capByName[name] > 0:
			util[name] = round6(load[name] / capByName[name])
		case load[name] > 0:
			noCap = append(noCap, name)
		}
	}
	plan.Utilisation = util

	out := clusterOutput{rows: make([]snapshot.Cluster, nb), plan: plan}
	for b, pc := range in.proxies {
		e := exps[b]
		e.Utilisation = util
		for _, name := range noCap {
			e.Notes = append(e.Notes, fmt.Sprintf("%s gets %.6g rps of projected load with no capacity", name, round6(load[name])))
		}
		row := rows[b]
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
			r.Pinned, r.AllowFullDrop = true, pin.AllowFullDrop
		}
		if modes[pc] == ModeUnavailable && row[config.Blackhole] == set.den {
			r.AllowFullDrop = true
		}
		out.rows[b] = snapshot.Cluster{SubClusters: subs, Policy: in.cfg.Policy, Row: r, Explanation: e}
	}
	out.sums = clusterSums(subs, &in.cfg.Policy, out.rows)
	return out, nil
}

// stabilityFraction sets λ = stabilityFraction × the smallest demand solved,
// so the per-request/s stability slope λ/D is at most this much.
const stabilityFraction = 0.25

// fixRowSum makes an operator row sum to den after scaling (a pin sums to
// 100; on a denominator that is not a multiple of 100 the remainder goes to
// the largest entry).
func fixRowSum(row map[string]int, den int) {
	sum := 0
	for _, v := range row {
		sum += v
	}
	if sum == den || len(row) == 0 {
		return
	}
	keys := sortedKeys(row)
	sort.SliceStable(keys, func(i, j int) bool { return row[keys[i]] > row[keys[j]] })
	row[keys[0]] += den - sum
}

// applyDrainToPin moves a pinned row's weight off drained (excluded)
// sub-clusters: a drain is the stop-loss action and wins over the pin. The
// weight goes to the pin's other sub-clusters in proportion, else to the
// available ones by capacity, else to the blackhole.
func applyDrainToPin(row map[string]int, scs []string, subs map[string]config.SubCluster, avail []string, byCap func(string) float64, e *snapshot.Explanation) {
	for _, name := range scs {
		w := row[name]
		if w == 0 || !subs[name].Excluded {
			continue
		}
		row[name] = 0
		var others []string
		for _, o := range scs {
			if row[o] > 0 && !subs[o].Excluded {
				others = append(others, o)
			}
		}
		to := "the pin's other sub-clusters"
		if !spread(row, w, others, func(k string) float64 { return float64(row[k]) }) {
			to = "available sub-clusters by capacity"
			if !spread(row, w, avail, byCap) {
				row[config.Blackhole] += w
				to = config.Blackhole
			}
		}
		e.Guardrails = append(e.Guardrails, fmt.Sprintf("%s: %s is drained: its %d pinned points moved to %s", GuardDrain, name, w, to))
	}
}

// applyUnavailableToPin moves a pinned row's weight off sub-clusters with no
// available instance, to the pin's other available sub-clusters in
// proportion, else to the available ones by capacity — never to the
// blackhole: an outage must not turn into dropped traffic. When nothing is
// available at all the pin is kept (the proxies' cross retries decide).
// The operator's pin is unchanged; the published row says why it differs.
func applyUnavailableToPin(row map[string]int, scs []string, availSC map[string]bool, avail []string, byCap func(string) float64, e *snapshot.Explanation) {
	for _, name := range scs {
		w := row[name]
		if w == 0 || availSC[name] {
			continue
		}
		var others []string
		for _, o := range scs {
			if o != name && row[o] > 0 && availSC[o] {
				others = append(others, o)
			}
		}
		row[name] = 0
		to := "the pin's other sub-clusters"
		if !spread(row, w, others, func(k string) float64 { return float64(row[k]) }) {
			to = "available sub-clusters by capacity"
			if !spread(row, w, avail, byCap) {
				row[name] = w
				e.Notes = append(e.Notes, fmt.Sprintf(
					"warning: the pin puts %d points on %s, which has no available instance, and no other sub-cluster has one: kept", w, name))
				continue
			}
		}
		e.Guardrails = append(e.Guardrails, fmt.Sprintf("%s: %s has no available instance: its %d pinned points moved to %s", GuardUnavailable, name, w, to))
	}
}

// unavailableRow is the row of a cluster with no available instance at
// all: the previous row if there is one (the proxies' health-aware pick
// copes), else the configured weights of the sub-clusters not drained, else
// (everything drained) a full drop, which the drains themselves authorise.
func unavailableRow(prev *snapshot.Row, scs []string, subs map[string]config.SubCluster, weightSum map[string]float64, den int, e *snapshot.Explanation) map[string]int {
	if prev != nil && prev.Denominator == den {
		e.Notes = append(e.Notes, "no sub-cluster has an available instance: previous row kept")
		row := make(map[string]int, len(prev.Weights))
		for k, v := range prev.Weights {
			if s, ok := subs[k]; (ok && !s.Excluded) || k == config.Blackhole {
				row[k] = v
			} else if v > 0 {
				row[config.Blackhole] += v
			}
		}
		return row
	}
	var open []string
	for _, name := range scs {
		if !subs[name].Excluded {
			open = append(open, name)
		}
	}
	row := make(map[string]int, len(scs)+1)
	if spread(row, den, open, func(k string) float64 { return weightSum[k] }) {
		e.Notes = append(e.Notes, "no sub-cluster has an available instance and there is no previous row: spread by configured instance weight")
		return row
	}
	row[config.Blackhole] = den
	e.Notes = append(e.Notes, "warning: every sub-cluster is drained or excluded: the whole row is dropped (the drains are the override)")
	return row
}

func joinComma(xs []string) string {
	out := ""
	for i, x := range xs {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}

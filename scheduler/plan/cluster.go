package plan

import (
	"cmp"
	"crypto/sha256"
	"fmt"
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
	// dropOK: a drain of this cluster carries allow_full_drop, so a pinned
	// row the drains leave with nothing but GSLB_BLACKHOLE may drop it all.
	dropOK  bool
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

// Available reports whether an instance takes traffic (the planner's rule,
// also the rollout's for urgent changes).
func Available(in config.Instance) bool { return available(in) }

func available(in config.Instance) bool {
	return in.Weight > 0 && (in.State == "" || in.State == config.StateHealthy)
}

// computeCluster plans one backend cluster in named stages: capacities,
// pinned rows (constraints the solver must respect), the exact optimum for
// rows with known demand, the capacity-proportional fallback, unavailable
// rows, shifts and guardrails, then projected utilisation and the output.
func computeCluster(in clusterInput) (clusterOutput, error) {
	c := newClusterPlanner(in)
	c.pinnedRows()
	c.classify()
	if err := c.solve(c.known, func(b int) float64 { return in.demand[b] }, c.residual); err != nil {
		return clusterOutput{}, err
	}
	if err := c.solveFallback(); err != nil {
		return clusterOutput{}, err
	}
	c.unavailableRows()
	for b := range in.proxies {
		c.shiftAndGuard(b)
	}
	return c.output(), nil
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

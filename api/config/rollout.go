package config

import "time"

// RolloutPolicy makes new snapshots reach the proxies in stages, each gated
// on the proxies' acknowledgements and measured traffic, with automatic
// rollback (scheduler/internal/rollout). Set fleet-wide (State.Rollout) or per proxy
// cluster (ProxyCluster.Rollout, which wins). No policy: every new snapshot
// goes to every proxy at once.
type RolloutPolicy struct {
	// Stages run in order; each one's selection includes the previous
	// stages' proxies. After the last stage the candidate becomes the
	// stable snapshot of every proxy.
	Stages []RolloutStage `json:"stages"`
	// Gates judge every stage.
	Gates RolloutGates `json:"gates,omitzero"`
	// Promotion is "auto" (default: the next stage starts when the gates
	// passed) or "manual" (the stage waits for `lbctl rollout promote`).
	Promotion string `json:"promotion,omitempty"`
}

// Promotion modes.
const (
	PromotionAuto   = "auto"
	PromotionManual = "manual"
)

// RolloutStage selects the proxies that run the candidate. Exactly one of
// Count, Percent and ProxyClusters is written (validate): a selector is set
// when it is present, whatever its value, so an explicit `count: 0` next to
// `percent: 50` is two selectors (refused), never a percent stage, and
// `count: 0` alone is refused by its rule, never read as "unset". As the
// gates' pointers (RolloutGates): nil is absent, a pointer to 0 was written.
type RolloutStage struct {
	// Count proxies of each proxy cluster (of its live proxies, the first by
	// a hash of their id: always the same ones); ≥ 1.
	Count *int `json:"count,omitempty"`
	// Percent of each proxy cluster's proxies (0 < p ≤ 100), chosen by a
	// hash of their id: a proxy decides by itself, also when it restarts.
	Percent *float64 `json:"percent,omitempty"`
	// ProxyClusters: every proxy of these proxy clusters (an IDC at a time);
	// the proxy clusters not listed wait for a later stage. Nil is absent;
	// a written empty list (non-nil, kept by omitzero through the stored
	// JSON) is set, and refused (validate).
	ProxyClusters []string `json:"proxy_clusters,omitzero"`
	// Bake is how long the gates watch the stage's traffic once every
	// selected proxy applied the candidate. Absent: 60s. 0s: no bake, the
	// stage passes once its proxies applied the candidate (the traffic gates
	// judge it at most once, on the reports already in).
	Bake *Duration `json:"bake,omitempty"`
}

// RolloutGates are the thresholds of every stage. The pointer fields are
// nil when absent and then take the defaults below (WithDefaults); an
// explicit 0 means what the field says it means, never "the default".
// A negative max_5xx_ratio, p99_factor or blackhole_epsilon_points turns
// that gate off; a negative margin_5xx or share_tolerance_points is refused.
type RolloutGates struct {
	// ApplyTimeout: every selected proxy applies the candidate within it.
	// Absent: 30s. 0s is refused (validate): it would fail every stage
	// before its proxies could apply the candidate.
	ApplyTimeout *Duration `json:"apply_timeout,omitempty"`
	// Max5xxRatio (0-1): the stage's 5xx ratio (blackhole drops excepted)
	// that, when also above the stable proxies' ratio + Margin5xx (with
	// Confidence5xx), fails the stage. Absent: 0.05; 0: any 5xx ratio above
	// the stable proxies' (+ Margin5xx) fails; negative: off.
	Max5xxRatio *float64 `json:"max_5xx_ratio,omitempty"`
	// Margin5xx (0-1) over the stable proxies' 5xx ratio measured at the
	// same time (a fleet-wide incident is not the candidate's). Absent:
	// 0.02; 0: no margin; negative is refused (validate).
	Margin5xx *float64 `json:"margin_5xx,omitempty"`
	// Confidence5xx (0 < c < 1): the stage is above the stable ratio +
	// Margin5xx only when a one-sided two-proportion test says so at this
	// confidence over the whole bake (each of its judgements at 1 −
	// (1 − c)/judgements), given both sides' numbers of answers: sampling
	// noise alone does not fail a stage. Absent: 0.99; 0: off, the ratios
	// are compared plainly.
	Confidence5xx *float64 `json:"confidence_5xx,omitempty"`
	// P99Factor (≥ 1): the stage's p99 latency above the stable proxies' ×
	// this factor fails the stage. Absent: 3; negative: off. 0 ≤ f < 1 is
	// refused (validate): 0 would fail every stage with any latency, and a
	// factor below 1 demands a canary faster than the stable proxies, which
	// fails a fair one by noise alone.
	P99Factor *float64 `json:"p99_factor,omitempty"`
	// ShareTolerance (points): a sub-cluster's realised share on the stage's
	// proxies farther than this from the candidate's weight fails the
	// stage. Absent or 0: off (a realised share is never exactly its
	// weight). Not a pointer: 0 and absent mean the same. Negative is
	// refused (validate).
	ShareTolerance float64 `json:"share_tolerance_points,omitempty"`
	// BlackholeEpsilon (points): the realised blackhole share above the
	// candidate's blackhole weight + this fails the stage. Absent: 5; 0: no
	// drop beyond the weight; negative: off.
	BlackholeEpsilon *float64 `json:"blackhole_epsilon_points,omitempty"`
	// MinRequests: traffic gates judge a side (stage or stable) only with at
	// least this many answers in the window. Absent: 20; below 1 is refused
	// (validate): a side with no answers has no ratio to judge.
	MinRequests *int `json:"min_requests,omitempty"`
}

// Rollout policy defaults.
const (
	DefaultRolloutBake         = 60 * time.Second
	DefaultRolloutApplyTimeout = 30 * time.Second
	DefaultMax5xxRatio         = 0.05
	DefaultMargin5xx           = 0.02
	DefaultConfidence5xx       = 0.99
	DefaultP99Factor           = 3
	DefaultBlackholeEpsilon    = 5
	DefaultMinRequests         = 20
)

// WithDefaults fills the absent (nil) fields: every pointer of the result
// is set. An explicit 0 stays 0.
func (g RolloutGates) WithDefaults() RolloutGates {
	g.ApplyTimeout = orDefault(g.ApplyTimeout, Duration(DefaultRolloutApplyTimeout))
	g.Max5xxRatio = orDefault(g.Max5xxRatio, DefaultMax5xxRatio)
	g.Margin5xx = orDefault(g.Margin5xx, DefaultMargin5xx)
	g.Confidence5xx = orDefault(g.Confidence5xx, DefaultConfidence5xx)
	g.P99Factor = orDefault(g.P99Factor, DefaultP99Factor)
	g.BlackholeEpsilon = orDefault(g.BlackholeEpsilon, DefaultBlackholeEpsilon)
	g.MinRequests = orDefault(g.MinRequests, DefaultMinRequests)
	return g
}

// orDefault is p, or a pointer to def when p is absent (nil).
func orDefault[T any](p *T, def T) *T {
	if p == nil {
		return &def
	}
	return p
}

// BakeTime is the stage's bake with the default applied (absent: 60s; an
// explicit 0s stays 0).
func (s RolloutStage) BakeTime() time.Duration {
	return orDefault(s.Bake, Duration(DefaultRolloutBake)).D()
}

// RolloutFor is the policy of proxy cluster pc: its own, else the
// fleet-wide one, else nil.
func (s *State) RolloutFor(pc string) *RolloutPolicy {
	if p := s.Topology.ProxyClusters[pc].Rollout; p != nil {
		return p
	}
	return s.Rollout
}

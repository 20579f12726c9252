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
// Count, Percent and ProxyClusters is set.
type RolloutStage struct {
	// Count proxies of each proxy cluster (of its live proxies, the first by
	// a hash of their id: always the same ones).
	Count int `json:"count,omitempty"`
	// Percent of each proxy cluster's proxies (0 < p ≤ 100), chosen by a
	// hash of their id: a proxy decides by itself, also when it restarts.
	Percent float64 `json:"percent,omitempty"`
	// ProxyClusters: every proxy of these proxy clusters (an IDC at a time);
	// the proxy clusters not listed wait for a later stage.
	ProxyClusters []string `json:"proxy_clusters,omitempty"`
	// Bake is how long the gates watch the stage's traffic once every
	// selected proxy applied the candidate. Default 60s.
	Bake Duration `json:"bake,omitempty"`
}

// RolloutGates are the thresholds of every stage. Zero fields take the
// defaults below (Confidence5xx: an absent one); a negative ratio or factor
// turns that gate off.
type RolloutGates struct {
	// ApplyTimeout: every selected proxy applies the candidate within it.
	// Default 30s.
	ApplyTimeout Duration `json:"apply_timeout,omitempty"`
	// Max5xxRatio (0-1): the stage's 5xx ratio (blackhole drops excepted)
	// that, when also above the stable proxies' ratio + Margin5xx (with
	// Confidence5xx), fails the stage. Default 0.05.
	Max5xxRatio float64 `json:"max_5xx_ratio,omitempty"`
	// Margin5xx (0-1) over the stable proxies' 5xx ratio measured at the
	// same time (a fleet-wide incident is not the candidate's). Default 0.02.
	Margin5xx float64 `json:"margin_5xx,omitempty"`
	// Confidence5xx (0 < c < 1): the stage is above the stable ratio +
	// Margin5xx only when a one-sided two-proportion test says so at this
	// confidence, given both sides' numbers of answers: sampling noise
	// alone does not fail a stage. Absent: 0.99; 0: off, the ratios are
	// compared plainly. A pointer: an explicit 0 is not the default.
	Confidence5xx *float64 `json:"confidence_5xx,omitempty"`
	// P99Factor: the stage's p99 latency above the stable proxies' × this
	// factor fails the stage. Default 3; negative: off.
	P99Factor float64 `json:"p99_factor,omitempty"`
	// ShareTolerance (points): a sub-cluster's realised share on the stage's
	// proxies farther than this from the candidate's weight fails the
	// stage. Default 0: off.
	ShareTolerance float64 `json:"share_tolerance_points,omitempty"`
	// BlackholeEpsilon (points): the realised blackhole share above the
	// candidate's blackhole weight + this fails the stage. Default 5.
	BlackholeEpsilon float64 `json:"blackhole_epsilon_points,omitempty"`
	// MinRequests: traffic gates judge a side (stage or stable) only with at
	// least this many answers in the window. Default 20.
	MinRequests int `json:"min_requests,omitempty"`
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

// WithDefaults fills the zero fields.
func (g RolloutGates) WithDefaults() RolloutGates {
	if g.ApplyTimeout == 0 {
		g.ApplyTimeout = Duration(DefaultRolloutApplyTimeout)
	}
	if g.Max5xxRatio == 0 {
		g.Max5xxRatio = DefaultMax5xxRatio
	}
	if g.Margin5xx == 0 {
		g.Margin5xx = DefaultMargin5xx
	}
	if g.Confidence5xx == nil {
		c := DefaultConfidence5xx
		g.Confidence5xx = &c
	}
	if g.P99Factor == 0 {
		g.P99Factor = DefaultP99Factor
	}
	if g.BlackholeEpsilon == 0 {
		g.BlackholeEpsilon = DefaultBlackholeEpsilon
	}
	if g.MinRequests == 0 {
		g.MinRequests = DefaultMinRequests
	}
	return g
}

// BakeTime is the stage's bake with the default applied.
func (s RolloutStage) BakeTime() time.Duration {
	if s.Bake == 0 {
		return DefaultRolloutBake
	}
	return s.Bake.D()
}

// RolloutFor is the policy of proxy cluster pc: its own, else the
// fleet-wide one, else nil.
func (s *State) RolloutFor(pc string) *RolloutPolicy {
	if p := s.Topology.ProxyClusters[pc].Rollout; p != nil {
		return p
	}
	return s.Rollout
}

// Package config holds the desired state that operators author: topology,
// products and their routes, backend clusters with their policy, pinned weight
// rows and drains. It is stored in etcd as one document (see api/keys) and
// written by lbctl with compare-and-swap on its revision.
//
// Field names are snake_case in JSON and YAML; durations carry a unit ("2s").
// Every default is set in one place, Default*, and documented in docs/config.md.
// Decoding is strict (api/decode); semantic rules live in api/validate.
package config

// Blackhole is the reserved sub-cluster name of the dropped share of a row,
// as in BFE's gslb.data.
const Blackhole = "GSLB_BLACKHOLE"

// DefaultDenominator is the sum of every operator-authored weight row (a
// percentage, as BFE's control plane uses).
const DefaultDenominator = 100

// State is the whole desired state.
type State struct {
	// Topology names the IDCs, the proxy clusters and the locality cost.
	Topology Topology `json:"topology"`
	// Products route hosts to clusters, keyed by product name.
	Products map[string]Product `json:"products,omitempty"`
	// DefaultProduct handles requests whose Host matches no product. Empty:
	// such requests get 404.
	DefaultProduct string `json:"default_product,omitempty"`
	// Clusters are the backend clusters, keyed by name.
	Clusters map[string]Cluster `json:"clusters,omitempty"`
	// Pins are operator-fixed weight rows; they win over computation.
	Pins []Pin `json:"pins,omitempty"`
	// Drains take sub-clusters out of service (no primary traffic, no retries).
	Drains []Drain `json:"drains,omitempty"`
	// Scheduler tunes how weights are computed.
	Scheduler SchedulerSettings `json:"scheduler"`
	// Rollout stages new snapshots (fleet-wide; a proxy cluster's own
	// policy wins). Nil: every change reaches every proxy at once.
	Rollout *RolloutPolicy `json:"rollout,omitempty"`
	// Urgent is set by the operator write that stored this state when it
	// was marked urgent (lbctl --urgent; every other lbctl write clears
	// it): the changes it brings skip the rollout stages.
	Urgent *Urgent `json:"urgent,omitempty"`
}

// Urgent marks an operator write whose changes go to every proxy at once.
type Urgent struct {
	Author string `json:"author,omitempty"`
	// What names the write, e.g. "lbctl weights set".
	What string `json:"what,omitempty"`
}

// Topology describes where things are.
type Topology struct {
	// IDCs lists every datacenter name.
	IDCs []string `json:"idcs"`
	// ProxyClusters are keyed by name (e.g. "BFE1").
	ProxyClusters map[string]ProxyCluster `json:"proxy_clusters"`
	// LocalityCost[from][to] is the cost of sending traffic from a proxy in IDC
	// "from" to a sub-cluster in IDC "to" (for example RTT in ms). Missing
	// pairs default to 0 within an IDC and DefaultRemoteCost across IDCs.
	LocalityCost map[string]map[string]int `json:"locality_cost,omitempty"`
}

// DefaultRemoteCost is the locality cost between two different IDCs when the
// topology does not give one.
const DefaultRemoteCost = 10

// Cost returns the locality cost from IDC a to IDC b with defaults applied.
func (t Topology) Cost(a, b string) int {
	if c, ok := t.LocalityCost[a][b]; ok {
		return c
	}
	if a == b {
		return 0
	}
	return DefaultRemoteCost
}

// ProxyCluster is a group of lbproxy nodes that share one snapshot.
type ProxyCluster struct {
	// IDC is where the proxies of this cluster run.
	IDC string `json:"idc"`
	// TrustedProxies are CIDRs whose X-Forwarded-For is believed when taking
	// the client IP. Empty: the peer address is always the client IP.
	TrustedProxies []string `json:"trusted_proxies,omitempty"`
	// Rollout stages this proxy cluster's new snapshots (wins over
	// State.Rollout).
	Rollout *RolloutPolicy `json:"rollout,omitempty"`
}

// Product is a set of hosts with an ordered list of route rules.
type Product struct {
	// Hosts are exact host names (case-insensitive, port ignored).
	Hosts []string `json:"hosts,omitempty"`
	// Rules are tried in order; the first match wins. The last rule must be
	// a default rule (cond "default_t()").
	Rules []Rule `json:"rules"`
}

// Rule routes requests that match Cond to Cluster.
type Rule struct {
	// Name labels the rule in logs and traces; defaults to its index.
	Name string `json:"name,omitempty"`
	// Cond is a condition in BFE's language, e.g. req_path_prefix_in("/static", false).
	Cond string `json:"cond"`
	// Cluster is the backend cluster name.
	Cluster string `json:"cluster"`
}

// Cluster is a backend cluster: sub-clusters (one per IDC, usually) and policy.
type Cluster struct {
	// SubClusters are keyed by name; GSLB_BLACKHOLE is reserved.
	SubClusters map[string]SubCluster `json:"subclusters"`
	// Policy says how the proxy balances, retries, checks and pools.
	Policy Policy `json:"policy"`
}

// SubCluster is a group of instances in one IDC.
type SubCluster struct {
	// IDC is where the instances run.
	IDC string `json:"idc"`
	// Instances are static members; agents register more at run time.
	Instances []Instance `json:"instances,omitempty"`
	// Excluded sub-clusters take no traffic at all (BFE's negative weight).
	Excluded bool `json:"excluded,omitempty"`
}

// Instance states as reported by agents (and carried in snapshots).
const (
	StateHealthy   = "healthy"
	StateUnhealthy = "unhealthy"
	StateDraining  = "draining"
)

// Instance is one backend address.
type Instance struct {
	// Addr is an IP address (v4 or v6).
	Addr string `json:"addr"`
	// Port is 1..65535.
	Port int `json:"port"`
	// Weight is the relative instance weight, 0..MaxInstanceWeight; 0 takes no traffic.
	Weight int `json:"weight"`
	// CapacityRPS is the declared capacity in requests/s; 0 means
	// weight × scheduler.capacity_per_weight_rps.
	CapacityRPS int `json:"capacity_rps,omitempty"`
	// State is "", "healthy", "unhealthy" or "draining" (set from agent reports).
	State string `json:"state,omitempty"`
	// Labels are free-form metadata.
	Labels map[string]string `json:"labels,omitempty"`
}

// MaxInstanceWeight bounds instance weights so sums never overflow.
const MaxInstanceWeight = 1_000_000

// Pin fixes the weight row of one proxy cluster for one backend cluster.
type Pin struct {
	ProxyCluster string `json:"proxy_cluster"`
	Cluster      string `json:"cluster"`
	// Weights maps sub-cluster names (and GSLB_BLACKHOLE) to integers that
	// sum to 100.
	Weights map[string]int `json:"weights"`
	// AllowFullDrop permits GSLB_BLACKHOLE = 100.
	AllowFullDrop bool   `json:"allow_full_drop,omitempty"`
	Reason        string `json:"reason,omitempty"`
	Author        string `json:"author,omitempty"`
}

// Drain takes one sub-cluster of one cluster out of service.
type Drain struct {
	Cluster    string `json:"cluster"`
	SubCluster string `json:"subcluster"`
	// AllowFullDrop lets a pinned row of the cluster that the drains leave
	// with nothing but GSLB_BLACKHOLE drop all its traffic (lbctl drain
	// --allow-full-drop); without it lbctl refuses such a drain.
	AllowFullDrop bool   `json:"allow_full_drop,omitempty"`
	Reason        string `json:"reason,omitempty"`
	Author        string `json:"author,omitempty"`
}

// SchedulerSettings tune lbscheduler.
type SchedulerSettings struct {
	// Denominator is the sum of every computed row: 100 or 10000. Default 100.
	Denominator int `json:"denominator"`
	// MaxStepPercent bounds how many points a computed weight may move per
	// StepInterval (weight leaving a sub-cluster with nothing available moves
	// at once). Default 10; 100 disables the guardrail.
	MaxStepPercent int `json:"max_step_percent"`
	// StepInterval paces MaxStepPercent: after a computed row moved, it does
	// not move again (but in the safe direction) for this long. Default 30s
	// (DefaultStepInterval).
	StepInterval Duration `json:"step_interval,omitempty"`
	// HysteresisPercent: changes smaller than this (in points of the row) are
	// not published. Default 1.
	HysteresisPercent int `json:"hysteresis_percent"`
	// TargetUtilisationPercent scales capacity (plan for 80 % busy). Default 80.
	TargetUtilisationPercent int `json:"target_utilisation_percent"`
	// CapacityPerWeightRPS is an instance's capacity per unit of weight when
	// it declares none. Default 100.
	CapacityPerWeightRPS int `json:"capacity_per_weight_rps"`
	// DefaultDemandRPS is assumed per (proxy cluster, cluster) when no proxy
	// reported demand. Default 0: fall back to capacity-proportional weights.
	DefaultDemandRPS int `json:"default_demand_rps"`
	// InstanceGrace debounces instances whose agent lease vanished. Default 30s.
	InstanceGrace Duration `json:"instance_grace"`
	// History is how many snapshots are kept per proxy cluster. Default 50.
	History int `json:"history"`
}

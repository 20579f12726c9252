package report

// ProxyInstance is how one proxy sees one instance of the table it applied:
// its passive and active health, slow start and load. It travels in the
// proxy's demand report (Demand.Instances), so that the dashboard shows what
// the proxies see without asking each proxy's admin API.
type ProxyInstance struct {
	Cluster    string `json:"cluster"`
	SubCluster string `json:"subcluster"`
	// Addr is ip:port.
	Addr string `json:"addr"`
	// Health is NORMAL, CHECKING (ejected by passive checks, probed until it
	// recovers) or DOWN (failed the always-on active probes).
	Health string `json:"health"`
	// Available: the balancer may pick it now (NORMAL, or ejected past the
	// ejection cap); false too when excluded or drained.
	Available bool `json:"available"`
	// Excluded: the control plane's snapshot excludes it (its agent's state).
	Excluded bool `json:"excluded,omitempty"`
	// Drained: an operator override on this proxy drains it.
	Drained bool `json:"drained,omitempty"`
	// SlowStart is the slow-start ramp's progress (0.01 to 1) while it ramps
	// (absent: not ramping).
	SlowStart float64 `json:"slow_start,omitempty"`
	// InFlight is how many requests this proxy has in flight to it.
	InFlight int64 `json:"in_flight"`
}

// MaxReportedInstances bounds Demand.Instances: a proxy reports at most this
// many instances (sorted by cluster, sub-cluster and address) and sets
// Demand.InstancesTruncated when it left some out.
const MaxReportedInstances = 1000

// Proxy health words (ProxyInstance.Health), as the balancer names them.
const (
	ProxyHealthNormal   = "NORMAL"
	ProxyHealthChecking = "CHECKING"
	ProxyHealthDown     = "DOWN"
)

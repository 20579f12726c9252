// Package report holds what running components write into etcd about
// themselves, all under leases so that a dead process disappears by itself:
// agent registrations with health and load, proxy status and proxy demand.
package report

import (
	"time"
)

// DefaultReportInterval is how often a proxy rewrites its status unless
// configured otherwise (statusreport.DefaultInterval).
const DefaultReportInterval = 5 * time.Second

// GoneFor is how long a proxy whose status lease expired is still listed
// (GONE) from its last-seen record; the scheduler deletes older records.
const GoneFor = 10 * time.Minute

// Instance is an agent's registration of one backend, with its health and
// load. Key: keys.Layout.Instance(Cluster, SubCluster, ip:port).
type Instance struct {
	Cluster    string `json:"cluster"`
	SubCluster string `json:"subcluster"`
	IDC        string `json:"idc"`
	Addr       string `json:"addr"`
	Port       int    `json:"port"`
	Weight     int    `json:"weight"`
	// CapacityRPS is declared or derived capacity in requests/s (0: unknown).
	CapacityRPS  int               `json:"capacity_rps,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	AgentVersion string            `json:"agent_version,omitempty"`
	// State is config.StateHealthy, StateUnhealthy or StateDraining.
	State string `json:"state"`
	// Reason explains the state (last probe error, "SIGTERM", ...).
	Reason string `json:"reason,omitempty"`
	// Load signals; zero when unknown.
	InFlight   int       `json:"in_flight,omitempty"`
	RPS        float64   `json:"rps,omitempty"`
	CPUPercent float64   `json:"cpu_percent,omitempty"`
	MemPercent float64   `json:"mem_percent,omitempty"`
	UpdatedAt  time.Time `json:"updated_at,omitzero"`
}

// ProxyStatus is what one lbproxy applied. Key: keys.Layout.Status.
type ProxyStatus struct {
	ProxyCluster string `json:"proxy_cluster"`
	ID           string `json:"id"`
	// AppliedLineage, AppliedVersion and AppliedHash identify the snapshot
	// in service ("" lineage: unknown, older than lineages).
	AppliedLineage string    `json:"applied_lineage,omitempty"`
	AppliedVersion uint64    `json:"applied_version"`
	AppliedHash    string    `json:"applied_hash,omitempty"`
	AppliedAt      time.Time `json:"applied_at,omitzero"`
	// RejectedVersion is the newest version refused, with the reason.
	RejectedVersion uint64 `json:"rejected_version,omitempty"`
	RejectedReason  string `json:"rejected_reason,omitempty"`
	// LatestVersion is the newest version the proxy has seen published in
	// its applied lineage.
	LatestVersion uint64 `json:"latest_version,omitempty"`
	// PointerLineage and PointerVersion are what current/<proxy cluster>
	// named when the proxy last read it.
	// During a staged rollout they name what the pointer says for this
	// proxy: the candidate when the stage selects it, else the stable
	// version.
	PointerLineage string `json:"pointer_lineage,omitempty"`
	PointerVersion uint64 `json:"pointer_version,omitempty"`
	// Rollout and RolloutStage name the staged rollout the pointer carries
	// ("": none); InStage: its stage selects this proxy.
	Rollout      string `json:"rollout,omitempty"`
	RolloutStage int    `json:"rollout_stage,omitempty"`
	InStage      bool   `json:"in_stage,omitempty"`
	// Ahead: the pointer names an older version of the applied lineage (it
	// was moved back); the proxy keeps the newer snapshot it applied (I1)
	// until a version above it is published.
	Ahead bool `json:"ahead,omitempty"`
	// LineageChanges counts the lineage changes this proxy followed since it
	// started; PreviousLineage is the lineage it left last.
	LineageChanges  uint64 `json:"lineage_changes,omitempty"`
	PreviousLineage string `json:"previous_lineage,omitempty"`
	// WatchLagSeconds is how long the proxy's applied snapshot may lag etcd,
	// as of UpdatedAt: the seconds since the proxy last heard from etcd that
	// its view of the pointer was complete (a listing, a watch event, a
	// progress notification), connected or not (docs/lbproxy.md
	// "Staleness").
	WatchLagSeconds float64 `json:"watch_lag_seconds"`
	// EtcdConnected is false while the proxy cannot reach etcd (then this
	// key is only updated once it can again).
	EtcdConnected bool      `json:"etcd_connected"`
	Source        string    `json:"source,omitempty"` // "etcd", "disk-cache"
	AdminAddr     string    `json:"admin_addr,omitempty"`
	ListenAddr    string    `json:"listen_addr,omitempty"`
	BinaryVersion string    `json:"binary_version,omitempty"`
	StartedAt     time.Time `json:"started_at,omitzero"`
	UpdatedAt     time.Time `json:"updated_at,omitzero"`
	// ReportIntervalSeconds is how often the proxy rewrites this status
	// (0: unknown, DefaultReportInterval is assumed).
	ReportIntervalSeconds float64 `json:"report_interval_seconds,omitempty"`
}

// WatchLagAt is the watch lag as of now: WatchLagSeconds, which the proxy
// measured at UpdatedAt, plus the time since. What the proxy heard from etcd
// after it wrote this status is not known (and one that cannot reach etcd
// does not rewrite it), so a proxy silent for a minute shows a minute more,
// not the figure it last wrote.
func (s ProxyStatus) WatchLagAt(now time.Time) float64 {
	if s.UpdatedAt.IsZero() {
		return s.WatchLagSeconds
	}
	return s.WatchLagSeconds + max(0, now.Sub(s.UpdatedAt).Seconds())
}

// StaleAfter is the age past which this status is STALE: two report
// intervals without a rewrite.
func (s ProxyStatus) StaleAfter() time.Duration {
	every := DefaultReportInterval
	if s.ReportIntervalSeconds > 0 {
		every = time.Duration(s.ReportIntervalSeconds * float64(time.Second))
	}
	return 2 * every
}

// Demand is one proxy's observed demand per backend cluster.
// Key: keys.Layout.Demand.
type Demand struct {
	ProxyCluster string                   `json:"proxy_cluster"`
	ID           string                   `json:"id"`
	Clusters     map[string]ClusterDemand `json:"clusters"`
	// WindowSeconds is the averaging window of the rates.
	WindowSeconds float64   `json:"window_seconds"`
	UpdatedAt     time.Time `json:"updated_at,omitzero"`
	// Instances is the proxy's view of the instances of its table (see
	// ProxyInstance); InstancesTruncated: it left some out.
	Instances          []ProxyInstance `json:"instances,omitempty"`
	InstancesTruncated bool            `json:"instances_truncated,omitempty"`
}

// ClusterDemand is the request rate one proxy sends to a cluster.
type ClusterDemand struct {
	RPS      float64 `json:"rps"`
	ErrorRPS float64 `json:"error_rps"`
	// BlackholeRPS is the rate of requests dropped by the blackhole share.
	BlackholeRPS float64 `json:"blackhole_rps,omitempty"`
	// Traffic details the answers of the window (absent from proxies older
	// than traffic reports).
	Traffic *Traffic `json:"traffic,omitempty"`
}

// Leader is what the scheduler leader writes under keys.Layout.Leader.
type Leader struct {
	ID      string    `json:"id"`
	APIAddr string    `json:"api_addr"`
	Since   time.Time `json:"since,omitzero"`
}

// SchedulerStatus is what the scheduler leader writes under
// keys.Layout.SchedulerStatus, bound to its session lease: the key vanishes
// with the leadership.
type SchedulerStatus struct {
	LeaderID string    `json:"leader_id"`
	Since    time.Time `json:"since"`
	// InputRevision is the newest operator input revision the leader saw
	// (desired state, shifts).
	InputRevision int64 `json:"input_revision"`
	// Error is set when the last round failed before publishing anything
	// (e.g. the plan could not be computed).
	Error string `json:"error,omitempty"`
	// ProxyClusters holds the last publish result of each proxy cluster.
	ProxyClusters map[string]PublishResult `json:"proxy_clusters"`
	// Invalid are the operator inputs the leader ignores because they
	// broke a rule (e.g. a hand-written shift intent that fails decoding),
	// by etcd key, with the rule.
	Invalid   map[string]string `json:"invalid,omitempty"`
	UpdatedAt time.Time         `json:"updated_at"`
}

// Publish results (PublishResult.Result).
const (
	PublishPublished = "published" // a new version was published
	PublishUnchanged = "unchanged" // the live snapshot already had this content
	PublishFailed    = "failed"    // not published: Reason says why (the validator's words)
	PublishFenced    = "fenced"    // the leadership ended before the publish committed
	// PublishRetrying: not published yet for a reason that passes (etcd
	// unreachable or slow, a commit whose answer was lost, the pointer
	// moved concurrently); the leader tries again within a second. Reason
	// says what the last try met. Not BLOCKED: no new write is needed.
	PublishRetrying = "retrying"
	// PublishRolledBack: a staged rollout of these inputs was rolled back;
	// they are held until they change or an operator retries (Reason).
	PublishRolledBack = "rolled_back"
)

// PublishResult is the outcome of the leader's last publish for one proxy
// cluster.
type PublishResult struct {
	Result string `json:"result"`
	// Lineage and Version: the live snapshot after the attempt.
	Lineage string `json:"lineage,omitempty"`
	Version uint64 `json:"version,omitempty"`
	// InputRevision is the input revision the attempt was computed from.
	InputRevision int64     `json:"input_revision"`
	Reason        string    `json:"reason,omitempty"`
	At            time.Time `json:"at"`
}

// Blocked reports whether the newest input of the proxy cluster was not
// published, and why.
func (r PublishResult) Blocked() (bool, string) {
	switch r.Result {
	case PublishFailed:
		return true, r.Reason
	case PublishFenced:
		return true, "the scheduler's leadership ended before the publish committed"
	case PublishRolledBack:
		return true, r.Reason
	}
	return false, ""
}

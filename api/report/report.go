// Package report holds what running components write into etcd about
// themselves, all under leases so that a dead process disappears by itself:
// agent registrations with health and load, proxy status and proxy demand.
package report

import (
	"time"
)

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
	// AppliedVersion and AppliedHash identify the snapshot in service.
	AppliedVersion uint64    `json:"applied_version"`
	AppliedHash    string    `json:"applied_hash,omitempty"`
	AppliedAt      time.Time `json:"applied_at,omitzero"`
	// RejectedVersion is the newest version refused, with the reason.
	RejectedVersion uint64 `json:"rejected_version,omitempty"`
	RejectedReason  string `json:"rejected_reason,omitempty"`
	// LatestVersion is the newest version the proxy has seen published.
	LatestVersion uint64 `json:"latest_version,omitempty"`
	// WatchLagSeconds is how far behind etcd the proxy's watch is.
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
}

// ClusterDemand is the request rate one proxy sends to a cluster.
type ClusterDemand struct {
	RPS      float64 `json:"rps"`
	ErrorRPS float64 `json:"error_rps"`
	// BlackholeRPS is the rate of requests dropped by the blackhole share.
	BlackholeRPS float64 `json:"blackhole_rps,omitempty"`
}

// Leader is what the scheduler leader writes under keys.Layout.Leader.
type Leader struct {
	ID      string    `json:"id"`
	APIAddr string    `json:"api_addr"`
	Since   time.Time `json:"since,omitzero"`
}

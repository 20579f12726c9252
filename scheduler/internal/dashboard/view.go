package dashboard

import (
	"sort"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/snapshot"
)

// Inputs is what the scheduler knows when the dashboard asks: the desired
// state and merged members its inventory holds, and the rows its last
// computation produced. The dashboard never modifies it.
type Inputs struct {
	SchedulerID   string
	Leader        bool
	ComputedAt    time.Time
	StateRevision int64
	State         *config.State
	// Members per cluster → sub-cluster (static and agent-registered).
	Members  map[string]map[string][]config.Instance
	Shifts   map[string]config.Shift
	Progress map[string]config.ShiftProgress
	// Rows[proxyCluster][cluster] is the computed row with its explanation.
	Rows map[string]map[string]RowInput
	// Hashes[proxyCluster] is the computed content hash.
	Hashes map[string]string
}

// RowInput is one computed row.
type RowInput struct {
	Row         snapshot.Row
	Explanation *snapshot.Explanation
}

// Doc is the whole dashboard state the page renders: GET /ui/api/state and
// every "state" event of /ui/events carry one.
type Doc struct {
	// Seq increases with every new document of this scheduler.
	Seq           uint64    `json:"seq"`
	SchedulerID   string    `json:"scheduler_id"`
	Leader        bool      `json:"leader"`
	ComputedAt    time.Time `json:"computed_at"`
	StateRevision int64     `json:"state_revision"`
	// Actions is true when the scheduler has an API token: the page then
	// offers the operator's actions (each request must carry the token).
	Actions  bool          `json:"actions"`
	Clusters []ClusterView `json:"clusters"`
	Rollout  []RolloutView `json:"rollout"`
	Shifts   []ShiftView   `json:"shifts"`
	// Traffic: requests/s, 5xx/s and blackhole drops/s per (proxy
	// cluster, cluster) over the last 15 minutes, from the demand reports.
	Traffic []TrafficSeries `json:"traffic"`
	Ready   bool            `json:"ready"`
}

// ClusterView is one backend cluster's W matrix and health.
type ClusterView struct {
	Name        string           `json:"name"`
	SubClusters []SubClusterView `json:"subclusters"`
	Rows        []RowView        `json:"rows"`
}

// SubClusterView is one column of the matrix.
type SubClusterView struct {
	Name        string         `json:"name"`
	IDC         string         `json:"idc"`
	Drained     bool           `json:"drained"`
	DrainReason string         `json:"drain_reason,omitempty"`
	DrainAuthor string         `json:"drain_author,omitempty"`
	Excluded    bool           `json:"excluded,omitempty"`
	Available   int            `json:"available"`
	Total       int            `json:"total"`
	Instances   []InstanceView `json:"instances"`
}

// InstanceView is one member as the scheduler's inventory holds it.
type InstanceView struct {
	Addr        string `json:"addr"`
	Weight      int    `json:"weight"`
	CapacityRPS int    `json:"capacity_rps,omitempty"`
	State       string `json:"state"`
}

// RowView is one proxy cluster's row of a cluster's matrix. Weights are in
// points of Denominator and include config.Blackhole.
type RowView struct {
	ProxyCluster string         `json:"proxy_cluster"`
	Denominator  int            `json:"denominator"`
	Weights      map[string]int `json:"weights"`
	Pinned       bool           `json:"pinned"`
	PinReason    string         `json:"pin_reason,omitempty"`
	PinAuthor    string         `json:"pin_author,omitempty"`
	// Shifts active on this row, e.g. "shift-… 20/30 running".
	Shifts      []string              `json:"shifts,omitempty"`
	Explanation *snapshot.Explanation `json:"explanation,omitempty"`
}

// RolloutView is one proxy cluster's rollout.
type RolloutView struct {
	ProxyCluster string `json:"proxy_cluster"`
	LiveVersion  uint64 `json:"live_version"`
	LiveHash     string `json:"live_hash,omitempty"`
	// Unpublished is true when the computed content differs from the live one.
	Unpublished bool `json:"unpublished"`
	// Blocked says why the scheduler does not publish this proxy cluster
	// (empty: it is not blocked). Filled by blockedReason.
	Blocked string      `json:"blocked,omitempty"`
	Proxies []ProxyView `json:"proxies"`
}

// ProxyView is one proxy's status.
type ProxyView struct {
	ID string `json:"id"`
	// State is the rollout word (see proxyState).
	State           string    `json:"state"`
	Reason          string    `json:"reason,omitempty"`
	AppliedVersion  uint64    `json:"applied_version"`
	VersionsBehind  uint64    `json:"versions_behind"`
	WatchLagSeconds float64   `json:"watch_lag_seconds"`
	AppliedAt       time.Time `json:"applied_at,omitempty"`
	Source          string    `json:"source,omitempty"`
	UpdatedAt       time.Time `json:"updated_at"`
}

// ShiftView is one shift with its progress.
type ShiftView struct {
	config.Shift
	Progress *config.ShiftProgress `json:"progress,omitempty"`
}

// Rollout words, as lbctl rollout status prints them.
const (
	StateSynced   = "SYNCED"
	StatePending  = "PENDING"
	StateRejected = "REJECTED"
	StateStale    = "STALE"
)

// staleAfter: a status not refreshed for this long is STALE (as lbctl).
const staleAfter = 30 * time.Second

// proxyState is the one place a proxy's rollout word is decided.
func proxyState(st report.ProxyStatus, live uint64, now time.Time) (state, reason string) {
	switch {
	case !st.EtcdConnected:
		return StateStale, "not connected to etcd"
	case !st.UpdatedAt.IsZero() && now.Sub(st.UpdatedAt) > staleAfter:
		return StateStale, "status not refreshed"
	case live != 0 && st.AppliedVersion >= live:
		return StateSynced, ""
	case live != 0 && st.RejectedVersion >= live:
		return StateRejected, st.RejectedReason
	default:
		return StatePending, ""
	}
}

// blockedReason is the one place a proxy cluster's "blocked" reason is
// decided; main's scheduler records none yet.
func blockedReason(pc string) string { return "" }

// live is what current/<pc> points to.
type live map[string]snapshot.Pointer

// statuses are the proxy status reports, by key.
type statuses map[string]report.ProxyStatus

// build assembles the document (pure).
func build(in Inputs, ok bool, ptrs live, sts statuses, actions bool, now time.Time) *Doc {
	d := &Doc{Actions: actions, Clusters: []ClusterView{}, Rollout: []RolloutView{}, Shifts: []ShiftView{}, Ready: ok && in.State != nil}
	d.SchedulerID, d.Leader, d.ComputedAt, d.StateRevision = in.SchedulerID, in.Leader, in.ComputedAt, in.StateRevision
	d.Rollout = rollout(in, ptrs, sts, now)
	if !d.Ready {
		return d
	}
	st := in.State
	for _, id := range sortedKeys(in.Shifts) {
		sv := ShiftView{Shift: in.Shifts[id]}
		if p, ok := in.Progress[id]; ok {
			sv.Progress = &p
		}
		d.Shifts = append(d.Shifts, sv)
	}
	for _, cn := range sortedKeys(st.Clusters) {
		d.Clusters = append(d.Clusters, clusterView(in, cn, d.Shifts))
	}
	return d
}

func clusterView(in Inputs, cn string, shifts []ShiftView) ClusterView {
	st := in.State
	cfg := st.Clusters[cn]
	cv := ClusterView{Name: cn, SubClusters: []SubClusterView{}, Rows: []RowView{}}
	for _, sn := range sortedKeys(cfg.SubClusters) {
		sc := cfg.SubClusters[sn]
		sv := SubClusterView{Name: sn, IDC: sc.IDC, Excluded: sc.Excluded, Instances: []InstanceView{}}
		for _, dr := range st.Drains {
			if dr.Cluster == cn && dr.SubCluster == sn {
				sv.Drained, sv.DrainReason, sv.DrainAuthor = true, dr.Reason, dr.Author
			}
		}
		for _, m := range in.Members[cn][sn] {
			iv := InstanceView{Addr: hostPort(m), Weight: m.Weight, CapacityRPS: m.CapacityRPS, State: m.State}
			if iv.State == "" {
				iv.State = config.StateHealthy
			}
			sv.Total++
			if m.Weight > 0 && iv.State == config.StateHealthy {
				sv.Available++
			}
			sv.Instances = append(sv.Instances, iv)
		}
		cv.SubClusters = append(cv.SubClusters, sv)
	}
	for _, pc := range sortedKeys(in.Rows) {
		r, ok := in.Rows[pc][cn]
		if !ok {
			continue
		}
		rv := RowView{ProxyCluster: pc, Denominator: r.Row.Denominator, Weights: map[string]int{}, Pinned: r.Row.Pinned, Explanation: r.Explanation}
		for k, w := range r.Row.Weights {
			rv.Weights[k] = w
		}
		if _, ok := rv.Weights[config.Blackhole]; !ok {
			rv.Weights[config.Blackhole] = 0
		}
		for _, p := range st.Pins {
			if p.Cluster == cn && p.ProxyCluster == pc {
				rv.PinReason, rv.PinAuthor = p.Reason, p.Author
			}
		}
		for _, s := range shifts {
			if s.ProxyCluster != pc || s.Cluster != cn || s.State == config.ShiftAborted || s.State == config.ShiftDone {
				continue
			}
			line := s.ID + " " + s.From + "→" + s.To + " " + s.State
			if s.Progress != nil {
				line = s.ID + " " + s.From + "→" + s.To + " " + itoa(s.Progress.AppliedPercent) + "/" + itoa(s.Progress.TargetPercent) + " " + s.Progress.State
			}
			rv.Shifts = append(rv.Shifts, line)
		}
		cv.Rows = append(cv.Rows, rv)
	}
	return cv
}

func rollout(in Inputs, ptrs live, sts statuses, now time.Time) []RolloutView {
	byPC := map[string][]report.ProxyStatus{}
	for _, s := range sts {
		byPC[s.ProxyCluster] = append(byPC[s.ProxyCluster], s)
	}
	pcs := map[string]bool{}
	for pc := range ptrs {
		pcs[pc] = true
	}
	for pc := range byPC {
		pcs[pc] = true
	}
	if in.State != nil {
		for pc := range in.State.Topology.ProxyClusters {
			pcs[pc] = true
		}
	}
	out := []RolloutView{}
	for _, pc := range sortedKeys(pcs) {
		p := ptrs[pc]
		rv := RolloutView{ProxyCluster: pc, LiveVersion: p.Version, LiveHash: p.Hash, Blocked: blockedReason(pc), Proxies: []ProxyView{}}
		if h, ok := in.Hashes[pc]; ok && h != p.Hash {
			rv.Unpublished = true
		}
		list := byPC[pc]
		sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
		for _, s := range list {
			state, reason := proxyState(s, p.Version, now)
			pv := ProxyView{ID: s.ID, State: state, Reason: reason, AppliedVersion: s.AppliedVersion, WatchLagSeconds: s.WatchLagSeconds,
				AppliedAt: s.AppliedAt, Source: s.Source, UpdatedAt: s.UpdatedAt}
			if p.Version > s.AppliedVersion {
				pv.VersionsBehind = p.Version - s.AppliedVersion
			}
			rv.Proxies = append(rv.Proxies, pv)
		}
		out = append(out, rv)
	}
	return out
}

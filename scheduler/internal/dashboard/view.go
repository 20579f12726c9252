package dashboard

import (
	"slices"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/rollout"
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
	// NoLeader: no scheduler holds leadership (nothing new is published).
	NoLeader bool `json:"no_leader"`
	Ready    bool `json:"ready"`
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
	// Proxies is how the live proxies see it (absent: no proxy reports it).
	Proxies *ProxiesView `json:"proxies,omitempty"`
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

// RolloutView is one proxy cluster's rollout, as api/rollout decides it
// (the same verdict lbctl rollout status prints).
type RolloutView struct {
	ProxyCluster string `json:"proxy_cluster"`
	LiveLineage  string `json:"live_lineage,omitempty"`
	LiveVersion  uint64 `json:"live_version"`
	LiveHash     string `json:"live_hash,omitempty"`
	// Unpublished is true when the computed content differs from the live one.
	Unpublished bool `json:"unpublished"`
	// Blocked says why the scheduler could not publish this proxy
	// cluster's newest input (empty: it is not blocked).
	Blocked string `json:"blocked,omitempty"`
	// Waiting says why the scheduler has not published the newest input
	// revision it saw for this proxy cluster yet (empty: it has).
	Waiting string `json:"waiting,omitempty"`
	// Converged: every proxy that counts runs the live snapshot, and the
	// proxy cluster is neither blocked nor waiting.
	Converged bool `json:"converged"`
	// LiveRevision is the input revision (desired state, shifts) the
	// scheduler last published — or found unchanged — for this proxy
	// cluster, once every proxy that counts runs that publish's version or
	// a later one: every write at or below it is live here. 0 while not
	// Converged, or when the live pointer the dashboard sees is older than
	// that publish (the page says "live" for a write of revision N only at
	// LiveRevision ≥ N).
	LiveRevision int64       `json:"live_revision,omitempty"`
	Proxies      []ProxyView `json:"proxies"`
	// Staged is the proxy cluster's staged rollout record (api/rollout, as
	// lbctl rollout status shows it): stage, selected proxies, gates with
	// their figures, state and reason. Nil: none was ever recorded.
	Staged *rollout.Staged `json:"staged,omitempty"`
}

// ProxyView is one proxy's status: live ones, then GONE ones from their
// last-seen records.
type ProxyView struct {
	ID string `json:"id"`
	// State is the rollout word (api/rollout): SYNCED, PENDING, REJECTED,
	// AHEAD, STALE or GONE.
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// LastSeen is set for STALE and GONE proxies.
	LastSeen time.Time `json:"last_seen,omitzero"`
	// NotCounted: a GONE proxy that went away before the live version was
	// published does not hold the rollout back.
	NotCounted      bool      `json:"not_counted,omitempty"`
	AppliedLineage  string    `json:"applied_lineage,omitempty"`
	AppliedVersion  uint64    `json:"applied_version"`
	VersionsBehind  uint64    `json:"versions_behind"`
	WatchLagSeconds float64   `json:"watch_lag_seconds"`
	AppliedAt       time.Time `json:"applied_at,omitzero"`
	Source          string    `json:"source,omitempty"`
	// (No report time: a proxy rewrites its status every report interval,
	// and a rewrite that changes nothing the page shows must not send every
	// tab a new document. LastSeen carries it once it matters.)
	// LineageChanges and PreviousLineage: the lineages it followed.
	LineageChanges  uint64 `json:"lineage_changes,omitempty"`
	PreviousLineage string `json:"previous_lineage,omitempty"`
}

// ShiftView is one shift with its progress.
type ShiftView struct {
	config.Shift
	Progress *config.ShiftProgress `json:"progress,omitempty"`
}

// Rollout words (api/rollout), as lbctl rollout status prints them.
const (
	StateSynced   = rollout.Synced
	StatePending  = rollout.Pending
	StateRejected = rollout.Rejected
	StateStale    = rollout.Stale
	StateGone     = rollout.Gone
	StateAhead    = rollout.Ahead
)

// live is what current/<pc> points to.
type live map[string]snapshot.Pointer

// statuses are the proxy status reports (or last-seen records), by key.
type statuses map[string]report.ProxyStatus

// records is what the rollout verdict is computed from, besides the
// pointers: the live statuses, the last-seen records, the scheduler
// leader's status (nil: no leader) and when each live version was
// published (for GONE proxies; see rollout.Input.Started).
type records struct {
	sts     statuses
	seen    statuses
	sched   *report.SchedulerStatus
	started map[string]time.Time
	staged  map[string]rollout.Staged
	// proxies: the proxies' view of each instance (proxiesViews).
	proxies map[instKey]*ProxiesView
}

// liveRevision is rv.LiveRevision: the input revision of the scheduler's
// last good publish for the proxy cluster, when every proxy that counts
// runs the live pointer p (rv.Converged) and p is that publish's version
// or later (the pointer watch may lag the scheduler's status).
func liveRevision(rv RolloutView, p snapshot.Pointer, sched *report.SchedulerStatus) int64 {
	if !rv.Converged || sched == nil {
		return 0
	}
	res, ok := sched.ProxyClusters[rv.ProxyCluster]
	if !ok || (res.Result != report.PublishPublished && res.Result != report.PublishUnchanged) ||
		res.Lineage != p.Lineage || res.Version > p.Version {
		return 0
	}
	return res.InputRevision
}

// build assembles the document (pure).
func build(in Inputs, ok bool, ptrs live, rec records, actions bool, now time.Time) *Doc {
	d := &Doc{Actions: actions, Clusters: []ClusterView{}, Rollout: []RolloutView{}, Shifts: []ShiftView{}, Ready: ok && in.State != nil}
	d.SchedulerID, d.Leader, d.ComputedAt, d.StateRevision = in.SchedulerID, in.Leader, in.ComputedAt, in.StateRevision
	d.Rollout = rolloutViews(in, ptrs, rec, now)
	d.NoLeader = rec.sched == nil
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
		d.Clusters = append(d.Clusters, clusterView(in, cn, d.Shifts, rec.proxies))
	}
	return d
}

func clusterView(in Inputs, cn string, shifts []ShiftView, proxies map[instKey]*ProxiesView) ClusterView {
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
			iv.Proxies = proxies[instKey{cn, sn, iv.Addr}]
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

func rolloutViews(in Inputs, ptrs live, rec records, now time.Time) []RolloutView {
	byPC := map[string][]report.ProxyStatus{}
	for _, s := range rec.sts {
		byPC[s.ProxyCluster] = append(byPC[s.ProxyCluster], s)
	}
	seenByPC := map[string][]report.ProxyStatus{}
	pcs := map[string]bool{}
	for _, s := range rec.seen {
		seenByPC[s.ProxyCluster] = append(seenByPC[s.ProxyCluster], s)
		pcs[s.ProxyCluster] = true
	}
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
		targets := map[string]rollout.Target{pc: {Pointer: p}}
		rv := RolloutView{ProxyCluster: pc, LiveLineage: p.Lineage, LiveVersion: p.Version, LiveHash: p.Hash, Proxies: []ProxyView{}}
		if s, ok := rec.staged[pc]; ok {
			rv.Staged = &s
		}
		if h, ok := in.Hashes[pc]; ok && h != p.Hash {
			rv.Unpublished = true
		}
		var waiting map[string]string
		if rec.sched != nil && p.Version != 0 {
			// The newest input the leader saw, not yet published for pc.
			waiting, _ = rollout.ForRevision(rec.sched.InputRevision, rec.sched, map[string]rollout.Target{pc: {}})
		}
		res := rollout.Compute(rollout.Input{Statuses: byPC[pc], LastSeen: seenByPC[pc], Targets: targets, Started: rec.started,
			Scheduler: rec.sched, ProxyCluster: pc, Now: now})
		rv.Blocked, rv.Waiting = res.Blocked[pc], waiting[pc]
		if rv.Waiting == "" && rv.Staged != nil {
			rv.Waiting = rollout.StagedWaiting(*rv.Staged)
		}
		if rv.Blocked != "" {
			rv.Waiting = "" // the BLOCKED line says why
		}
		rv.Converged = res.Converged && rv.Waiting == ""
		rv.LiveRevision = liveRevision(rv, p, rec.sched)
		full := map[string]report.ProxyStatus{}
		for _, s := range append(slices.Clone(seenByPC[pc]), byPC[pc]...) {
			full[s.ID] = s
		}
		for _, r := range res.Proxies {
			s := full[r.ID]
			pv := ProxyView{ID: r.ID, State: r.State, Reason: r.Reason, LastSeen: r.Since, NotCounted: r.NotCounted,
				AppliedLineage: r.Lineage, AppliedVersion: r.Applied, WatchLagSeconds: s.WatchLagAt(now),
				AppliedAt: s.AppliedAt, Source: s.Source, LineageChanges: s.LineageChanges, PreviousLineage: s.PreviousLineage}
			if r.State == rollout.Gone {
				pv.WatchLagSeconds = 0
			}
			if p.Version > r.Applied && r.Lineage == p.Lineage {
				pv.VersionsBehind = p.Version - r.Applied
			}
			rv.Proxies = append(rv.Proxies, pv)
		}
		out = append(out, rv)
	}
	return out
}

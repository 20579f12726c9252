package plan

import (
	"slices"
	"sync"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
)

// View is everything the planner reads: one consistent picture of the
// inputs. Compute never modifies it.
type View struct {
	// State is the desired state: topology, clusters (with static
	// instances), pins, drains and scheduler settings.
	State *config.State
	// Members[cluster][subCluster] are the instances to publish (static and
	// agent-registered), each with State "healthy", "unhealthy" or
	// "draining" ("" is healthy). A cluster missing here (or a nil map) uses
	// State's static instances.
	Members map[string]map[string][]config.Instance
	// Demand[proxyCluster][cluster] in requests/s as observed by the
	// proxies. Missing or ≤ 0: State.Scheduler.DefaultDemandRPS; if that is
	// 0 too, the row uses the capacity-proportional fallback.
	Demand map[string]map[string]float64
	// Shifts active now, with the points applied so far.
	Shifts []ActiveShift
	// Now paces max_step_percent per step_interval: a computed row that
	// moved less than step_interval before Now is held (but in the safe
	// direction). Zero: no pacing (a pure, one-off plan).
	Now time.Time
	// Generations[cluster], when not 0, identifies the state of the
	// cluster's own inputs: its entry in State.Clusters, its Members, every
	// proxy cluster's Demand for it, its pins and its drains. A producer
	// (inventory.Inventory) changes it whenever any of these changes, and
	// the Planner then skips reading and comparing them for a cluster whose
	// generation it already computed. Missing or 0: the planner compares a
	// digest of the inputs instead. Topology, scheduler settings, shifts
	// and previous rows are always checked by the planner. The generations
	// given to one Planner must all come from one producer.
	Generations map[string]uint64
}

// ActiveShift is a shift intent and how far its ramp has got.
type ActiveShift struct {
	Shift config.Shift
	// AppliedPercent is the points (percent of the row) moved so far; the
	// plan moves exactly this much, capped by what the From IDC has.
	AppliedPercent int
}

// Result is one plan: a snapshot per proxy cluster and the per-cluster
// optimisation details.
type Result struct {
	// Snapshots per proxy cluster. Meta has only ProxyCluster and Hash set.
	// Snapshots share unchanged sub-cluster maps and policies with earlier
	// results: treat them as immutable.
	Snapshots map[string]*snapshot.Snapshot
	// Clusters holds the optimisation of each backend cluster.
	Clusters map[string]ClusterPlan
	// Recomputed lists (sorted) the clusters recomputed by this call; the
	// others were unchanged inputs served from the cache.
	Recomputed []string
}

// ClusterPlan is the optimisation of one backend cluster.
type ClusterPlan struct {
	// ProxyClusters and SubClusters label Flow's rows and columns (sorted).
	ProxyClusters []string `json:"proxy_clusters"`
	SubClusters   []string `json:"subclusters"`
	// Mode per proxy cluster: "optimal", "capacity-proportional", "pinned"
	// or "unavailable".
	Mode map[string]string `json:"mode"`
	// DemandRPS per proxy cluster as used by the solver (the pseudo-demand
	// for capacity-proportional rows, the real demand otherwise).
	DemandRPS []float64 `json:"demand_rps"`
	// CapacityRPS per sub-cluster after target utilisation.
	CapacityRPS []float64 `json:"capacity_rps"`
	// Flow[b][s] and Drop[b] in requests/s: the optimum before rounding and
	// guardrails (pinned rows: the pinned share of the demand).
	Flow [][]float64 `json:"flow_rps"`
	Drop []float64   `json:"drop_rps"`
	// Objective is the solver's optimum (rows it solved only).
	Objective float64 `json:"objective"`
	// Utilisation is the projected load over capacity per sub-cluster with
	// the published rows and the known demand (1 = at target utilisation).
	Utilisation map[string]float64 `json:"utilisation"`
	// Recomputed is true when this call computed the cluster.
	Recomputed bool `json:"recomputed"`
	// Shifts is what each active shift of the cluster's rows moved, by
	// shift id (absent: the row was not planned, e.g. unavailable).
	Shifts map[string]ShiftResult `json:"shifts,omitempty"`
}

// Plan is a computed plan whose snapshots are assembled on first use. It is
// immutable and safe for concurrent use.
type Plan struct {
	// Clusters holds the optimisation of each backend cluster.
	Clusters map[string]ClusterPlan
	// Recomputed lists (sorted) the clusters recomputed by this call.
	Recomputed []string
	// Hashes[proxyCluster] is the content hash of its snapshot.
	Hashes map[string]string
	// NextPace is when the earliest paced row may move again (zero: none):
	// the scheduler plans again then.
	NextPace time.Time

	st      *config.State
	proxies []string
	names   []string
	entries []*cacheEntry
	index   map[string]int
	// heads[b] is proxy b's snapshot without clusters (Meta.Hash set), or
	// nil when snaps[b] was assembled by Compute (hysteresis).
	heads []*snapshot.Snapshot

	mu    sync.Mutex
	snaps []*snapshot.Snapshot
}

// ProxyClusters returns the proxy clusters of the plan, sorted.
func (pl *Plan) ProxyClusters() []string { return slices.Clone(pl.proxies) }

// Snapshot returns proxy cluster pc's snapshot (Meta.ProxyCluster and
// Meta.Hash set), assembling it on the first call; nil for an unknown pc.
// Treat it as immutable: it shares maps with the planner's cache.
func (pl *Plan) Snapshot(pc string) *snapshot.Snapshot {
	b, ok := pl.index[pc]
	if !ok {
		return nil
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.snaps[b] == nil {
		s := *pl.heads[b]
		s.Clusters = pl.clusters(b)
		pl.snaps[b] = &s
	}
	return pl.snaps[b]
}

// Row returns proxy cluster pc's entry for cluster c without assembling
// the snapshot.
func (pl *Plan) Row(pc, c string) (snapshot.Cluster, bool) {
	b, ok := pl.index[pc]
	if !ok {
		return snapshot.Cluster{}, false
	}
	pl.mu.Lock()
	s := pl.snaps[b]
	pl.mu.Unlock()
	if s != nil {
		sc, ok := s.Clusters[c]
		return sc, ok
	}
	i, ok := slices.BinarySearch(pl.names, c)
	if !ok {
		return snapshot.Cluster{}, false
	}
	return pl.entries[i].out.rows[b], true
}

// Result assembles every snapshot.
func (pl *Plan) Result() Result {
	res := Result{Snapshots: make(map[string]*snapshot.Snapshot, len(pl.proxies)), Clusters: pl.Clusters, Recomputed: pl.Recomputed}
	for _, pc := range pl.proxies {
		res.Snapshots[pc] = pl.Snapshot(pc)
	}
	return res
}

// built returns proxy b's snapshot if it was assembled.
func (pl *Plan) built(b int) *snapshot.Snapshot {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.snaps[b]
}

// header is proxy b's snapshot without clusters.
func (pl *Plan) header(b int) *snapshot.Snapshot {
	pc := pl.proxies[b]
	pcfg := pl.st.Topology.ProxyClusters[pc]
	return &snapshot.Snapshot{
		Meta:           snapshot.Meta{ProxyCluster: pc},
		Settings:       snapshot.Settings{IDC: pcfg.IDC, TrustedProxies: pcfg.TrustedProxies},
		Products:       pl.st.Products,
		DefaultProduct: pl.st.DefaultProduct,
	}
}

// clusters assembles proxy b's cluster map from the cache entries.
func (pl *Plan) clusters(b int) map[string]snapshot.Cluster {
	m := make(map[string]snapshot.Cluster, len(pl.names))
	for i, name := range pl.names {
		m[name] = pl.entries[i].out.rows[b]
	}
	return m
}

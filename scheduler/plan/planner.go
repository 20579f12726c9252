// Package plan computes the W matrix: for every backend cluster, the weight
// row each proxy cluster uses over its sub-clusters and GSLB_BLACKHOLE, as
// described in docs/scheduler.md.
//
// The package is pure: no I/O, no goroutines, no clock. Solve is the exact
// optimisation of one cluster; Planner.Compute turns a View into one
// snapshot per proxy cluster, recomputing only the clusters whose inputs
// changed since the previous call.
package plan

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
)

// ErrNoState is returned when the View has no desired state.
var ErrNoState = errors.New("plan: view has no desired state")

// Planner computes plans and remembers each cluster's last result, so that
// a call recomputes only the clusters whose inputs changed, and re-hashes
// and re-assembles only what they touch. It is safe for concurrent use
// (calls are serialised).
//
// A cluster is served from the cache when its own inputs are unchanged
// (View.Generations says so, or, without generations, a digest of them
// matches), its active shifts are the same, the topology and scheduler
// settings are the same, and its previous row in prev is the same content
// as the one it was computed from. Prev is checked cheaply when the caller
// hands back either the very prev of the last call or the very snapshots
// the last call returned (pointer identity; both are immutable); any other
// prev is compared row by row.
type Planner struct {
	mu    sync.Mutex
	cache map[string]*cacheEntry
	// global is the digest of the inputs every cluster depends on, and
	// proxies the proxy clusters (sorted): the cache's per-proxy slices are
	// indexed by it. Either changing empties the cache.
	global  [sha256.Size]byte
	proxies []string
	// names (sorted clusters) and last (per proxy index) describe the last
	// successful call; last is nil after a failed call.
	names []string
	last  []lastSnapshot
	// paces[cluster+"\x00"+proxyCluster] paces max_step_percent in time.
	paces map[string]*pace
	// skipHash leaves Meta.Hash empty; only benchmarks set it, to measure
	// the plan apart from the content hashes.
	skipHash bool
}

// lastSnapshot is what one proxy cluster got from the last call.
type lastSnapshot struct {
	plan *Plan              // returned (its snapshot b, if assembled)
	prev *snapshot.Snapshot // given as prev
	kept bool               // hysteresis put prev's rows into the snapshot
}

type cacheEntry struct {
	// key is the digest of the cluster's own inputs (without generations),
	// gen the generation it was computed at (0: computed without).
	key    [sha256.Size]byte
	gen    uint64
	shifts string
	paced  string
	out    clusterOutput
	// prev[b] is the previous row it was computed from, per proxy index.
	prev []prevRow
	// hyst[b] is maxRowChange(prev[b], out row), or -1 when the row rules
	// hysteresis out (no previous row, denominator or pin changed, pinned
	// row changed).
	hyst []int
	// fixed[b]: the out row, handed back as prev, equals prev[b].
	fixed []bool
}

// prevRow is a previous row as computeCluster reads it.
type prevRow struct {
	row *snapshot.Row // nil: none
	opt map[string]float64
}

// Previous-snapshot status of one proxy cluster, relative to the last call.
const (
	prevSame  = iota // the very prev of the last call
	prevMine         // the very snapshot the last call returned
	prevOther        // anything else: compared row by row
)

// NewPlanner returns a Planner with an empty cache.
func NewPlanner() *Planner { return &Planner{cache: map[string]*cacheEntry{}} }

// Compute returns one snapshot per proxy cluster of v.State.Topology
// (Meta.ProxyCluster and Meta.Hash set, nothing else of Meta). prev holds
// the last published snapshot per proxy cluster (nil or missing entries are
// fine); its rows feed the stability term, the max-step guardrail and
// hysteresis: when every row of a proxy cluster would change by less than
// hysteresis_percent points, that snapshot keeps prev's rows, so its content
// hash only changes if membership or policy did.
func (p *Planner) Compute(v View, prev map[string]*snapshot.Snapshot) (Result, error) {
	pl, err := p.ComputePlan(v, prev)
	if err != nil {
		return Result{}, err
	}
	return pl.Result(), nil
}

// ComputePlan is Compute without assembling the snapshots: the Plan has
// every content hash, row and explanation, and assembles a proxy cluster's
// snapshot when asked (Plan.Snapshot). Assembling one costs a map of every
// cluster (≈ 0.1 ms for 200 clusters), so a publisher that skips unchanged
// hashes assembles only what it publishes.
func (p *Planner) ComputePlan(v View, prev map[string]*snapshot.Snapshot) (*Plan, error) {
	if v.State == nil {
		return nil, ErrNoState
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st := v.State
	set := normalise(st.Scheduler)
	proxies := sortedKeys(st.Topology.ProxyClusters)
	nb := len(proxies)
	if global := globalDigest(st, proxies, set); global != p.global || !slices.Equal(proxies, p.proxies) {
		p.global, p.proxies = global, proxies
		clear(p.cache)
		p.last = nil
	}

	drains := map[string]map[string]bool{}
	dropOK := map[string]bool{} // a drain of the cluster allows a full drop
	for _, d := range st.Drains {
		if drains[d.Cluster] == nil {
			drains[d.Cluster] = map[string]bool{}
		}
		drains[d.Cluster][d.SubCluster] = true
		dropOK[d.Cluster] = dropOK[d.Cluster] || d.AllowFullDrop
	}
	pins := map[string]map[string]*config.Pin{}
	for i := range st.Pins {
		pn := &st.Pins[i]
		if pins[pn.Cluster] == nil {
			pins[pn.Cluster] = map[string]*config.Pin{}
		}
		pins[pn.Cluster][pn.ProxyCluster] = pn
	}
	shifts := map[string]map[string][]ActiveShift{}
	for _, s := range v.Shifts {
		c := s.Shift.Cluster
		if shifts[c] == nil {
			shifts[c] = map[string][]ActiveShift{}
		}
		shifts[c][s.Shift.ProxyCluster] = append(shifts[c][s.Shift.ProxyCluster], s)
	}

	status := make([]uint8, nb)
	for b, pc := range proxies {
		switch {
		case p.last == nil:
			status[b] = prevOther
		case prev[pc] == p.last[b].prev:
			status[b] = prevSame
		case prev[pc] != nil && !p.last[b].kept && prev[pc] == p.last[b].plan.built(b):
			status[b] = prevMine
		default:
			status[b] = prevOther
		}
	}

	names := sortedKeys(st.Clusters)
	entries := make([]*cacheEntry, len(names))
	pl := &Plan{Clusters: make(map[string]ClusterPlan, len(st.Clusters)), st: st, proxies: proxies, names: names, entries: entries}
	for i, name := range names {
		paced, pacedKey, due := p.paced(v.Now, name, proxies, prev, set)
		if !due.IsZero() && (pl.NextPace.IsZero() || due.Before(pl.NextPace)) {
			pl.NextPace = due
		}
		newInput := func() clusterInput {
			return clusterInput{
				name: name, cfg: st.Clusters[name], members: v.Members[name], drained: drains[name], dropOK: dropOK[name], proxies: proxies,
				topo: &st.Topology, set: set, pins: pins[name], shifts: shifts[name], paced: paced,
			}
		}
		e := p.cache[name]
		gen := v.Generations[name]
		shiftKey := shiftsKey(proxies, shifts[name])
		var in clusterInput
		var key [sha256.Size]byte
		hit := e != nil && e.shifts == shiftKey && e.paced == pacedKey
		if gen == 0 {
			in = newInput()
			readDemand(&in, v.Demand, set)
			key = inputDigest(in)
			hit = hit && e.gen == 0 && e.key == key
		} else {
			hit = hit && e.gen == gen
		}
		for b := 0; hit && b < nb; b++ {
			switch status[b] {
			case prevMine:
				hit = e.fixed[b]
			case prevOther:
				hit = samePrev(prevRowOf(prev[proxies[b]], name, set.den), e.prev[b])
			}
		}
		if !hit {
			if gen != 0 {
				in = newInput()
				readDemand(&in, v.Demand, set)
			}
			ne, err := computeEntry(in, prev)
			if err != nil {
				p.last = nil
				return nil, err
			}
			ne.key, ne.gen, ne.shifts, ne.paced = key, gen, shiftKey, pacedKey
			e = ne
			p.cache[name] = e
			pl.Recomputed = append(pl.Recomputed, name)
		}
		entries[i] = e
		cp := e.out.plan
		cp.Recomputed = !hit
		pl.Clusters[name] = cp
	}
	if len(p.cache) != len(names) {
		for name := range p.cache {
			if _, ok := st.Clusters[name]; !ok {
				delete(p.cache, name)
			}
		}
		live := make(map[string]bool, len(names))
		for _, n := range names {
			live[n] = true
		}
		p.forgetPaces(live)
	}

	hystPoints := set.points(set.hysteresis)
	var routes [sha256.Size]byte
	if !p.skipHash {
		routes = snapshot.RoutesHash(st.Products, st.DefaultProduct)
	}
	sums := make([][sha256.Size]byte, len(names))
	last := make([]lastSnapshot, nb)
	pl.index = make(map[string]int, nb)
	pl.snaps = make([]*snapshot.Snapshot, nb)
	pl.heads = make([]*snapshot.Snapshot, nb)
	pl.Hashes = make(map[string]string, nb)
	for b, pc := range proxies {
		pl.index[pc] = b
		s := pl.header(b)
		kept := false
		if hysteresisMayApply(prev[pc], entries, b, hystPoints) {
			// Rare: assemble now, the rows may become prev's.
			s.Clusters = pl.clusters(b)
			kept = applyHysteresis(s, prev[pc], hystPoints, set.hysteresis)
			pl.snaps[b] = s
		}
		if !p.skipHash {
			for i, e := range entries {
				if kept && e.hyst[b] > 0 {
					c := s.Clusters[names[i]] // prev's row swapped in
					sums[i] = snapshot.ClusterHash(&c)
				} else {
					sums[i] = e.out.sums[b]
				}
			}
			s.Meta.Hash = snapshot.ContentHashFrom(s, routes, names, sums)
		}
		pl.Hashes[pc] = s.Meta.Hash
		if pl.snaps[b] == nil {
			pl.heads[b] = s
		}
		last[b] = lastSnapshot{plan: pl, prev: prev[pc], kept: kept}
	}
	p.names, p.last = names, last
	return pl, nil
}

// readDemand fills in.demand and in.known from the observed demand.
func readDemand(in *clusterInput, demand map[string]map[string]float64, set settings) {
	in.demand = make([]float64, len(in.proxies))
	in.known = make([]bool, len(in.proxies))
	for b, pc := range in.proxies {
		d, ok := demand[pc][in.name]
		if !ok || d <= 0 || math.IsNaN(d) || math.IsInf(d, 0) {
			d = set.defaultDemand
		}
		if d > 0 {
			in.demand[b], in.known[b] = d, true
		}
	}
}

// prevRowOf is the previous row of cluster name in s as computeCluster
// reads it (the optimum only from optimal and fallback rows on the current
// denominator).
func prevRowOf(s *snapshot.Snapshot, name string, den int) prevRow {
	if s == nil {
		return prevRow{}
	}
	c, ok := s.Clusters[name]
	if !ok {
		return prevRow{}
	}
	r := c.Row
	out := prevRow{row: &r}
	if e := c.Explanation; e != nil && (e.Mode == ModeOptimal || e.Mode == ModeFallback) && r.Denominator == den {
		out.opt = e.Optimum
	}
	return out
}

// samePrev reports whether two previous rows have the same content.
func samePrev(a, b prevRow) bool {
	if (a.row == nil) != (b.row == nil) {
		return false
	}
	if a.row != nil && !sameRow(*a.row, *b.row) {
		return false
	}
	if (a.opt == nil) != (b.opt == nil) || len(a.opt) != len(b.opt) {
		return false
	}
	for k, x := range a.opt {
		if y, ok := b.opt[k]; !ok || x != y {
			return false
		}
	}
	return true
}

// sameRow reports whether two rows are the same value.
func sameRow(a, b snapshot.Row) bool {
	if a.Denominator != b.Denominator || a.Pinned != b.Pinned || a.AllowFullDrop != b.AllowFullDrop || len(a.Weights) != len(b.Weights) {
		return false
	}
	for k, v := range a.Weights {
		if w, ok := b.Weights[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// computeEntry computes one cluster from in (demand read) and the previous
// rows in prev, and records what the cache needs to reuse it.
func computeEntry(in clusterInput, prev map[string]*snapshot.Snapshot) (*cacheEntry, error) {
	nb := len(in.proxies)
	e := &cacheEntry{prev: make([]prevRow, nb), hyst: make([]int, nb), fixed: make([]bool, nb)}
	in.prevRows = make(map[string]*snapshot.Row, nb)
	in.prevOpt = make(map[string]map[string]float64, nb)
	for b, pc := range in.proxies {
		pr := prevRowOf(prev[pc], in.name, in.set.den)
		e.prev[b] = pr
		if pr.row != nil {
			in.prevRows[pc] = pr.row
			if pr.opt != nil {
				in.prevOpt[pc] = pr.opt
			}
		}
	}
	out, err := computeCluster(in)
	if err != nil {
		return nil, err
	}
	e.out = out
	for b := range in.proxies {
		c := out.rows[b].Row
		pr := e.prev[b].row
		switch {
		case pr == nil || pr.Denominator != c.Denominator || pr.Pinned != c.Pinned:
			e.hyst[b] = -1
		default:
			d := maxRowChange(pr.Weights, c.Weights)
			if c.Pinned && d > 0 {
				d = -1
			}
			e.hyst[b] = d
		}
		e.fixed[b] = pr != nil && samePrev(e.prev[b], prevRowOf(&snapshot.Snapshot{Clusters: map[string]snapshot.Cluster{in.name: out.rows[b]}}, in.name, in.set.den))
	}
	return e, nil
}

// hysteresisMayApply is applyHysteresis's test from the cached row changes:
// every row has a previous row it may stay at, all moved less than
// threshold points, and at least one moved.
func hysteresisMayApply(prev *snapshot.Snapshot, entries []*cacheEntry, b, threshold int) bool {
	if prev == nil || threshold <= 1 || len(prev.Clusters) != len(entries) {
		return false
	}
	moved := false
	for _, e := range entries {
		d := e.hyst[b]
		if d < 0 || d >= threshold {
			return false
		}
		moved = moved || d > 0
	}
	return moved
}

// shiftsKey encodes a cluster's active shifts (empty when none).
func shiftsKey(proxies []string, shifts map[string][]ActiveShift) string {
	if len(shifts) == 0 {
		return ""
	}
	var w digestWriter
	for _, pc := range proxies {
		for _, s := range shifts[pc] {
			w.str(pc)
			w.str(s.Shift.ID)
			w.str(s.Shift.From)
			w.str(s.Shift.To)
			w.int(s.AppliedPercent)
		}
	}
	return string(w.buf)
}

// applyHysteresis keeps prev's rows when every row that is not pinned
// changed by less than threshold points and the set of clusters is the same.
// It reports whether it replaced any row. A threshold of 1 point or less
// changes nothing (a change below 1 point is no change).
func applyHysteresis(s, prev *snapshot.Snapshot, threshold, percent int) bool {
	if prev == nil || threshold <= 1 || len(prev.Clusters) != len(s.Clusters) {
		return false
	}
	changed := false
	for name, c := range s.Clusters {
		pc, ok := prev.Clusters[name]
		if !ok || pc.Row.Denominator != c.Row.Denominator || pc.Row.Pinned != c.Row.Pinned || c.Row.Pinned && maxRowChange(pc.Row.Weights, c.Row.Weights) > 0 {
			return false
		}
		d := maxRowChange(pc.Row.Weights, c.Row.Weights)
		if d >= threshold {
			return false
		}
		changed = changed || d > 0
	}
	if !changed {
		return false
	}
	for name, c := range s.Clusters {
		pr := prev.Clusters[name].Row
		if maxRowChange(pr.Weights, c.Row.Weights) == 0 {
			continue
		}
		e := *c.Explanation
		e.Guardrails = append(append([]string(nil), e.Guardrails...), fmt.Sprintf(
			"%s: every row of this proxy cluster moved less than %d points (hysteresis_percent=%d): previous row %s kept instead of %s",
			GuardHysteresis, threshold, percent, formatRow(sortedKeys(pr.Weights), pr.Weights), formatRow(sortedKeys(c.Row.Weights), c.Row.Weights)))
		c.Row = pr
		c.Explanation = &e
		s.Clusters[name] = c
	}
	return true
}

// globalDigest covers the inputs every cluster depends on.
func globalDigest(st *config.State, proxies []string, set settings) [sha256.Size]byte {
	h := sha256.New()
	fmt.Fprintf(h, "%+v|", set)
	for _, pc := range proxies {
		fmt.Fprintf(h, "%s@%s|", pc, st.Topology.ProxyClusters[pc].IDC)
	}
	idcs := map[string]bool{}
	for _, i := range st.Topology.IDCs {
		idcs[i] = true
	}
	for a, m := range st.Topology.LocalityCost {
		idcs[a] = true
		for b := range m {
			idcs[b] = true
		}
	}
	all := sortedKeys(idcs)
	for _, a := range all {
		for _, b := range all {
			fmt.Fprintf(h, "%s>%s=%d|", a, b, st.Topology.Cost(a, b))
		}
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// inputDigest covers everything computeCluster reads but the global
// inputs, the shifts and the previous rows (checked apart). Maps are walked
// in a fixed order (sorted sub-cluster names, then the blackhole).
func inputDigest(in clusterInput) [sha256.Size]byte {
	w := digestWriter{buf: make([]byte, 0, 2048+len(in.proxies)*(64+24*len(in.cfg.SubClusters)))}
	w.str(in.name)
	pol, err := json.Marshal(in.cfg.Policy)
	if err != nil {
		panic("plan: marshal policy: " + err.Error()) // plain values only
	}
	w.buf = append(w.buf, pol...)
	w.bool(in.dropOK)
	scs := sortedKeys(in.cfg.SubClusters)
	for _, name := range scs {
		sc := in.cfg.SubClusters[name]
		w.str(name)
		w.str(sc.IDC)
		w.bool(sc.Excluded)
		w.bool(in.drained[name])
		insts := sc.Instances
		if in.members != nil {
			insts = in.members[name]
			w.str("members")
		}
		w.int(len(insts))
		for _, i := range insts {
			w.str(i.Addr)
			w.int(i.Port)
			w.int(i.Weight)
			w.int(i.CapacityRPS)
			w.str(i.State)
			w.int(len(i.Labels))
			for _, k := range sortedKeys(i.Labels) {
				w.str(k)
				w.str(i.Labels[k])
			}
		}
	}
	keys := append(scs, config.Blackhole)
	for b, pc := range in.proxies {
		w.str(pc)
		w.f64(in.demand[b])
		w.bool(in.known[b])
		if pin := in.pins[pc]; pin != nil {
			w.str("pin")
			w.bool(pin.AllowFullDrop)
			w.row(keys, pin.Weights)
		}
	}
	return w.sum()
}

// row encodes weights in the order of keys, then any other names.
func (w *digestWriter) row(keys []string, weights map[string]int) {
	w.int(len(weights))
	n := 0
	for _, k := range keys {
		if v, ok := weights[k]; ok {
			w.int(v)
			n++
		} else {
			w.int(-1)
		}
	}
	if n != len(weights) { // names that are not sub-clusters: rare
		for _, k := range sortedKeys(weights) {
			w.str(k)
			w.int(weights[k])
		}
	}
}

// digestWriter buffers the encoded inputs; they are hashed once at the end
// (many tiny hash writes cost more than the hashing).
type digestWriter struct{ buf []byte }

func (w *digestWriter) int(v int) { w.buf = binary.LittleEndian.AppendUint64(w.buf, uint64(v)) }

func (w *digestWriter) f64(v float64) {
	w.buf = binary.LittleEndian.AppendUint64(w.buf, math.Float64bits(v))
}

func (w *digestWriter) bool(v bool) {
	if v {
		w.buf = append(w.buf, 1)
	} else {
		w.buf = append(w.buf, 0)
	}
}

// str writes a length-prefixed string, so adjacent strings cannot blur.
func (w *digestWriter) str(s string) {
	w.int(len(s))
	w.buf = append(w.buf, s...)
}

func (w *digestWriter) sum() [sha256.Size]byte { return sha256.Sum256(w.buf) }

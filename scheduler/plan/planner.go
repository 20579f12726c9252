// Package plan computes the W matrix: for every backend cluster, the weight
// row each proxy cluster uses over its sub-clusters and GSLB_BLACKHOLE, as
// described in SCHEDULER.md and docs/scheduler.md.
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
	"reflect"
	"sync"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
)

// ErrNoState is returned when the View has no desired state.
var ErrNoState = errors.New("plan: view has no desired state")

// Planner computes plans and remembers each cluster's last result, keyed by
// a digest of that cluster's inputs, so that a call recomputes only the
// clusters whose inputs changed. It is safe for concurrent use (calls are
// serialised).
type Planner struct {
	mu    sync.Mutex
	cache map[string]cacheEntry
	// skipHash leaves Meta.Hash empty; only benchmarks set it, to measure
	// the plan apart from the content hashes.
	skipHash bool
}

type cacheEntry struct {
	key [sha256.Size]byte
	out clusterOutput
}

// NewPlanner returns a Planner with an empty cache.
func NewPlanner() *Planner { return &Planner{cache: map[string]cacheEntry{}} }

// Compute returns one snapshot per proxy cluster of v.State.Topology
// (Meta.ProxyCluster and Meta.Hash set, nothing else of Meta). prev holds
// the last published snapshot per proxy cluster (nil or missing entries are
// fine); its rows feed the stability term, the max-step guardrail and
// hysteresis: when every row of a proxy cluster would change by less than
// hysteresis_percent points, that snapshot keeps prev's rows, so its content
// hash only changes if membership or policy did.
func (p *Planner) Compute(v View, prev map[string]*snapshot.Snapshot) (Result, error) {
	if v.State == nil {
		return Result{}, ErrNoState
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st := v.State
	set := normalise(st.Scheduler)
	proxies := sortedKeys(st.Topology.ProxyClusters)
	global := globalDigest(st, proxies, set)

	drains := map[string]map[string]bool{}
	for _, d := range st.Drains {
		if drains[d.Cluster] == nil {
			drains[d.Cluster] = map[string]bool{}
		}
		drains[d.Cluster][d.SubCluster] = true
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

	res := Result{Snapshots: make(map[string]*snapshot.Snapshot, len(proxies)), Clusters: make(map[string]ClusterPlan, len(st.Clusters))}
	outs := make(map[string]clusterOutput, len(st.Clusters))
	names := sortedKeys(st.Clusters)
	for _, name := range names {
		in := clusterInput{
			name: name, cfg: st.Clusters[name], drained: drains[name], proxies: proxies,
			topo: &st.Topology, set: set,
			demand: make([]float64, len(proxies)), known: make([]bool, len(proxies)),
			pins: pins[name], shifts: shifts[name], prevRows: make(map[string]*snapshot.Row, len(proxies)),
			prevOpt: make(map[string]map[string]float64, len(proxies)),
		}
		if m, ok := v.Members[name]; ok {
			in.members = m
		}
		for b, pc := range proxies {
			d, ok := v.Demand[pc][name]
			if !ok || d <= 0 || math.IsNaN(d) || math.IsInf(d, 0) {
				d = set.defaultDemand
			}
			if d > 0 {
				in.demand[b], in.known[b] = d, true
			}
			if s := prev[pc]; s != nil {
				if c, ok := s.Clusters[name]; ok {
					r := c.Row
					in.prevRows[pc] = &r
					if e := c.Explanation; e != nil && (e.Mode == ModeOptimal || e.Mode == ModeFallback) && r.Denominator == set.den {
						in.prevOpt[pc] = e.Optimum
					}
				}
			}
		}
		entry, ok := p.cache[name]
		var last *clusterOutput
		if ok {
			last = &entry.out
		}
		key := clusterDigest(global, in, last)
		recomputed := !ok || entry.key != key
		if recomputed {
			out, err := computeCluster(in)
			if err != nil {
				return Result{}, err
			}
			entry = cacheEntry{key: key, out: out}
			p.cache[name] = entry
			res.Recomputed = append(res.Recomputed, name)
		}
		outs[name] = entry.out
		cp := entry.out.plan
		cp.Recomputed = recomputed
		res.Clusters[name] = cp
	}
	for name := range p.cache {
		if _, ok := st.Clusters[name]; !ok {
			delete(p.cache, name)
		}
	}

	hystPoints := set.points(set.hysteresis)
	for _, pc := range proxies {
		pcfg := st.Topology.ProxyClusters[pc]
		s := &snapshot.Snapshot{
			Meta:           snapshot.Meta{ProxyCluster: pc},
			Settings:       snapshot.Settings{IDC: pcfg.IDC, TrustedProxies: pcfg.TrustedProxies},
			Products:       st.Products,
			DefaultProduct: st.DefaultProduct,
			Clusters:       make(map[string]snapshot.Cluster, len(names)),
		}
		for _, name := range names {
			s.Clusters[name] = outs[name].rows[pc]
		}
		kept := applyHysteresis(s, prev[pc], hystPoints, set.hysteresis)
		if !p.skipHash {
			s.Meta.Hash = contentHash(s, names, outs, kept)
		}
		res.Snapshots[pc] = s
	}
	return res, nil
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

// clusterDigest covers everything computeCluster reads. Maps are walked in
// a fixed order (sorted sub-cluster names, then the blackhole). A previous
// row that is the very row this planner produced last time (the publisher
// hands our snapshots back as prev) is covered by its cached encoding,
// which is cheaper than walking its map; a different encoding of equal
// content only costs one needless recomputation.
func clusterDigest(global [sha256.Size]byte, in clusterInput, last *clusterOutput) [sha256.Size]byte {
	w := digestWriter{buf: make([]byte, 0, 2048+len(in.proxies)*(64+24*len(in.cfg.SubClusters)))}
	w.buf = append(w.buf, global[:]...)
	w.str(in.name)
	pol, err := json.Marshal(in.cfg.Policy)
	if err != nil {
		panic("plan: marshal policy: " + err.Error()) // plain values only
	}
	w.buf = append(w.buf, pol...)
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
	row := func(weights map[string]int) { w.row(keys, weights) }
	for b, pc := range in.proxies {
		w.str(pc)
		w.f64(in.demand[b])
		w.bool(in.known[b])
		if pin := in.pins[pc]; pin != nil {
			w.str("pin")
			w.bool(pin.AllowFullDrop)
			row(pin.Weights)
		}
		for _, s := range in.shifts[pc] {
			w.str("shift")
			w.str(s.Shift.ID)
			w.str(s.Shift.From)
			w.str(s.Shift.To)
			w.int(s.AppliedPercent)
		}
		r := in.prevRows[pc]
		if r == nil {
			continue
		}
		if last != nil && sameMap(r.Weights, last.rows[pc].Row.Weights) && sameOpt(in.prevOpt[pc], last.rows[pc].Explanation) {
			// Our own output handed back: its encoding was made when it
			// was computed (the same bytes as below).
			w.buf = append(w.buf, last.prevEnc[pc]...)
		} else {
			w.prev(keys, r, in.prevOpt[pc])
		}
	}
	return w.sum()
}

// prev encodes a previous row and optimum for the cache key.
func (w *digestWriter) prev(keys []string, r *snapshot.Row, opt map[string]float64) {
	w.str("prev")
	w.int(r.Denominator)
	w.bool(r.Pinned)
	w.bool(r.AllowFullDrop)
	w.row(keys, r.Weights)
	if opt != nil {
		w.str("opt")
		for _, k := range keys {
			w.f64(opt[k])
		}
	}
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

// sameOpt reports whether opt is the optimum map of e (or both are absent
// as previous optimum, since only optimal and fallback rows provide one).
func sameOpt(opt map[string]float64, e *snapshot.Explanation) bool {
	if e == nil || (e.Mode != ModeOptimal && e.Mode != ModeFallback) {
		return opt == nil
	}
	if opt == nil || e.Optimum == nil {
		return opt == nil && e.Optimum == nil
	}
	return reflect.ValueOf(opt).UnsafePointer() == reflect.ValueOf(e.Optimum).UnsafePointer()
}

// sameMap reports whether a and b are the same map object.
func sameMap(a, b map[string]int) bool {
	return a != nil && reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
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

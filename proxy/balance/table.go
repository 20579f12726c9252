package balance

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/statusmatch"
)

// slotBits sizes the consistent sub-cluster table (2^14 slots): each slot is
// 1/16384 of the key space, so realised shares are within ~0.3 % of the row.
const slotBits = 14

const blackholeIdx = 255 // slot owner meaning GSLB_BLACKHOLE

// Table is the immutable balancing state compiled from one snapshot. Safe for
// concurrent use.
type Table struct {
	snap       *snapshot.Snapshot
	reg        *Registry
	clusters   map[string]*Cluster
	endpoints  []*Endpoint // unique, referenced by this table
	rules      map[*Endpoint]healthRules
	baseWeight map[*Endpoint]int
	effWeights bool
}

// Version is the snapshot's version.
func (t *Table) Version() uint64 { return t.snap.Meta.Version }

// Snapshot is the snapshot the table was built from; callers must not modify it.
func (t *Table) Snapshot() *snapshot.Snapshot { return t.snap }

// Cluster returns the named backend cluster, or nil.
func (t *Table) Cluster(name string) *Cluster {
	if t == nil {
		return nil
	}
	return t.clusters[name]
}

func (t *Table) groupByKey(k progressKey) *group {
	c := t.clusters[k.cluster]
	if c == nil {
		return nil
	}
	for _, g := range c.subs {
		if g.name == k.subcluster {
			return g
		}
	}
	return nil
}

// Holder publishes the current Table. The zero value is ready to use.
type Holder struct{ p atomic.Pointer[Table] }

// Load returns the current table (nil before the first Store). Lock-free.
func (h *Holder) Load() *Table { return h.p.Load() }

// Store publishes t and tells its registry which addresses are referenced;
// addresses no table references any more are released once their in-flight
// requests finish. Call it from one goroutine.
func (h *Holder) Store(t *Table) {
	if t == nil {
		return
	}
	t.reg.applyRules(t)
	h.p.Store(t)
	t.reg.setCurrent(t)
}

func (r *Registry) applyRules(t *Table) {
	for _, e := range t.endpoints {
		e.mu.Lock()
		e.rules = t.rules[e]
		e.baseWeight = t.baseWeight[e]
		if e.rules.effFailNum == 0 {
			e.effWeight = 0
		}
		e.mu.Unlock()
	}
}

// instance algorithm identifiers.
type algo int

const (
	algoWRR algo = iota
	algoWLC
	algoWLCRandom
	algoP2C
	algoSticky
	algoStickyCookie
	algoStaticRR
	algoRoundRobin
	algoLeastConn
	algoFirst
	algoRandom
	algoSource
)

// subMode is policy.balance.subcluster_mode, compiled.
type subMode uint8

const (
	modeConsistent subMode = iota
	modeBFE
	modeRequest
)

// Cluster is one backend cluster of a Table: its weight row over
// sub-clusters and their instances. Safe for concurrent use.
type Cluster struct {
	name  string
	table *Table
	reg   *Registry
	pol   config.Policy

	subs       []*group // non-excluded sub-clusters, sorted by name
	bhWeight   int      // GSLB_BLACKHOLE weight
	rowTotal   int      // Σ weights > 0, blackhole included
	mode       string
	modeKind   subMode
	fast       bool // Selection.fastFirst applies (see there)
	key        keySpec
	slots      []uint8 // consistent mode: owner per slot (blackholeIdx = drop)
	bfeRanges  []bfeRange
	algo       algo
	algoName   string
	randomN    int
	consistent bool // source: hash_type consistent
	outlier    statusmatch.Matcher
	hasOutlier bool
	cookie     string
	byAddr     map[netip.AddrPort]memberRef
}

type memberRef struct {
	group  int
	member int
}

type bfeRange struct {
	end int // exclusive upper bound of the range
	sub int // index in subs, or blackholeIdx
}

// Name is the cluster name.
func (c *Cluster) Name() string { return c.name }

// Policy is the cluster's policy (defaults applied by the snapshot decoder).
func (c *Cluster) Policy() config.Policy { return c.pol }

// member is one instance of a sub-cluster.
type member struct {
	ep       *Endpoint
	weight   int  // configured
	agentOK  bool // snapshot state is not draining/unhealthy
	addrHash uint64
}

// group is one sub-cluster of a cluster.
type group struct {
	c        *Cluster
	idx      int
	name     string
	nameHash uint64
	weight   int // row weight
	members  []member
	base     *schedule // configured weights; progress shared across tables
	ring     *ring     // sticky and source/consistent
	view     atomic.Pointer[view]
	mu       sync.Mutex // view rebuilds, tie-break state
	tie      smoothWRR  // wlc tie-break (guarded by mu)
	rr       atomic.Uint64
}

// Build compiles a snapshot into a Table. It changes nothing visible to
// requests: runtime state is only created for new addresses (and smooth-WRR
// progress looked up); an error leaves everything as it was.
func Build(s *snapshot.Snapshot, r *Registry) (*Table, error) {
	if s == nil {
		return nil, fmt.Errorf("build table: nil snapshot")
	}
	if r == nil {
		return nil, fmt.Errorf("build table: nil registry")
	}
	t := &Table{snap: s, reg: r, clusters: make(map[string]*Cluster, len(s.Clusters)),
		rules: map[*Endpoint]healthRules{}, baseWeight: map[*Endpoint]int{}}
	type pending struct {
		addr netip.AddrPort
		rule healthRules
		w    int
	}
	names := make([]string, 0, len(s.Clusters))
	for n := range s.Clusters {
		names = append(names, n)
	}
	sort.Strings(names)
	var eps []pending
	compiled := make([]*Cluster, 0, len(names))
	addrs := make([][][]netip.AddrPort, 0, len(names))
	for _, name := range names {
		c, a, err := compileCluster(name, s.Clusters[name])
		if err != nil {
			return nil, fmt.Errorf("build table: cluster %q: %w", name, err)
		}
		compiled = append(compiled, c)
		addrs = append(addrs, a)
		rule := rulesOf(c.pol)
		for gi, g := range c.subs {
			for mi := range g.members {
				eps = append(eps, pending{addrs[len(addrs)-1][gi][mi], rule, g.members[mi].weight})
			}
		}
	}
	// Everything validated: only now touch the registry.
	seen := map[netip.AddrPort]*Endpoint{}
	for _, p := range eps {
		if seen[p.addr] != nil {
			continue
		}
		e := r.endpoint(p.addr)
		seen[p.addr] = e
		t.endpoints = append(t.endpoints, e)
		t.rules[e] = p.rule
		t.baseWeight[e] = p.w
	}
	for ci, c := range compiled {
		c.table, c.reg = t, r
		c.byAddr = map[netip.AddrPort]memberRef{}
		for gi, g := range c.subs {
			ids := make([]int32, len(g.members))
			ws := make([]int, len(g.members))
			for mi := range g.members {
				a := addrs[ci][gi][mi]
				g.members[mi].ep = seen[a]
				b, _ := a.MarshalBinary()
				g.members[mi].addrHash = hashBytes(b)
				ids[mi] = int32(g.members[mi].addrHash)
				ws[mi] = g.members[mi].weight
				if _, dup := c.byAddr[a]; !dup {
					c.byAddr[a] = memberRef{gi, mi}
				}
			}
			g.base = r.progressFor(progressKey{c.name, g.name}, sigOfMembers(g.members, ws), ws)
			if c.algo == algoSticky || (c.algo == algoSource && c.consistent) {
				g.ring = buildRing(g.members)
			}
		}
		if c.pol.Balance.EffectiveWeights {
			t.effWeights = true
		}
		t.clusters[c.name] = c
	}
	return t, nil
}

func sigOfMembers(ms []member, ws []int) uint64 {
	h := uint64(14695981039346656037)
	for i := range ms {
		h ^= ms[i].addrHash
		h *= 1099511628211
		h ^= uint64(ws[i])
		h *= 1099511628211
	}
	return h
}

// progressFor returns the (cluster, sub-cluster) schedule for these weights,
// reusing the previous one — and so its position — when nothing changed.
func (r *Registry) progressFor(k progressKey, sig uint64, ws []int) *schedule {
	r.mu.Lock()
	old := r.progress[k]
	r.mu.Unlock()
	if old != nil && old.sig == sig {
		return old
	}
	s := newSchedule(buildSchedule(ws), sig, r.stripes)
	r.mu.Lock()
	r.progress[k] = s
	r.mu.Unlock()
	return s
}

func rulesOf(p config.Policy) healthRules {
	h := healthRules{
		failNum: p.Health.FailNum, succNum: p.Health.SuccNum,
		checkInterval: p.Health.CheckInterval.D(), active: p.Health.Active,
		interval: p.Health.Interval.D(), timeout: p.Health.Timeout.D(),
		rise: p.Health.Rise, fall: p.Health.Fall, probe: p.Health.Probe,
		slowStart: p.SlowStart.Window.D(), floorPercent: p.SlowStart.FloorPercent,
	}
	if p.Balance.EffectiveWeights {
		h.effFailNum = max(1, p.Health.FailNum)
	}
	return h
}

func parseAlgo(s string) (algo, int, error) {
	switch s {
	case "", config.InstanceWRR:
		return algoWRR, 0, nil
	case config.InstanceWLC:
		return algoWLC, 0, nil
	case config.InstanceWLCRandom:
		return algoWLCRandom, 0, nil
	case config.InstanceP2CEWMA:
		return algoP2C, 0, nil
	case config.InstanceSticky:
		return algoSticky, 0, nil
	case config.InstanceStickyCookie:
		return algoStickyCookie, 0, nil
	case config.InstanceStaticRR:
		return algoStaticRR, 0, nil
	case config.InstanceRoundRobin:
		return algoRoundRobin, 0, nil
	case config.InstanceLeastConn:
		return algoLeastConn, 0, nil
	case config.InstanceFirst:
		return algoFirst, 0, nil
	case config.InstanceRandom:
		return algoRandom, 1, nil
	case config.InstanceSource:
		return algoSource, 0, nil
	}
	if inner, ok := strings.CutPrefix(s, config.InstanceRandom+"("); ok {
		if n, err := strconv.Atoi(strings.TrimSuffix(inner, ")")); err == nil && strings.HasSuffix(inner, ")") && n >= 1 && n <= 16 {
			return algoRandom, n, nil
		}
		return 0, 0, fmt.Errorf("policy.balance.instance %q: want random(N) with N in 1..16", s)
	}
	return 0, 0, fmt.Errorf("policy.balance.instance %q: unknown mode", s)
}

// compileCluster checks and compiles one cluster; it does not touch the registry.
func compileCluster(name string, sc snapshot.Cluster) (*Cluster, [][]netip.AddrPort, error) {
	p := sc.Policy
	c := &Cluster{name: name, pol: p, mode: p.Balance.SubclusterMode, key: compileKey(p.Balance.Hash), cookie: p.Balance.StickyCookie}
	if c.mode == "" {
		c.mode = config.SubclusterConsistent
	}
	switch c.mode {
	case config.SubclusterConsistent:
		c.modeKind = modeConsistent
	case config.SubclusterBFE:
		c.modeKind = modeBFE
	case config.SubclusterRequest:
		c.modeKind = modeRequest
	default:
		return nil, nil, fmt.Errorf("policy.balance.subcluster_mode %q: want consistent, bfe or request", c.mode)
	}
	switch c.key.kind {
	case config.HashClientIP, config.HashURI:
	case config.HashHeader, config.HashHeaderOrIP:
		if c.key.header == "" {
			return nil, nil, fmt.Errorf("policy.balance.hash.header is empty: key %q needs a header or Cookie:NAME", c.key.kind)
		}
	default:
		return nil, nil, fmt.Errorf("policy.balance.hash.key %q: want client_ip, header, header_or_ip or uri", c.key.kind)
	}
	if c.cookie == "" {
		c.cookie = "SLUICE_STICKY"
	}
	var err error
	if c.algo, c.randomN, err = parseAlgo(p.Balance.Instance); err != nil {
		return nil, nil, err
	}
	c.algoName = p.Balance.Instance
	if c.algoName == "" {
		c.algoName = config.InstanceWRR
	}
	switch p.Balance.HashType {
	case "", "map-based":
	case "consistent":
		c.consistent = true
	default:
		return nil, nil, fmt.Errorf("policy.balance.hash_type %q: want map-based or consistent", p.Balance.HashType)
	}
	if p.Health.OutlierStatus != "" {
		m, err := statusmatch.Parse(p.Health.OutlierStatus)
		if err != nil {
			return nil, nil, fmt.Errorf("policy.health.outlier_status: %w", err)
		}
		c.outlier, c.hasOutlier = m, true
	}
	if p.SlowStart.Window < 0 || (p.SlowStart.Window > 0 && (p.SlowStart.FloorPercent < 1 || p.SlowStart.FloorPercent > 100)) {
		return nil, nil, fmt.Errorf("policy.slow_start: window %s floor_percent %d: want window ≥ 0 and floor 1..100", p.SlowStart.Window, p.SlowStart.FloorPercent)
	}
	for w, v := range sc.Row.Weights {
		if v < 0 {
			return nil, nil, fmt.Errorf("row.weights[%q] = %d: must be ≥ 0", w, v)
		}
		if w != config.Blackhole {
			if _, ok := sc.SubClusters[w]; !ok {
				return nil, nil, fmt.Errorf("row.weights[%q]: unknown sub-cluster", w)
			}
		}
	}
	c.bhWeight = sc.Row.Weights[config.Blackhole]
	names := make([]string, 0, len(sc.SubClusters))
	for n, s := range sc.SubClusters {
		if n == config.Blackhole {
			return nil, nil, fmt.Errorf("subclusters[%q]: reserved name", n)
		}
		if !s.Excluded {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if len(names) >= blackholeIdx {
		return nil, nil, fmt.Errorf("subclusters: %d, at most %d", len(names), blackholeIdx-1)
	}
	addrs := make([][]netip.AddrPort, len(names))
	seenAddr := map[netip.AddrPort]bool{}
	for gi, n := range names {
		s := sc.SubClusters[n]
		g := &group{c: c, idx: gi, name: n, nameHash: hashString(n), weight: sc.Row.Weights[n]}
		for ii, in := range s.Instances {
			ip, err := netip.ParseAddr(in.Addr)
			if err != nil {
				return nil, nil, fmt.Errorf("subclusters[%q].instances[%d].addr %q: %w", n, ii, in.Addr, err)
			}
			if in.Port < 1 || in.Port > 65535 {
				return nil, nil, fmt.Errorf("subclusters[%q].instances[%d].port %d: want 1..65535", n, ii, in.Port)
			}
			if in.Weight < 0 || in.Weight > config.MaxInstanceWeight {
				return nil, nil, fmt.Errorf("subclusters[%q].instances[%d].weight %d: want 0..%d", n, ii, in.Weight, config.MaxInstanceWeight)
			}
			a := netip.AddrPortFrom(ip.Unmap(), uint16(in.Port))
			if seenAddr[a] {
				return nil, nil, fmt.Errorf("subclusters[%q].instances[%d]: duplicate address %s", n, ii, a)
			}
			seenAddr[a] = true
			addrs[gi] = append(addrs[gi], a)
			ok := in.State != config.StateDraining && in.State != config.StateUnhealthy
			g.members = append(g.members, member{weight: in.Weight, agentOK: ok})
		}
		c.subs = append(c.subs, g)
	}
	c.rowTotal = c.bhWeight
	for _, g := range c.subs {
		c.rowTotal += g.weight
	}
	c.fast = c.modeKind == modeConsistent && c.key.ipOnly && c.rowTotal > 0 && (c.algo == algoWRR || c.algo == algoRoundRobin)
	switch c.mode {
	case config.SubclusterConsistent:
		c.slots = buildSlots(c)
	case config.SubclusterBFE, config.SubclusterRequest:
		// Request mode draws a random point in the same ranges.
		c.bfeRanges = bfeRanges(c, nil)
	}
	return c, addrs, nil
}

// buildSlots assigns every slot of the consistent table. The blackhole is
// decided first by a per-slot uniform draw against its share (a change of the
// blackhole share moves only the keys entering or leaving it); the rest is
// weighted rendezvous over sub-clusters with weight > 0 (a shift of weight
// between two sub-clusters moves that share of keys and no more; a weight-0
// sub-cluster owns nothing).
func buildSlots(c *Cluster) []uint8 {
	n := 1 << slotBits
	out := make([]uint8, n)
	if c.rowTotal == 0 {
		for i := range out {
			out[i] = blackholeIdx
		}
		return out
	}
	bh := float64(c.bhWeight) / float64(c.rowTotal)
	for s := 0; s < n; s++ {
		key := mix(uint64(s) + 0x9e3779b97f4a7c15)
		if c.bhWeight > 0 && unit(mix(key^0x5bd1e995)) < bh {
			out[s] = blackholeIdx
			continue
		}
		out[s] = uint8(rendezvousOwner(c, key, nil))
	}
	return out
}

// rendezvousOwner returns the index of the highest-scoring sub-cluster with
// weight > 0 for which ok is true (nil: all), or blackholeIdx if none.
func rendezvousOwner(c *Cluster, key uint64, ok func(int) bool) int {
	best, bestS := blackholeIdx, 0.0
	for i, g := range c.subs {
		if g.weight <= 0 || (ok != nil && !ok(i)) {
			continue
		}
		s := rendezvousScore(key, g.nameHash, g.weight)
		if best == blackholeIdx || s > bestS {
			best, bestS = i, s
		}
	}
	return best
}

// bfeRanges lays out BFE's ranges: members with weight > 0 sorted by name,
// blackhole included (unless keep is non-nil: then only sub-clusters for
// which keep is true, blackhole excluded).
func bfeRanges(c *Cluster, keep func(int) bool) []bfeRange {
	type e struct {
		name string
		w    int
		idx  int
	}
	var es []e
	if keep == nil && c.bhWeight > 0 {
		es = append(es, e{config.Blackhole, c.bhWeight, blackholeIdx})
	}
	for i, g := range c.subs {
		if g.weight > 0 && (keep == nil || keep(i)) {
			es = append(es, e{g.name, g.weight, i})
		}
	}
	sort.Slice(es, func(a, b int) bool { return es[a].name < es[b].name })
	out := make([]bfeRange, 0, len(es))
	end := 0
	for _, x := range es {
		end += x.w
		out = append(out, bfeRange{end, x.idx})
	}
	return out
}

func pickRange(rs []bfeRange, h uint64) int {
	if len(rs) == 0 {
		return -1
	}
	if len(rs) == 1 {
		return rs[0].sub // BFE's single-sub-cluster fast path: no hashing
	}
	v := int(h % uint64(rs[len(rs)-1].end))
	for _, r := range rs {
		if v < r.end {
			return r.sub
		}
	}
	return rs[len(rs)-1].sub
}

// view is a group's availability and dynamic weights at one registry epoch.
type view struct {
	epoch   uint64
	until   time.Time // rebuild at this time (slow start, override TTL); zero: never
	avail   []bool
	weights []int // dynamic weight, 0 when unavailable
	nAvail  int
	total   int64
	prefix  []int64 // prefix sums of weights (random draws)
	sched   *schedule
	full    bool        // every member available at its configured weight (sched is the base)
	timed   bool        // until is set
	order   []*Endpoint // sched.order resolved to endpoints: one load less per pick
	panic   bool
	states  []memberState
}

// slowStartSteps: a view's slow-start weights are reused for at most
// window/slowStartSteps.
const slowStartSteps = 20

func (g *group) currentView() *view {
	r := g.c.reg
	v := g.view.Load()
	e := r.epoch.Load()
	if v != nil && v.epoch == e && (v.until.IsZero() || r.now().Before(v.until)) {
		return v
	}
	return g.rebuildView(e)
}

// assess reads every member's state into states and marks in avail those
// that may serve: eligible (agent OK, not drained, weight > 0) and
// healthy, or ejected beyond the ejection cap. It returns how many are
// eligible and how many of those may serve.
func (g *group) assess(now time.Time, states []memberState, avail []bool) (eligible, healthy int) {
	var ejected []int
	for i := range g.members {
		m := &g.members[i]
		ms := m.ep.read(m.weight, now)
		states[i] = ms
		if !m.agentOK || ms.drained || ms.weight <= 0 {
			continue
		}
		eligible++
		switch ms.health {
		case Normal:
			healthy++
			avail[i] = true
		case Checking:
			ejected = append(ejected, i)
		}
	}
	// Cap passive ejection: the earliest-ejected stay out, later ones serve.
	pol := g.c.pol.Health
	if len(ejected) > 0 {
		allowed := max(1, eligible*pol.MaxEjectionPercent/100)
		if pol.MaxEjectionPercent >= 100 {
			allowed = len(ejected)
		}
		sort.SliceStable(ejected, func(a, b int) bool {
			return states[ejected[a]].ejectedAt.Before(states[ejected[b]].ejectedAt)
		})
		for _, i := range ejected[min(allowed, len(ejected)):] {
			avail[i] = true
			healthy++
		}
	}
	return eligible, healthy
}

// healthyElsewhere reports whether a sub-cluster of c other than g has a
// member that may serve (see assess). It reads states, not views: views
// are rebuilt lazily and one may be rebuilding this one.
func (c *Cluster) healthyElsewhere(g *group, now time.Time) bool {
	for _, o := range c.subs {
		if o == g || len(o.members) == 0 {
			continue
		}
		if _, healthy := o.assess(now, make([]memberState, len(o.members)), make([]bool, len(o.members))); healthy > 0 {
			return true
		}
	}
	return false
}

func (g *group) rebuildView(epoch uint64) *view {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.c.reg
	now := r.now()
	if v := g.view.Load(); v != nil && v.epoch == epoch && (v.until.IsZero() || now.Before(v.until)) {
		return v
	}
	n := len(g.members)
	v := &view{epoch: epoch, avail: make([]bool, n), weights: make([]int, n), prefix: make([]int64, n), states: make([]memberState, n)}
	eligible, healthy := g.assess(now, v.states, v.avail)
	for i := range v.states {
		if u := v.states[i].until; !u.IsZero() && (v.until.IsZero() || u.Before(v.until)) {
			v.until = u
		}
	}
	// Panic: with too few healthy members health is ignored, rather than
	// piling all traffic on the survivors. A sub-cluster with none healthy
	// leaves its share to the others — unless no sub-cluster of the cluster
	// has a healthy member: then every one ignores health, the last resort
	// before answering 503.
	pol := g.c.pol.Health
	if pol.PanicPercent > 0 && eligible > 0 &&
		(healthy > 0 && healthy*100 < pol.PanicPercent*eligible || healthy == 0 && !g.c.healthyElsewhere(g, now)) {
		v.panic = true
		for i := range g.members {
			m := &g.members[i]
			if m.agentOK && !v.states[i].drained && v.states[i].weight > 0 {
				v.avail[i] = true
			}
		}
	}
	static := true
	for i := range g.members {
		if v.avail[i] {
			v.weights[i] = v.states[i].weight
			v.nAvail++
			v.total += int64(v.weights[i])
			if v.weights[i] != g.members[i].weight {
				static = false
			}
		} else if g.members[i].weight > 0 {
			static = false
		}
		v.prefix[i] = v.total
	}
	if !v.until.IsZero() {
		// Slow start ramps continuously: re-read weights every window/20.
		step := now.Add(time.Second)
		for i := range v.states {
			if v.states[i].progress < 1 {
				if w := g.c.pol.SlowStart.Window.D() / slowStartSteps; w > 0 {
					step = now.Add(w)
				}
				break
			}
		}
		if step.Before(v.until) {
			v.until = step
		}
	}
	v.full = static
	v.timed = !v.until.IsZero()
	if static {
		v.sched = g.base
	} else if old := g.view.Load(); old != nil && old.sched != nil && old.sched.sig == sigOfMembers(g.members, v.weights) {
		v.sched = old.sched
	} else {
		v.sched = newSchedule(buildSchedule(v.weights), sigOfMembers(g.members, v.weights), r.stripes)
	}
	v.order = make([]*Endpoint, len(v.sched.order))
	for k, i := range v.sched.order {
		v.order[k] = g.members[i].ep
	}
	g.view.Store(v)
	return v
}

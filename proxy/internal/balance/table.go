package balance

import (
	"fmt"
	"net/http"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/statusmatch"
	"github.com/sluicelb/sluice/api/validate"
)

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

// Cluster is one backend cluster of a Table: its weight row over
// sub-clusters and their instances. Safe for concurrent use.
type Cluster struct {
	name  string
	table *Table
	reg   *Registry
	pol   config.Policy

	subs         []*group // non-excluded sub-clusters, sorted by name
	bhWeight     int      // GSLB_BLACKHOLE weight
	rowTotal     int      // Σ weights > 0, blackhole included
	mode         string
	modeKind     subMode
	fastSub      bool // Selection.fastSub applies (see there)
	fast         bool // and Selection.fastFirst: a schedule-based algorithm
	key          keySpec
	slots        []uint8 // consistent mode: owner per slot (slotBlackhole = drop)
	bfeRanges    []bfeRange
	algo         algo
	algoName     string
	picker       instancePicker // the algorithm, chosen by Build
	randomN      int
	consistent   bool    // HAProxy hash modes (source, uri, hdr, url_param): hash_type consistent
	instKey      instKey // uri, hdr, url_param: the instance's own key
	stickyCookie bool    // sticky-cookie: honour and issue the cookie
	latency      bool    // p2c-ewma: Done folds latencies into the EWMA
	outlier      statusmatch.Matcher
	hasOutlier   bool
	cookie       string
	byAddr       map[netip.AddrPort]memberRef
	byCookie     map[[16]byte]memberRef // sticky-cookie: member id → member (cookie.go)
}

type memberRef struct {
	group  int
	member int
}

type bfeRange struct {
	end int // exclusive upper bound of the range
	sub int // index in subs, or slotBlackhole
}

// Name is the cluster name.
func (c *Cluster) Name() string { return c.name }

// Policy is the cluster's policy (defaults applied by the snapshot decoder).
func (c *Cluster) Policy() config.Policy { return c.pol }

// member is one instance of a sub-cluster.
type member struct {
	ep       *Endpoint
	rec      *loadRec // ep.rec: what p2c and random(N) read, without ep's lines
	weight   int      // configured
	agentOK  bool     // snapshot state is not draining/unhealthy
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
	ring     *ring     // sticky, ring_hash, and the HAProxy hash modes with hash_type consistent
	view     atomic.Pointer[view]
	mu       sync.Mutex // view rebuilds
	load     *loadTree  // least-loaded pickers; nil for the others
	// dense: the members' records copy their in-flight cells (a p2c or
	// random(N > 1) group of the current table; see loadRec): the pickers
	// read member.rec, else Endpoint.InFlight.
	dense   atomic.Bool
	rr      atomic.Uint64  // leastconn's rotating tie-break start
	cookies []*http.Cookie // sticky-cookie: each member's Set-Cookie, signed at Build (cookie.go)
}

// Build compiles a checked snapshot into a Table. It changes nothing
// visible to requests: runtime state is only created for new addresses (and
// smooth-WRR progress looked up); an error leaves everything as it was.
func Build(c validate.Checked, r *Registry) (*Table, error) { return build(c.Snapshot(), r) }

// build is Build on a snapshot the caller vouches for (this package's tests).
func build(s *snapshot.Snapshot, r *Registry) (*Table, error) {
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
		if c.stickyCookie {
			c.byCookie = map[[16]byte]memberRef{}
		}
		for gi, g := range c.subs {
			ids := make([]int32, len(g.members))
			ws := make([]int, len(g.members))
			for mi := range g.members {
				a := addrs[ci][gi][mi]
				g.members[mi].ep = seen[a]
				g.members[mi].rec = seen[a].rec
				b, _ := a.MarshalBinary()
				g.members[mi].addrHash = hashBytes(b)
				ids[mi] = int32(g.members[mi].addrHash)
				ws[mi] = g.members[mi].weight
				if _, dup := c.byAddr[a]; !dup {
					c.byAddr[a] = memberRef{gi, mi}
				}
			}
			if c.stickyCookie {
				c.indexCookies(gi, g)
			}
			g.base = r.progressFor(progressKey{c.name, g.name}, sigOfMembers(g.members, ws), ws)
			if c.algo == algoSticky || c.algo == algoRingHash || (c.algo.Hashed() && c.consistent) {
				g.ring = buildRing(g.members)
			}
			if c.needsLoadTree() && len(g.members) >= loadTreeMin {
				g.load = newLoadTree(g, c.algo == algoFirst)
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

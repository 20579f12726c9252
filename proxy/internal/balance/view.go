package balance

import (
	"net/http"
	"sort"
	"time"
)

// view is a group's availability and dynamic weights at one registry epoch.
type view struct {
	epoch   uint64
	until   time.Time // rebuild at this time (slow start, override TTL); zero: never
	avail   []bool
	weights []int // dynamic weight, 0 when unavailable
	nAvail  int
	total   int64
	prefix  []int64     // prefix sums of weights (map-based hashing; random draws without alias)
	alias   aliasTable  // random draws (random, random(N), p2c-ewma); nil for the other algorithms
	cand    []candidate // p2c-ewma, random(N > 1): what a draw's candidate is compared by (see candidate)
	// eps: the hashing algorithms' and random's members' endpoints, nil
	// where not available in the view: a first pick reads one 8-byte entry
	// where it read v.avail and g.members (Selection.landed).
	eps     []*Endpoint
	pindex  prefixIndex // map-based hashing: where a hash falls in prefix (prefixindex.go)
	sched   *schedule
	full    bool           // every member available at its configured weight (sched is the base)
	timed   bool           // until is set
	order   []*Endpoint    // sched.order resolved to endpoints: one load less per pick
	cookies []*http.Cookie // sticky-cookie: sched.order resolved to the members' cookies
	panic   bool
	states  []memberState
}

// candidate is one member as the load-comparing draws (p2c-ewma,
// random(N > 1)) read it on a first pick: its endpoint, its record and its
// weight in the view, 24 bytes in one array, where the general path reads
// v.avail, g.members and v.weights (three more lines per candidate at
// 1 000 members and more).
type candidate struct {
	ep  *Endpoint
	rec *loadRec
	w   int64
}

// slowStartStep bounds how long a view's slow-start weights are reused.
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
	if v.total > 0 && g.c.drawsWeighted() {
		v.alias = newAlias(v.weights, v.total)
	}
	if v.total > 0 && g.c.needsDense() {
		v.cand = make([]candidate, n)
		for i := range v.cand {
			v.cand[i] = candidate{ep: g.members[i].ep, rec: g.members[i].rec, w: int64(v.weights[i])}
		}
	}
	if g.c.algo.Hashed() || g.ring != nil || g.c.algo == algoRandom && g.c.randomN <= 1 {
		// Not random(N > 1) nor p2c: their general path draws several
		// candidates with weightedIn, and landed counts what it accepts.
		v.eps = make([]*Endpoint, n)
		for i, ok := range v.avail {
			if ok {
				v.eps[i] = g.members[i].ep
			}
		}
	}
	if v.total > 0 && g.c.algo.Hashed() && !g.c.consistent {
		v.pindex = newPrefixIndex(v.prefix, v.total)
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
	if g.cookies != nil {
		v.cookies = make([]*http.Cookie, len(v.sched.order))
		for k, i := range v.sched.order {
			v.cookies[k] = g.cookies[i]
		}
	}
	g.view.Store(v)
	return v
}

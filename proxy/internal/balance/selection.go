package balance

import (
	"math/bits"
	"net/http"
	"net/netip"
	"sync"
	_ "unsafe" // go:linkname
)

// Selection is one request's sequence of picks. Not safe for concurrent use.
// It lives in the caller's per-request state (Cluster.Start) or comes from a
// pool (Cluster.NewSelection).
type Selection struct {
	c        *Cluster
	req      *http.Request
	ip       netip.Addr
	keyHash  uint64
	stop     error       // sticky terminal error (blackhole)
	extra    []*Endpoint // tried endpoints beyond triedArr
	nTried   int
	attempt  int
	primary  int // group index of the primary sub-cluster, -1 before the first pick
	primUsed int
	crossUse int
	stripe   uint32
	keyOK    bool
	keyDone  bool
	acquired *Endpoint // the picker already counted its pick in flight (loadTree.acquire): that endpoint
	live     bool      // started and not released
	pooled   bool
	triedArr [4]*Endpoint
	rng      uint64 // rand's wyrand state (0: not seeded)
}

var selPool = sync.Pool{New: func() any { return &Selection{pooled: true} }}

// NewSelection starts a request's selection in pooled storage on stripe 0;
// call Release when the request ends. clientIP keys client_ip hashing (the
// caller resolves trusted proxies).
func (c *Cluster) NewSelection(req *http.Request, clientIP netip.Addr) *Selection {
	s := selPool.Get().(*Selection)
	c.Start(s, req, clientIP, 0)
	return s
}

// Start begins a request's selection in s, storage the caller owns (a
// field of its per-request state: no pool round trip); call s.Release when
// the request ends, after which s may be started again.
//
// stripe chooses the smooth-WRR cursor: selections with the same stripe walk
// one cursor, so a client connection that always passes the same stripe sees
// nginx's exact smooth sequence, while connections on other stripes advance
// their own cursors and concurrent picks do not contend on one counter.
func (c *Cluster) Start(s *Selection, req *http.Request, clientIP netip.Addr, stripe uint32) {
	s.c, s.req, s.ip = c, req, clientIP
	// Pointer fields are written only when set: every write costs a
	// write-barrier check.
	if s.stop != nil {
		s.stop = nil
	}
	if s.extra != nil {
		s.extra = s.extra[:0]
	}
	s.nTried = 0
	s.attempt, s.primary, s.primUsed, s.crossUse = 0, -1, 0, 0
	s.stripe = stripe & uint32(c.reg.stripes-1)
	s.keyDone, s.acquired, s.live = false, nil, true
	c.reg.active[s.stripe].n.Add(1)
}

// Release ends the selection; s must not be used after, except to Start
// it again when the caller owns it.
func (s *Selection) Release() {
	if s == nil || !s.live {
		return
	}
	s.live = false
	s.c.reg.active[s.stripe].n.Add(^uint64(0))
	// Caller-owned storage is left as it is: clearing costs write
	// barriers on every request, and what it references (the request, the
	// endpoints tried) dies with the caller's per-request state anyway.
	if s.pooled {
		s.c, s.req, s.stop, s.extra = nil, nil, nil, nil
		clear(s.triedArr[:])
		selPool.Put(s)
	}
}

// rand is a uniformly random 64-bit value for the selection's draws: the
// next output of the selection's own wyrand (the runtime's cheap
// generator, whose 64-bit output hi ^ lo it keeps whole), seeded from two
// of the runtime's per-thread outputs (runtime.cheaprand: no lock, no
// atomic) at its first draw. The state outlives Start: storage the caller
// reuses for its requests keeps one stream, and a draw is inlined
// arithmetic, no call. (math/rand/v2's Uint64, ChaCha8, cost 73
// instructions a draw in callgrind, where p2c-ewma and random(2) draw
// twice per pick and wrr's whole pick is 421; against two runtime.cheaprand
// calls a draw, this stream took 4–9 % off random(2)'s and p2c-ewma's picks
// at 1 000 instances, BenchmarkPickVsWRR.) With RegistryOptions.Rand (the
// tests' seeded sources) it draws from that.
func (s *Selection) rand() uint64 {
	if r := s.c.reg; r.ownRand {
		return r.rand()
	}
	if s.rng == 0 {
		s.rng = uint64(cheaprand())<<32 | uint64(cheaprand())
	}
	s.rng += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(s.rng, s.rng^0xe7037ed1a0b428db)
	return hi ^ lo
}

// cheaprand is the runtime's per-M wyrand (its 32 high-quality bits), the
// source of its own cheap draws (select, map iteration, scheduling);
// linknamed as the runtime allows (go.dev/issue/67401).
//
//go:linkname cheaprand runtime.cheaprand
func cheaprand() uint32

// Attempts is the number of picks returned so far.
func (s *Selection) Attempts() int { return s.attempt }

func (s *Selection) key() (uint64, bool) {
	if !s.keyDone {
		s.keyHash, s.keyOK = s.c.key.hash(s.req, s.ip)
		s.keyDone = true
	}
	return s.keyHash, s.keyOK
}

func (s *Selection) isTried(e *Endpoint) bool {
	for _, t := range s.triedArr[:min(s.nTried, len(s.triedArr))] {
		if t == e {
			return true
		}
	}
	for _, t := range s.extra {
		if t == e {
			return true
		}
	}
	return false
}

func (s *Selection) addTried(e *Endpoint) {
	if s.nTried < len(s.triedArr) {
		s.triedArr[s.nTried] = e
	} else {
		s.extra = append(s.extra, e)
	}
	s.nTried++
}

// Next returns the next attempt's target. The first call is the primary
// pick (the blackhole draw comes first: ErrBlackhole, never on retries);
// later calls are retries: up to 1+retry_max attempts in the primary
// sub-cluster, then cross_retry attempts in other sub-clusters weighted by the
// row (standbys of weight 0 last, never the blackhole), tried instances
// excluded. Errors: ErrBlackhole, ErrNoAvailable, ErrRetryBudget, ErrAttemptsExhausted.
func (s *Selection) Next() (Pick, error) {
	if s.stop != nil {
		return Pick{}, s.stop
	}
	if s.attempt == 0 {
		if s.c.fastSub {
			if g, v := s.fastSub(); g != nil {
				if s.c.fast && len(v.sched.order) > 0 {
					return s.fastFirst(g, v), nil
				}
				return s.firstIn(g, v, reasonHash)
			}
		}
		return s.first()
	}
	c := s.c
	rp := c.pol.Retry
	if s.attempt >= 1+max(0, rp.RetryMax)+max(0, rp.CrossRetry) {
		return Pick{}, ErrAttemptsExhausted
	}
	if !c.reg.retryAllowed(rp.BudgetPercent, rp.BudgetMin) {
		return Pick{}, ErrRetryBudget
	}
	p, err := s.retry()
	if err != nil {
		c.reg.retries.Add(-1)
		return Pick{}, err
	}
	p.meta |= metaRetryToken
	return p, nil
}

func (s *Selection) retry() (Pick, error) {
	c := s.c
	rp := c.pol.Retry
	if s.primary >= 0 && s.primUsed < 1+max(0, rp.RetryMax) {
		g := c.subs[s.primary]
		if i := c.picker.pick(s, g, g.currentView()); i >= 0 {
			s.primUsed++
			return s.take(g, i, reasonRetry, false), nil
		}
	}
	if s.crossUse < max(0, rp.CrossRetry) {
		if g := s.pickCross(); g != nil {
			if i := c.picker.pick(s, g, g.currentView()); i >= 0 {
				s.crossUse++
				return s.take(g, i, reasonCross, true), nil
			}
		}
	}
	// The only available instance of the whole cluster may be retried.
	if gi, i, ok := s.onlyInstance(); ok {
		if gi == s.primary && s.primUsed < 1+max(0, rp.RetryMax) {
			s.primUsed++
			return s.take(c.subs[gi], i, reasonRetry, false), nil
		}
		if gi != s.primary && s.crossUse < max(0, rp.CrossRetry) {
			s.crossUse++
			return s.take(c.subs[gi], i, reasonCross, true), nil
		}
	}
	if s.primUsed >= 1+max(0, rp.RetryMax) && s.crossUse >= max(0, rp.CrossRetry) {
		return Pick{}, ErrAttemptsExhausted
	}
	return Pick{}, ErrNoAvailable
}

// onlyInstance reports the cluster's single available instance, if exactly one.
func (s *Selection) onlyInstance() (int, int, bool) {
	fg, fi, n := -1, -1, 0
	for gi, g := range s.c.subs {
		v := g.currentView()
		if v.nAvail == 0 {
			continue
		}
		n += v.nAvail
		if n > 1 {
			return 0, 0, false
		}
		for i, ok := range v.avail {
			if ok {
				fg, fi = gi, i
			}
		}
	}
	return fg, fi, n == 1
}

// hasUntried says whether group gi has an available instance not tried yet.
func (s *Selection) hasUntried(gi int) bool {
	g := s.c.subs[gi]
	v := g.currentView()
	if v.nAvail == 0 {
		return false
	}
	if s.nTried == 0 {
		return true
	}
	for i, ok := range v.avail {
		if ok && !s.isTried(g.members[i].ep) {
			return true
		}
	}
	return false
}

// pickCross chooses another sub-cluster for a cross retry: weighted by the
// row among those with weight > 0, then standbys (weight 0) at random; nil
// when none has an untried available instance.
func (s *Selection) pickCross() *group {
	c := s.c
	var total int64
	for gi, g := range c.subs {
		if gi != s.primary && g.weight > 0 && s.hasUntried(gi) {
			total += int64(g.weight)
		}
	}
	if total > 0 {
		x := int64(s.rand() % uint64(total))
		for gi, g := range c.subs {
			if gi != s.primary && g.weight > 0 && s.hasUntried(gi) {
				if x < int64(g.weight) {
					return g
				}
				x -= int64(g.weight)
			}
		}
	}
	n := 0
	for gi, g := range c.subs {
		if gi != s.primary && g.weight == 0 && s.hasUntried(gi) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	k := int(s.rand() % uint64(n))
	for gi, g := range c.subs {
		if gi != s.primary && g.weight == 0 && s.hasUntried(gi) {
			if k == 0 {
				return g
			}
			k--
		}
	}
	return nil
}

func (s *Selection) first() (Pick, error) {
	g, why, err := s.pickSub()
	switch err {
	case nil:
	case ErrBlackhole:
		s.stop = ErrBlackhole
		return Pick{}, ErrBlackhole
	case errSpill:
		return s.spill()
	default:
		return Pick{}, err
	}
	return s.firstIn(g, g.currentView(), why)
}

// firstIn is the first pick once the primary sub-cluster g is chosen (v is
// its current view): the sticky cookie's instance, else the algorithm's.
// Only the first attempt comes here (nothing tried, no attempt made), so
// the pick is recorded as takeFirst records it, without take's general
// bookkeeping (addTried, the attempt count, the cross flag): 20–30
// instructions a pick less for every algorithm but wrr's and
// roundrobin's fastFirst, in callgrind.
func (s *Selection) firstIn(g *group, v *view, why reason) (Pick, error) {
	c := s.c
	if c.stickyCookie {
		return s.firstCookie(g, v, why)
	}
	i := c.picker.pick(s, g, v)
	if i < 0 {
		return Pick{}, ErrNoAvailable
	}
	if e := s.acquired; e != nil {
		// The picker counted it in flight (loadTree.acquire, drawLeast).
		s.acquired = nil
		s.triedArr[0] = e
		s.nTried = 1
		s.attempt, s.primary, s.primUsed = 1, g.idx, 1
		return Pick{ep: e, g: g, meta: newMeta(1, why, false, s.stripe)}, nil
	}
	return s.takeFirst(g, g.members[i].ep, why), nil
}

// firstCookie is firstIn for sticky-cookie: the cookie's instance, else
// the smooth pick with the instance's cookie to issue.
func (s *Selection) firstCookie(g *group, v *view, why reason) (Pick, error) {
	if g, i, ok := s.cookieTarget(); ok {
		s.primary = g.idx
		s.primUsed++
		return s.take(g, i, reasonCookie, false), nil
	}
	if len(v.sched.order) > 0 {
		// The smooth pick (c.picker) read from the view's resolved
		// schedule: its endpoint and its cookie, as for wrr.
		pos := v.sched.nextPos(s.stripe)
		p := s.takeFirst(g, v.order[pos], why)
		p.cookie = v.cookies[pos]
		return p, nil
	}
	i := s.c.picker.pick(s, g, v)
	if i < 0 {
		return Pick{}, ErrNoAvailable
	}
	s.primary = g.idx
	s.primUsed++
	p := s.take(g, i, why, false)
	p.cookie = g.cookies[i]
	return p, nil
}

// spill is the first pick when no weighted sub-cluster has anything
// available: straight to a cross retry.
func (s *Selection) spill() (Pick, error) {
	c := s.c
	if s.crossUse >= max(0, c.pol.Retry.CrossRetry) {
		return Pick{}, ErrNoAvailable
	}
	g := s.pickCross()
	if g == nil {
		return Pick{}, ErrNoAvailable
	}
	i := c.picker.pick(s, g, g.currentView())
	if i < 0 {
		return Pick{}, ErrNoAvailable
	}
	s.crossUse++
	return s.take(g, i, reasonCross, true), nil
}

// fastSub is first()'s sub-cluster choice for the common case the table
// marked c.fastSub — consistent sub-cluster mode keyed by client IP — when
// the chosen sub-cluster's view is current, has no timed change pending and
// has available members: the group and its view, the same first() would
// choose (pickSub, subFor and currentView without their general cases).
// Anything else (no client address, blackhole, an empty sub-cluster, a view
// to rebuild) returns nil and first() decides.
func (s *Selection) fastSub() (*group, *view) {
	c := s.c
	if !s.ip.IsValid() {
		return nil, nil
	}
	h := hashAddr(s.ip)
	s.keyHash, s.keyOK, s.keyDone = h, true, true
	gi := int(c.slots[h>>(64-slotBits)])
	if gi == slotBlackhole {
		return nil, nil
	}
	g := c.subs[gi]
	v := g.view.Load()
	if v == nil || v.epoch != c.reg.epoch.Load() || v.timed || v.nAvail == 0 {
		return nil, nil
	}
	return g, v
}

// fastFirst is firstIn for a schedule-based instance algorithm (wrr,
// roundrobin: c.fast) on fastSub's answer whose view has a schedule: the
// schedule's next endpoint, read from the view without the picker's call.
func (s *Selection) fastFirst(g *group, v *view) Pick {
	return s.takeFirst(g, v.order[v.sched.nextPos(s.stripe)], reasonHash)
}

// takeFirst is take for the first pick, of endpoint e of g, by a picker
// that did not acquire it.
func (s *Selection) takeFirst(g *group, e *Endpoint, why reason) Pick {
	if e.acquire(s.stripe) {
		e.noteLoad(s.stripe)
	}
	s.triedArr[0] = e
	s.nTried = 1
	s.attempt, s.primary, s.primUsed = 1, g.idx, 1
	return Pick{ep: e, g: g, meta: newMeta(1, why, false, s.stripe)}
}

// take records the pick and builds it.
func (s *Selection) take(g *group, i int, why reason, cross bool) Pick {
	e := s.acquired // member i's endpoint, read by the picker: one line less here
	if e != nil {
		s.acquired = nil
	} else if e = g.members[i].ep; e.acquire(s.stripe) {
		e.noteLoad(s.stripe)
	}
	s.addTried(e)
	s.attempt++
	return Pick{ep: e, g: g, meta: newMeta(s.attempt, why, cross, s.stripe)}
}

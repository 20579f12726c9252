package balance

import (
	"net/http"
	"net/netip"
	"sort"
	"sync"
	"time"
)

// FailureKind classifies an attempt's outcome for passive health.
type FailureKind int

const (
	// KindNone: the backend answered (Status is its status). With a non-nil
	// Err and KindNone the attempt is neutral (e.g. the client went away).
	KindNone FailureKind = iota
	// KindConnect: dialing or writing the request failed.
	KindConnect
	// KindTimeout: the backend did not answer in time.
	KindTimeout
	// KindStatus: the backend answered Status; it counts as a failure when
	// policy.health.outlier_status matches it.
	KindStatus
	// KindLocalLimit: the proxy's own connection cap was reached — back-pressure,
	// never a backend failure.
	KindLocalLimit
)

// Result is what happened to one attempt.
type Result struct {
	Err     error
	Kind    FailureKind
	Status  int
	Latency time.Duration
}

// Pick is one attempt's target. It must be reported exactly once with Done.
// It is returned by value and has at most four fields on purpose: the Go
// compiler keeps such a struct in registers, where a larger one is copied
// through memory on every return (measured: a third of the pick's cost).
type Pick struct {
	ep     *Endpoint
	g      *group
	cookie *http.Cookie // non-nil when a sticky cookie must be (re)issued
	meta   pickMeta
}

// pickMeta packs the attempt number (bits 0-31), the reason (32-39), the
// cross-retry (40) and retry-token (41) flags and the stripe (48-63).
type pickMeta uint64

func newMeta(attempt int, why reason, cross bool, stripe uint32) pickMeta {
	m := pickMeta(uint32(attempt)) | pickMeta(why)<<32 | pickMeta(uint16(stripe))<<48
	if cross {
		m |= 1 << 40
	}
	return m
}

const metaRetryToken pickMeta = 1 << 41

// reason says how a pick was made.
type reason uint8

const (
	reasonHash reason = iota
	reasonRequest
	reasonRandom
	reasonFallback
	reasonCookie
	reasonRetry
	reasonCross
)

var reasonNames = [...]string{"hash", "request", "random", "fallback", "cookie", "retry", "cross-retry"}

// Endpoint is the chosen backend.
func (p Pick) Endpoint() *Endpoint { return p.ep }

// SetCookie is the sticky cookie to (re)issue with the response, or nil.
func (p Pick) SetCookie() *http.Cookie { return p.cookie }

// SubCluster is the chosen sub-cluster's name.
func (p Pick) SubCluster() string {
	if p.g == nil {
		return ""
	}
	return p.g.name
}

// Attempt is the attempt number (1-based).
func (p Pick) Attempt() int { return int(uint32(p.meta)) }

// Cross reports a cross-sub-cluster retry.
func (p Pick) Cross() bool { return p.meta&(1<<40) != 0 }

// Reason is "hash", "request", "random", "fallback" or "cookie" for the first
// attempt (how the sub-cluster was chosen), "retry" or "cross-retry" after.
func (p Pick) Reason() string { return reasonNames[reason(p.meta>>32)] }

// Algorithm is the instance algorithm used.
func (p Pick) Algorithm() string {
	if p.g == nil {
		return ""
	}
	return p.g.c.algoName
}

// Done reports the attempt's outcome: it updates in-flight, passive health,
// EWMA latency, effective weight and the retry budget. Call exactly once.
func (p Pick) Done(res Result) {
	e := p.ep
	if e == nil || p.g == nil {
		return
	}
	c := p.g.c
	r := c.reg
	if p.meta&metaRetryToken != 0 {
		r.retries.Add(-1)
	}
	failed := false
	switch res.Kind {
	case KindConnect, KindTimeout:
		failed = true
	case KindStatus:
		failed = c.hasOutlier && c.outlier.Match(res.Status)
	case KindLocalLimit:
	}
	if failed {
		if e.reportFailure(r.now()) {
			r.log.Info("balance: passive failure changed state", "addr", e.addr.String(), "state", e.Health().String())
			r.bump()
		}
	}
	cl := &e.load[uint32(p.meta>>48)&(inflightCells-1)]
	if !failed && res.Kind != KindLocalLimit && (res.Err == nil || res.Kind == KindStatus) {
		if e.reportSuccess(cl, r) {
			r.bump()
		}
	}
	if c.algo == algoP2C && res.Kind != KindLocalLimit {
		e.observeLatency(res.Latency)
	}
	cl.n.Add(-1)
	if cl.flags.Load()&cellReleased != 0 && e.InFlight() == 0 {
		r.maybeSweep(e)
	}
}

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
	dry      bool
	live     bool // started and not released
	pooled   bool
	triedArr [4]*Endpoint
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
	s.keyDone, s.dry, s.live = false, false, true
	c.reg.active[s.stripe].n.Add(1)
}

// Release ends the selection; s must not be used after, except to Start
// it again when the caller owns it.
func (s *Selection) Release() {
	if s == nil || !s.live {
		return
	}
	s.live = false
	if !s.dry {
		s.c.reg.active[s.stripe].n.Add(^uint64(0))
	}
	// Caller-owned storage is left as it is: clearing costs write
	// barriers on every request, and what it references (the request, the
	// endpoints tried) dies with the caller's per-request state anyway.
	if s.pooled {
		s.c, s.req, s.stop, s.extra = nil, nil, nil, nil
		clear(s.triedArr[:])
		selPool.Put(s)
	}
}

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
		if s.c.fast && !s.dry {
			if p, ok := s.fastFirst(); ok {
				return p, nil
			}
		}
		return s.first()
	}
	c := s.c
	rp := c.pol.Retry
	if s.attempt >= 1+max(0, rp.RetryMax)+max(0, rp.CrossRetry) {
		return Pick{}, ErrAttemptsExhausted
	}
	if !s.dry && !c.reg.retryAllowed(rp.BudgetPercent, rp.BudgetMin) {
		return Pick{}, ErrRetryBudget
	}
	p, err := s.retry()
	if err != nil {
		if !s.dry {
			c.reg.retries.Add(-1)
		}
		return Pick{}, err
	}
	if !s.dry {
		p.meta |= metaRetryToken
	}
	return p, nil
}

func (s *Selection) retry() (Pick, error) {
	c := s.c
	rp := c.pol.Retry
	if s.primary >= 0 && s.primUsed < 1+max(0, rp.RetryMax) {
		g := c.subs[s.primary]
		if i, _ := s.pickInstance(g, g.currentView()); i >= 0 {
			s.primUsed++
			return s.take(g, i, reasonRetry, false), nil
		}
	}
	if s.crossUse < max(0, rp.CrossRetry) {
		if gi := s.pickCross(); gi >= 0 {
			g := c.subs[gi]
			if i, _ := s.pickInstance(g, g.currentView()); i >= 0 {
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
// row among those with weight > 0, then standbys (weight 0) at random.
func (s *Selection) pickCross() int {
	c := s.c
	var total int64
	for gi, g := range c.subs {
		if gi != s.primary && g.weight > 0 && s.hasUntried(gi) {
			total += int64(g.weight)
		}
	}
	if total > 0 {
		x := int64(c.reg.rand() % uint64(total))
		for gi, g := range c.subs {
			if gi != s.primary && g.weight > 0 && s.hasUntried(gi) {
				if x < int64(g.weight) {
					return gi
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
		return -1
	}
	k := int(c.reg.rand() % uint64(n))
	for gi, g := range c.subs {
		if gi != s.primary && g.weight == 0 && s.hasUntried(gi) {
			if k == 0 {
				return gi
			}
			k--
		}
	}
	return -1
}

func (s *Selection) first() (Pick, error) {
	c := s.c
	gi, why := s.pickSub()
	switch {
	case gi == blackholeIdx:
		s.stop = ErrBlackhole
		return Pick{}, ErrBlackhole
	case gi == -1:
		return Pick{}, ErrNoAvailable
	case gi == -2: // no weighted sub-cluster has anything: straight to cross retry
		if s.crossUse >= max(0, c.pol.Retry.CrossRetry) {
			return Pick{}, ErrNoAvailable
		}
		x := s.pickCross()
		if x < 0 {
			return Pick{}, ErrNoAvailable
		}
		g := c.subs[x]
		i, _ := s.pickInstance(g, g.currentView())
		if i < 0 {
			return Pick{}, ErrNoAvailable
		}
		s.crossUse++
		return s.take(g, i, reasonCross, true), nil
	}
	if c.algo == algoStickyCookie {
		if g, i, ok := s.cookieTarget(); ok {
			s.primary = g.idx
			s.primUsed++
			return s.take(g, i, reasonCookie, false), nil
		}
	}
	g := c.subs[gi]
	i, _ := s.pickInstance(g, g.currentView())
	if i < 0 {
		return Pick{}, ErrNoAvailable
	}
	s.primary = gi
	s.primUsed++
	if c.algo == algoStickyCookie {
		p := s.take(g, i, why, false)
		p.cookie = c.makeCookie(p.ep.addr)
		return p, nil
	}
	return s.take(g, i, why, false), nil
}

// fastFirst is first() for the common case the table marked c.fast —
// consistent sub-cluster mode keyed by client IP, a schedule-based instance
// algorithm (wrr, roundrobin) — when the chosen sub-cluster's view is
// current, has no timed change pending and has available members. It gives
// the same answer as first(); anything else (blackhole, empty sub-cluster,
// a view to rebuild) returns false and first() decides.
func (s *Selection) fastFirst() (Pick, bool) {
	c := s.c
	if !s.ip.IsValid() {
		return Pick{}, false
	}
	h := hashAddr(s.ip)
	s.keyHash, s.keyOK, s.keyDone = h, true, true
	gi := int(c.slots[h>>(64-slotBits)])
	if gi == blackholeIdx {
		return Pick{}, false
	}
	g := c.subs[gi]
	v := g.view.Load()
	if v == nil || v.epoch != c.reg.epoch.Load() || v.timed || v.nAvail == 0 || len(v.sched.order) == 0 {
		return Pick{}, false
	}
	e := v.order[v.sched.nextPos(s.stripe)]
	e.acquire(s.stripe)
	s.triedArr[0] = e
	s.nTried = 1
	s.attempt, s.primary, s.primUsed = 1, gi, 1
	return Pick{ep: e, g: g, meta: newMeta(1, reasonHash, false, s.stripe)}, true
}

// take records the pick and builds it.
func (s *Selection) take(g *group, i int, why reason, cross bool) Pick {
	e := g.members[i].ep
	if !s.dry {
		e.acquire(s.stripe)
	}
	s.addTried(e)
	s.attempt++
	return Pick{ep: e, g: g, meta: newMeta(s.attempt, why, cross, s.stripe)}
}

// pickSub chooses the primary sub-cluster: an index, blackholeIdx, -1 (fail
// fast: the chosen one has nothing available) or -2 (no weighted
// sub-cluster has anything available).
func (s *Selection) pickSub() (int, reason) {
	c := s.c
	if len(c.subs) == 0 && c.bhWeight == 0 {
		return -1, reasonHash
	}
	why := reasonHash
	var gi int
	switch c.modeKind {
	case modeRequest:
		why = reasonRequest
		if c.rowTotal == 0 {
			return -2, why
		}
		gi = pickRange(c.bfeRanges, c.reg.rand())
	case modeBFE:
		h, ok := s.key()
		if !ok {
			h, why = c.reg.rand(), reasonRandom
		}
		if c.rowTotal == 0 {
			return -2, why
		}
		gi = pickRange(c.bfeRanges, h)
	default:
		h, ok := s.key()
		if !ok {
			h, why = c.reg.rand(), reasonRandom
		}
		gi = int(c.slots[h>>(64-slotBits)])
		if c.rowTotal == 0 {
			return -2, why
		}
	}
	if gi == blackholeIdx {
		return gi, why
	}
	if gi >= 0 && c.subs[gi].currentView().nAvail > 0 {
		return gi, why
	}
	if c.pol.Balance.FailFast {
		return -1, why
	}
	// Spread the share of an empty sub-cluster over the rest (blackhole excluded).
	avail := func(i int) bool { return c.subs[i].currentView().nAvail > 0 }
	switch c.modeKind {
	case modeConsistent:
		h, ok := s.key()
		if !ok {
			h = c.reg.rand()
		}
		key := mix(uint64(h>>(64-slotBits)) + 0x9e3779b97f4a7c15)
		gi = rendezvousOwner(c, key, avail)
	case modeBFE:
		h, ok := s.key()
		if !ok {
			h = c.reg.rand()
		}
		gi = pickRange(bfeRanges(c, avail), h)
	default:
		gi = pickRange(bfeRanges(c, avail), c.reg.rand())
	}
	if gi < 0 || gi == blackholeIdx {
		return -2, reasonFallback
	}
	return gi, reasonFallback
}

// pickInstance applies the cluster's instance algorithm to group g, skipping
// unavailable and already-tried instances. It returns the member index or -1.
func (s *Selection) pickInstance(g *group, v *view) (int, string) {
	if v.nAvail == 0 {
		return -1, ""
	}
	c := s.c
	if s.nTried == 0 && !s.dry && (c.algo == algoWRR || c.algo == algoRoundRobin || c.algo == algoStickyCookie) && len(v.sched.order) > 0 {
		// Hot path: the view's schedule holds only available members.
		return int(v.sched.next(s.stripe)), "wrr"
	}
	ok := func(i int) bool { return v.avail[i] && !s.isTried(g.members[i].ep) }
	switch c.algo {
	case algoWRR, algoRoundRobin, algoStickyCookie:
		return s.fromSchedule(v.sched, ok), "wrr"
	case algoStaticRR:
		return s.fromSchedule(g.base, ok), "static-rr"
	case algoWLC, algoLeastConn, algoWLCRandom:
		return s.leastLoaded(g, v, ok), "wlc"
	case algoP2C:
		return s.p2c(g, v, ok), "p2c-ewma"
	case algoRandom:
		return s.randomN(g, v, ok, c.randomN), "random"
	case algoFirst:
		limit := int64(c.pol.Pool.MaxConnsPerHost)
		fallback := -1
		for i := range g.members {
			if !ok(i) {
				continue
			}
			if limit <= 0 || g.members[i].ep.InFlight() < limit {
				return i, "first"
			}
			if fallback < 0 {
				fallback = i
			}
		}
		return fallback, "first"
	case algoSource:
		h := uint64(0)
		if s.ip.IsValid() {
			h = hashAddr(s.ip)
		} else {
			h = c.reg.rand()
		}
		if c.consistent {
			return g.ring.lookup(h, ok), "source"
		}
		return s.mapBased(v, h, ok), "source"
	case algoSticky:
		h, kok := s.key()
		if !kok {
			h = c.reg.rand()
		}
		bound := int64(-1)
		if c.pol.Balance.BoundedLoadPercent > 0 {
			var sum int64
			for i := range g.members {
				if v.avail[i] {
					sum += g.members[i].ep.InFlight()
				}
			}
			// ceil(c × (load+1) / n): the new request counted in.
			bound = ((sum+1)*int64(c.pol.Balance.BoundedLoadPercent) + int64(v.nAvail)*100 - 1) / (int64(v.nAvail) * 100)
		}
		if bound >= 0 {
			if i := g.ring.lookup(h, func(i int) bool { return ok(i) && g.members[i].ep.InFlight() < bound }); i >= 0 {
				return i, "sticky"
			}
		}
		return g.ring.lookup(h, ok), "sticky"
	}
	return -1, ""
}

func (s *Selection) fromSchedule(sc *schedule, ok func(int) bool) int {
	n := len(sc.order)
	if n == 0 {
		return -1
	}
	if s.dry {
		for k := 0; k < n; k++ {
			if i := int(sc.peek(s.stripe, k)); ok(i) {
				return i
			}
		}
		return -1
	}
	for k := 0; k < n; k++ {
		if i := int(sc.next(s.stripe)); ok(i) {
			return i
		}
	}
	return -1
}

// leastLoaded is WLC: minimal inflight/weight (cross-multiplied, no floats);
// ties → smooth WRR (wlc), rotation (leastconn) or random (wlc-random).
func (s *Selection) leastLoaded(g *group, v *view, ok func(int) bool) int {
	best := -1
	var bn, bw int64
	ties := 0
	for i := range g.members {
		if !ok(i) || v.weights[i] <= 0 {
			continue
		}
		n, w := g.members[i].ep.InFlight(), int64(v.weights[i])
		switch {
		case best < 0 || n*bw < bn*w:
			best, bn, bw, ties = i, n, w, 1
		case n*bw == bn*w:
			ties++
		}
	}
	if ties <= 1 || s.dry {
		return best
	}
	isTie := func(i int) bool {
		return ok(i) && v.weights[i] > 0 && g.members[i].ep.InFlight()*bw == bn*int64(v.weights[i])
	}
	switch s.c.algo {
	case algoWLCRandom:
		k := int(s.c.reg.rand() % uint64(ties))
		for i := range g.members {
			if isTie(i) {
				if k == 0 {
					return i
				}
				k--
			}
		}
	case algoLeastConn:
		start := int(g.rr.Add(1) % uint64(len(g.members)))
		for k := 0; k < len(g.members); k++ {
			if i := (start + k) % len(g.members); isTie(i) {
				return i
			}
		}
	default:
		g.mu.Lock()
		i := g.tie.pick(v.weights, isTie)
		g.mu.Unlock()
		if i >= 0 {
			return i
		}
	}
	return best
}

// drawWeighted returns a weighted random available member (by the view's
// prefix sums), or -1 if it is excluded by ok.
func (s *Selection) drawWeighted(v *view, ok func(int) bool) int {
	if v.total <= 0 {
		return -1
	}
	x := int64(s.c.reg.rand() % uint64(v.total))
	i := sort.Search(len(v.prefix), func(i int) bool { return v.prefix[i] > x })
	if i < len(v.prefix) && ok(i) {
		return i
	}
	return -1
}

// scanWeighted is the slow path of drawWeighted when tried instances must be skipped.
func (s *Selection) scanWeighted(v *view, ok func(int) bool) int {
	var total int64
	for i, w := range v.weights {
		if ok(i) {
			total += int64(w)
		}
	}
	if total <= 0 {
		return -1
	}
	x := int64(s.c.reg.rand() % uint64(total))
	for i, w := range v.weights {
		if ok(i) {
			if x < int64(w) {
				return i
			}
			x -= int64(w)
		}
	}
	return -1
}

func (s *Selection) weighted(v *view, ok func(int) bool) int {
	if i := s.drawWeighted(v, ok); i >= 0 {
		return i
	}
	return s.scanWeighted(v, ok)
}

// randomN is HAProxy random(N): N weighted draws, the least loaded
// (inflight/weight) wins; N = 1 is a plain weighted random pick.
func (s *Selection) randomN(g *group, v *view, ok func(int) bool, n int) int {
	best := -1
	for k := 0; k < max(1, n); k++ {
		i := s.weighted(v, ok)
		if i < 0 {
			return best
		}
		if best < 0 || g.members[i].ep.InFlight()*int64(v.weights[best]) < g.members[best].ep.InFlight()*int64(v.weights[i]) {
			best = i
		}
	}
	return best
}

// p2c is power of two choices on EWMA latency × (in-flight + 1) / weight.
func (s *Selection) p2c(g *group, v *view, ok func(int) bool) int {
	a := s.weighted(v, ok)
	b := s.weighted(v, ok)
	if a < 0 || b < 0 || a == b {
		return max(a, b)
	}
	cost := func(i int) float64 {
		e := g.members[i].ep
		l := float64(e.EWMALatency())
		if l <= 0 {
			l = 1
		}
		return l * float64(e.InFlight()+1) / float64(v.weights[i])
	}
	if cost(b) < cost(a) {
		return b
	}
	return a
}

// mapBased is HAProxy's map-based source hashing: hash modulo the total
// weight of the available members (keys move whenever membership changes).
func (s *Selection) mapBased(v *view, h uint64, ok func(int) bool) int {
	if v.total <= 0 {
		return -1
	}
	x := int64(h % uint64(v.total))
	i := sort.Search(len(v.prefix), func(i int) bool { return v.prefix[i] > x })
	if i < len(v.prefix) && ok(i) {
		return i
	}
	for k := 1; k <= len(v.prefix); k++ {
		if j := (i + k) % len(v.prefix); ok(j) {
			return j
		}
	}
	return -1
}

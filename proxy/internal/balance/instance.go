package balance

import "sort"

// instancePicker is one instance algorithm (policy.balance.instance). Build
// chooses it once per cluster, as gRPC-Go's weighted round robin chooses
// its scheduler once in newScheduler: a pick makes one indirect call, with
// no switch on the algorithm's name. Every picker is a pointer with
// pointer-receiver methods: a value in the interface is called through a
// compiler-made wrapper that copies it (22 instructions a pick for
// requestHash, whose instKey holds a string, 9 for p2c's empty struct).
type instancePicker interface {
	// pick returns the index in g.members of the instance to try: available
	// in v and not tried yet by s; -1 when there is none.
	pick(s *Selection, g *group, v *view) int
}

// newPicker returns the picker for the cluster's compiled algorithm.
func newPicker(c *Cluster) instancePicker {
	switch c.algo {
	case algoStaticRR:
		return &staticRR{}
	case algoWLC:
		return &leastLoad{tieSchedule}
	case algoLeastConn:
		return &leastLoad{tieRotate}
	case algoWLCRandom:
		return &leastLoad{tieRandom}
	case algoP2C:
		return &p2c{}
	case algoRandom:
		return &randomN{max(1, c.randomN)}
	case algoFirst:
		return &firstAvail{int64(c.pol.Pool.MaxConnsPerHost)}
	case algoSource:
		return &source{c.consistent}
	case algoURI, algoHdr, algoURLParam:
		return &requestHash{c.instKey, c.consistent}
	case algoSticky, algoRingHash:
		return &sticky{c.pol.Balance.BoundedLoadPercent}
	}
	return &smooth{} // wrr, roundrobin, sticky-cookie
}

// needsDense says whether the algorithm reads its members' in-flight
// counts from their records (see loadRec): the draws that compare loads.
func (c *Cluster) needsDense() bool {
	return c.algo == algoP2C || c.algo == algoRandom && c.randomN > 1
}

// needsLoadTree says whether the algorithm reads a group's loadTree.
func (c *Cluster) needsLoadTree() bool {
	switch c.algo {
	case algoWLC, algoLeastConn, algoWLCRandom, algoFirst:
		return true
	case algoSticky, algoRingHash:
		return c.pol.Balance.BoundedLoadPercent > 0
	}
	return false
}

// smooth is nginx's smooth WRR over the view's dynamic weights, read from
// the view's precomputed schedule (wrr, roundrobin, and sticky-cookie
// without a valid cookie).
type smooth struct{}

func (*smooth) pick(s *Selection, g *group, v *view) int {
	if s.nTried == 0 && len(v.sched.order) > 0 {
		// The view's schedule holds only available members.
		return int(v.sched.next(s.stripe))
	}
	return s.fromSchedule(v.sched, g, v)
}

// staticRR is HAProxy's static-rr: the configured weights' schedule,
// whatever slow start or effective weights say.
type staticRR struct{}

func (*staticRR) pick(s *Selection, g *group, v *view) int {
	return s.fromSchedule(g.base, g, v)
}

// fromSchedule is the first usable member (see usable) the schedule gives
// on s's stripe, -1 after a whole cycle without one.
func (s *Selection) fromSchedule(sc *schedule, g *group, v *view) int {
	for range len(sc.order) {
		if i := int(sc.next(s.stripe)); s.usable(g, v, i) {
			return i
		}
	}
	return -1
}

// randomN is HAProxy random(N): N weighted draws, the least loaded
// (inflight/weight) wins; N = 1 is a plain weighted random pick.
type randomN struct{ n int }

func (p *randomN) pick(s *Selection, g *group, v *view) int {
	if p.n > 1 && s.nTried == 0 && v.cand != nil && g.dense.Load() {
		return s.drawLeast(v, p.n, false)
	}
	best := -1
	var bestN int64
	dense := g.dense.Load()
	for range p.n {
		i := s.weightedIn(g, v)
		if i < 0 {
			return best
		}
		if p.n == 1 {
			return i // a plain weighted draw: no load to compare
		}
		n := g.inFlight(i, dense)
		if best < 0 || n*int64(v.weights[best]) < bestN*int64(v.weights[i]) {
			best, bestN = i, n
		}
	}
	return best
}

// p2c is power of two choices on EWMA latency × (in-flight + 1) / weight.
type p2c struct{}

func (*p2c) pick(s *Selection, g *group, v *view) int {
	if s.nTried == 0 && v.cand != nil && g.dense.Load() {
		return s.drawLeast(v, 2, true)
	}
	a := s.weightedIn(g, v)
	b := s.weightedIn(g, v)
	if a < 0 || b < 0 || a == b {
		return max(a, b)
	}
	ra, rb := g.members[a].rec, g.members[b].rec
	if g.dense.Load() {
		if cheaper(rb.work(rb.inFlight()), v.weights[b], ra.work(ra.inFlight()), v.weights[a]) {
			return b
		}
		return a
	}
	if cheaper(rb.work(g.members[b].ep.InFlight()), v.weights[b], ra.work(g.members[a].ep.InFlight()), v.weights[a]) {
		return b
	}
	return a
}

// drawLeast is the first pick of p2c-ewma (cost: by p2c's cost) and
// random(N) (else: by in-flight / weight) from v's candidates while g is
// dense (g.dense; v.cand set): n weighted draws, the least costly wins
// (the first drawn of equals), counted in flight here (s.acquired) from
// the candidate's endpoint. The same choice as the general path's, which
// a first pick would take with weightedIn's first draw every time: the
// alias table gives members without weight — the unavailable — no mass
// (TestAliasTableIsExact), so every draw is usable without reading v.avail.
// Per candidate it reads its alias column, its candidate and its record:
// three lines, where the general path read seven (p2c's ewma and
// in-flight on the endpoint's first line and four cells).
func (s *Selection) drawLeast(v *view, n int, p2c bool) int {
	best := -1
	var bc *candidate
	var bn int64
	var bwork float64
	for range n {
		i := v.alias.draw(s.rand(), v.total)
		if i == best {
			continue
		}
		c := &v.cand[i]
		cn := c.rec.inFlight()
		if p2c {
			work := c.rec.work(cn)
			if bc == nil || cheaper(work, int(c.w), bwork, int(bc.w)) {
				best, bc, bwork = i, c, work
			}
		} else if bc == nil || cn*bc.w < bn*c.w {
			best, bc, bn = i, c, cn
		}
	}
	if e := bc.ep; e.acquire(s.stripe) {
		e.noteLoad(s.stripe)
	}
	s.acquired = bc.ep
	return best
}

// inFlight is member i's in-flight count: from its record when dense
// (g.dense: the copy is kept; one line, see loadRec), else from the
// endpoint's cells (a selection still running on a table that was
// replaced).
func (g *group) inFlight(i int, dense bool) int64 {
	if dense {
		return g.members[i].rec.inFlight()
	}
	return g.members[i].ep.InFlight()
}

// source is HAProxy's balance source: the client address hashed onto the
// members, map-based (hash modulo the total weight) or consistent (the ring).
type source struct{ consistent bool }

func (p *source) pick(s *Selection, g *group, v *view) int {
	h := uint64(0)
	if s.ip.IsValid() {
		h = hashAddr(s.ip)
	} else {
		h = s.rand()
	}
	return s.hashedIn(g, v, h, p.consistent)
}

// hashedIn is hashedPick over the usable members (see usable). The member
// the hash lands on is checked first, without the filter's closure: it is
// the answer unless it is unavailable or already tried.
func (s *Selection) hashedIn(g *group, v *view, h uint64, consistent bool) int {
	i := -1
	if consistent {
		i = g.ring.at(h)
	} else if i = mapIndex(v, h); i >= len(v.prefix) {
		i = -1
	}
	if i >= 0 && s.landed(g, v, i) {
		return i
	}
	return hashedPick(g, v, h, s.untried(g, v), consistent)
}

// landed says whether member i, the one a hash landed on, is the pick: it
// is usable. On a first pick (nothing tried) that is v.eps[i] set, and the
// endpoint is counted in flight here (s.acquired): a hashing pick at 1 000
// members and more missed the v.avail and g.members lines besides the
// ring's and the endpoint's, in callgrind.
func (s *Selection) landed(g *group, v *view, i int) bool {
	if s.nTried > 0 || v.eps == nil {
		return s.usable(g, v, i)
	}
	e := v.eps[i]
	if e == nil {
		return false
	}
	if e.acquire(s.stripe) {
		e.noteLoad(s.stripe)
	}
	s.acquired = e
	return true
}

// hashedPick maps a key hash onto the members as HAProxy's hash-type does:
// consistent (the ring) or map-based (modulo the available weight).
func hashedPick(g *group, v *view, h uint64, ok func(int) bool, consistent bool) int {
	if consistent {
		return g.ring.lookup(h, ok)
	}
	return mapBased(v, h, ok)
}

// requestHash is HAProxy's balance uri, hdr(<name>) and url_param(<name>):
// the request's key hashed onto the members (hash_type map-based or
// consistent); without a key (header or parameter absent or empty) the
// request is balanced round robin, as HAProxy does.
type requestHash struct {
	key        instKey
	consistent bool
}

func (p *requestHash) pick(s *Selection, g *group, v *view) int {
	h, ok := p.key.hash(s.req)
	if !ok {
		return (*smooth).pick(nil, s, g, v)
	}
	return s.hashedIn(g, v, h, p.consistent)
}

// sticky is consistent hashing of the request key onto the ring, with
// bounded load (percent > 0): an instance already at ⌈percent × (load+1) /
// n⌉ in flight passes the key on along the ring.
type sticky struct{ boundPercent int }

func (p *sticky) pick(s *Selection, g *group, v *view) int {
	h, kok := s.key()
	if !kok {
		h = s.rand()
	}
	if p.boundPercent <= 0 {
		if i := g.ring.at(h); i >= 0 && s.landed(g, v, i) {
			return i
		}
	}
	ok := s.untried(g, v)
	if p.boundPercent > 0 {
		// ceil(c × (load+1) / n): the new request counted in.
		bound := ((g.inFlightSum(v)+1)*int64(p.boundPercent) + int64(v.nAvail)*100 - 1) / (int64(v.nAvail) * 100)
		if i := g.ring.lookup(h, func(i int) bool { return ok(i) && g.members[i].ep.InFlight() < bound }); i >= 0 {
			return i
		}
	}
	return g.ring.lookup(h, ok)
}

// usable is the filter of the pickers: member i is available in v and not
// tried by s (nothing is tried before the first pick).
func (s *Selection) usable(g *group, v *view, i int) bool {
	return v.avail[i] && (s.nTried == 0 || !s.isTried(g.members[i].ep))
}

// untried is usable as a function of the member, for the general paths.
func (s *Selection) untried(g *group, v *view) func(int) bool {
	return func(i int) bool { return s.usable(g, v, i) }
}

// drawsWeighted says whether the algorithm draws weighted random members
// (its views carry an alias table).
func (c *Cluster) drawsWeighted() bool { return c.algo == algoRandom || c.algo == algoP2C }

// drawWeighted returns a weighted random available member (by the view's
// alias table, else its prefix sums), or -1 if it is excluded by ok.
func (s *Selection) drawWeighted(v *view, ok func(int) bool) int {
	if v.total <= 0 {
		return -1
	}
	var i int
	if v.alias != nil {
		i = v.alias.draw(s.rand(), v.total)
	} else {
		x := int64(s.rand() % uint64(v.total))
		i = sort.Search(len(v.prefix), func(i int) bool { return v.prefix[i] > x })
	}
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
	x := int64(s.rand() % uint64(total))
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

// weightedIn is weighted over the usable members (see usable): a draw
// from the alias table that lands on one is taken without the filter's
// closure — every draw on a first pick, as unavailable members have no
// mass — else the scan re-draws among them.
func (s *Selection) weightedIn(g *group, v *view) int {
	if v.alias != nil && v.total > 0 {
		if i := v.alias.draw(s.rand(), v.total); s.landed(g, v, i) {
			return i
		}
		return s.scanWeighted(v, s.untried(g, v))
	}
	return s.weighted(v, s.untried(g, v))
}

func (s *Selection) weighted(v *view, ok func(int) bool) int {
	if i := s.drawWeighted(v, ok); i >= 0 {
		return i
	}
	return s.scanWeighted(v, ok)
}

// mapBased is HAProxy's map-based source hashing: hash modulo the total
// weight of the available members (keys move whenever membership changes).
func mapBased(v *view, h uint64, ok func(int) bool) int {
	i := mapIndex(v, h)
	if i < 0 {
		return -1
	}
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

// mapIndex is the member h maps to by weight, h modulo the view's total
// weight, available or not; -1 when the view has no weight.
func mapIndex(v *view, h uint64) int {
	if v.total <= 0 {
		return -1
	}
	x := int64(h % uint64(v.total))
	if v.pindex.start != nil {
		return v.pindex.find(v.prefix, x)
	}
	return sort.Search(len(v.prefix), func(i int) bool { return v.prefix[i] > x })
}

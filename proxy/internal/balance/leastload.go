package balance

import (
	"math"
	"sync"
	"sync/atomic"
)

// loadTree keeps a group's members ordered by load — in-flight / weight —
// so that the least-loaded pickers (wlc, wlc-random, leastconn, first and
// sticky's bounded load) find their instance in O(log n) rather than by a
// scan, as HAProxy's leastconn keeps its servers in a tree keyed by
// (inflight + 1) / weight.
//
// It is a segment tree over the members: each node holds the least-loaded
// member of its range (the leftmost of equals), its load, and how many
// members of the range share that load. Every change of an address's
// in-flight count (Endpoint.acquire and release, from any cluster) is
// written after it: the tree re-reads the count (the one cell changed,
// when it knows which: loadMember) and fixes the path to the root, under
// the tree's own mutex, which a config update never holds. (The two
// exceptions: the tree's own acquire writes the member's record and
// leaves its leaf and path to the release or the next sync, pend; the
// release of an address one tree alone tracks is written by the next
// sync, rel.) Whatever order those writes run in, the last one re-reads
// after the last change: the tree ends exact. The weights are those of the view the tree last synced
// with; a pick first syncs the tree with the view it uses (O(n), only when
// the view changed). Loads are compared by cross-multiplying, as the scan
// did: the order is exact.
//
// A tree serves requests only while live: from the Holder.Store of its
// table until the next one. A selection still running on an older table
// falls back to the scan (the reference the tree is tested against).
type loadTree struct {
	mu     sync.Mutex
	live   atomic.Bool
	resync atomic.Bool // set by installLoadTrees: the next sync re-reads everything
	unit   bool        // every available member weighs 1 (first: order by in-flight alone)
	size   int         // leaves: a power of two ≥ len(m)
	m      []loadMember
	v      *view      // the view whose weights m[].w holds; nil: none yet
	sum    int64      // Σ n over available members
	node   []loadNode // node k has children 2k and 2k+1; member i's leaf is size+i
	// pend is 1 + the member whose record (m) an acquire changed without
	// writing its leaf (0: none); pendN is the count its leaf holds. Its
	// release usually comes before the next pick: the count then returns
	// to pendN and neither the leaf nor the path above it is written. Every
	// other leaf is its member's record, and every node the combination of
	// its children; sync writes the pending leaf first.
	pend  int32
	pendN int32
	// rel is 1 + a member whose release (Pick.Done) changed its count
	// without writing it to the tree (0: none): the release swaps itself
	// in here instead of taking t.mu, and the next sync (a pick, which
	// takes t.mu anyway) re-reads that member. A release that finds
	// another member here writes that one under t.mu itself. Either way
	// the re-read comes after the count moved, so every tree reader sees
	// every release that finished before its sync.
	rel atomic.Int32
}

// loadMember is the tree's record of one member: the endpoint, its
// in-flight count as last read, its weight in the tree's view (0: not
// available) and each of the endpoint's count cells as last read, so
// that a change on one cell (a pick's, a release's) is written by
// re-reading that cell alone — the line the change has just written —
// rather than all of the endpoint's. 32 bytes: two to a cache line.
type loadMember struct {
	ep    *Endpoint
	n, w  int32
	cells [inflightCells]int32
}

// loadTreeMin is the smallest group that gets a loadTree: below it a scan
// costs less than the tree's locking and upkeep (measured: a 2-member
// group's wlc pick takes 140 ns by scan, 250 ns by tree).
var loadTreeMin = 32

// loadNode is one range of members: the least loaded (leftmost of equals;
// -1 when none is available), how many share its load, and that load
// (n / w) — carried in the node, so that fixing a path compares nodes
// without reading the members. 16 bytes, four to a cache line: in-flight
// counts and weights (at most config.MaxInstanceWeight) fit 32 bits, and
// their cross products are taken in 64. A range with no available member is
// emptyNode: load 1/0, which the cross-multiplication orders after every
// real load (1·w > n·0) and level with another empty one (0 = 0), so cmp
// needs no branch for it.
type loadNode struct {
	best int32
	ties int32
	n, w int32
}

// emptyNode is the node of a range with no available member.
var emptyNode = loadNode{best: -1, n: 1}

// cmp orders two loads (emptyNode is heavier than any real one).
func (a loadNode) cmp(b loadNode) int {
	l, r := int64(a.n)*int64(b.w), int64(b.n)*int64(a.w)
	switch {
	case l < r:
		return -1
	case l > r:
		return 1
	}
	return 0
}

// loadSlot is one tree an endpoint's in-flight count is written to.
type loadSlot struct {
	t *loadTree
	i int32
}

// noteLoad writes an endpoint's new in-flight count to its trees.
func noteLoad(ts []loadSlot) {
	for _, s := range ts {
		s.t.mu.Lock()
		s.t.setLoad(int(s.i))
		s.t.mu.Unlock()
	}
}

func newLoadTree(g *group, unit bool) *loadTree {
	size := 1
	for size < len(g.members) {
		size <<= 1
	}
	t := &loadTree{unit: unit, size: size, m: make([]loadMember, len(g.members)), node: make([]loadNode, 2*size)}
	for i := range t.node {
		t.node[i] = emptyNode
	}
	for i := range g.members {
		t.m[i].ep = g.members[i].ep
	}
	return t
}

// cmp orders members a and b by load (-1 stands for no member, heavier than any).
func (t *loadTree) cmp(a, b int32) int { return t.leaf(a).cmp(t.leaf(b)) }

func combine(l, r loadNode) loadNode {
	switch l.cmp(r) {
	case -1:
		return l
	case 1:
		return r
	}
	l.ties += r.ties
	return l
}

// leaf is member i alone (i < 0 or unavailable: the empty node).
func (t *loadTree) leaf(i int32) loadNode {
	if i >= 0 && t.m[i].w > 0 {
		return loadNode{i, 1, t.m[i].n, t.m[i].w}
	}
	return emptyNode
}

// setLoad re-reads member i's in-flight count and fixes the path to the root (t.mu held).
func (t *loadTree) setLoad(i int) {
	t.setRecord(i)
	t.fixLeaf(i)
}

// setCellLoad is setLoad re-reading cell k of member i's count alone: a
// change on that cell is being written, and each other cell's own
// changes re-read that cell when they are written.
func (t *loadTree) setCellLoad(i, k int) {
	t.setCell(i, k, int32(t.m[i].ep.load[k].n.Load()))
	t.fixLeaf(i)
}

// fixLeaf writes member i's record, just changed, to its leaf and the
// path above it (t.mu held).
func (t *loadTree) fixLeaf(i int) {
	if t.pend == int32(i)+1 {
		t.pend = 0 // this write is also the pending one's
		if t.m[i].n == t.pendN {
			return // back to what the leaf holds (an acquire and its release)
		}
	}
	t.writeLeaf(i)
}

// writeLeaf makes member i's leaf its record and fixes the path above it
// (t.mu held).
func (t *loadTree) writeLeaf(i int) {
	if nd := t.leaf(int32(i)); t.node[t.size+i] != nd {
		t.node[t.size+i] = nd
		t.fixUp(i)
	}
}

// setRecord re-reads member i's in-flight count, every cell, into its record alone (t.mu held).
func (t *loadTree) setRecord(i int) {
	m := &t.m[i]
	var n int32
	for k := range m.cells {
		m.cells[k] = int32(m.ep.load[k].n.Load())
		n += m.cells[k]
	}
	t.setN(i, n)
}

// setCell records v as cell k of member i's count, in its record alone (t.mu held).
func (t *loadTree) setCell(i, k int, v int32) {
	m := &t.m[i]
	n := m.n + v - m.cells[k]
	m.cells[k] = v
	t.setN(i, n)
}

// setN makes n member i's in-flight count, in its record alone (t.mu held).
func (t *loadTree) setN(i int, n int32) {
	m := &t.m[i]
	if m.w > 0 {
		t.sum += int64(n - m.n)
	}
	m.n = n
}

// flush writes the pending leaf and its path, if any (t.mu held).
func (t *loadTree) flush() {
	if p := t.pend; p > 0 {
		t.pend = 0
		t.writeLeaf(int(p) - 1)
	}
}

// fixUp recomputes the nodes above member i's leaf, up to the first that
// does not change (t.mu held): every node above equals the combination
// of its children (see pend), so a node that does not change leaves its
// ancestors as they were computed.
func (t *loadTree) fixUp(i int) {
	k := t.size + i
	nodes := t.node
	for k >>= 1; k >= 1; k >>= 1 {
		l, r := &nodes[2*k], &nodes[2*k+1]
		nd := *l
		if ln, rn := int64(l.n)*int64(r.w), int64(r.n)*int64(l.w); ln > rn {
			nd = *r
		} else if ln == rn {
			nd.ties += r.ties
		}
		if p := &nodes[k]; nd != *p {
			*p = nd
			continue
		}
		return // a node carries its load: nothing above can change
	}
}

// noteRelease writes cell k of member i's count, just taken back by a
// release, to the tree: lock-free unless another release is still
// waiting in rel (see rel).
func (t *loadTree) noteRelease(i int32, k uint32) {
	if p := t.rel.Swap(i*inflightCells + int32(k) + 1); p != 0 {
		t.mu.Lock()
		t.setRel(p)
		t.mu.Unlock()
	}
}

// setRel writes the release p (rel's value, not 0) to the tree (t.mu held).
func (t *loadTree) setRel(p int32) {
	p--
	t.setCellLoad(int(p/inflightCells), int(p%inflightCells))
}

// drain writes the release waiting in rel, if any (t.mu held).
func (t *loadTree) drain() {
	if t.rel.Load() != 0 {
		if p := t.rel.Swap(0); p != 0 {
			t.setRel(p)
		}
	}
}

// sync makes the tree hold v's weights and the current in-flight counts,
// every path fixed (t.mu held).
func (t *loadTree) sync(v *view) {
	t.drain()
	if t.resync.Load() {
		t.resync.Store(false)
		t.v = nil
	}
	if t.v == v {
		t.flush()
		return
	}
	t.v, t.sum, t.pend = v, 0, 0
	for i := range t.m {
		w := int32(0)
		if v.avail[i] && v.weights[i] > 0 {
			w = int32(v.weights[i])
			if t.unit {
				w = 1
			}
		}
		m := &t.m[i]
		m.w, m.n = w, 0
		t.setRecord(i)
		t.node[t.size+i] = t.leaf(int32(i))
	}
	for k := t.size - 1; k >= 1; k-- {
		t.node[k] = combine(t.node[2*k], t.node[2*k+1])
	}
}

// kthTie is the k-th (0-based, member order) of the root's least-loaded members.
func (t *loadTree) kthTie(k int) int {
	target := t.node[1]
	j := 1
	for j < t.size {
		l := t.node[2*j]
		lt := 0
		if l.best >= 0 && l.cmp(target) == 0 {
			lt = int(l.ties)
		}
		if k < lt {
			j = 2 * j
		} else {
			k -= lt
			j = 2*j + 1
		}
	}
	return j - t.size
}

// firstTie is the first member at or after from, wrapping around, whose load
// equals target's and for which ok holds (nil: any); -1 if none.
func (t *loadTree) firstTie(from int, target int32, ok func(int) bool) int {
	tk := t.leaf(target)
	if ok == nil && target == t.node[1].best {
		if i := t.firstLeast(from, t.node[1]); i >= 0 {
			return i
		}
		return int(t.node[1].best) // wrapped around: the leftmost least loaded
	}
	if i := t.find(1, 0, t.size, from, tk, ok); i >= 0 || from == 0 {
		return i
	}
	return t.find(1, 0, t.size, 0, tk, ok)
}

// firstLeast is the first member at or after from whose load is least's,
// the root's (so a node holds such a member iff its own load is least's;
// the root must hold an available member); -1 if none. Iterative: up from from's leaf to the first right sibling
// holding one, then down its leftmost path to it.
func (t *loadTree) firstLeast(from int, least loadNode) int {
	nodes := t.node
	k := t.size + from
	if nodes[k].cmp(least) == 0 {
		return from
	}
	for ; k > 1; k >>= 1 {
		if k&1 == 0 && nodes[k+1].cmp(least) == 0 {
			k++
			for k < t.size {
				if k *= 2; nodes[k].cmp(least) != 0 {
					k++
				}
			}
			return k - t.size
		}
	}
	return -1
}

func (t *loadTree) find(k, lo, hi, from int, target loadNode, ok func(int) bool) int {
	nd := t.node[k]
	if hi <= from || nd.best < 0 || nd.cmp(target) > 0 {
		return -1
	}
	if k >= t.size {
		if i := k - t.size; nd.cmp(target) == 0 && (ok == nil || ok(i)) {
			return i
		}
		return -1
	}
	mid := (lo + hi) / 2
	if i := t.find(2*k, lo, mid, from, target, ok); i >= 0 {
		return i
	}
	return t.find(2*k+1, mid, hi, from, target, ok)
}

// leastOK is the least-loaded member of node k's range for which ok holds
// (leftmost of equals); -1 if none. It descends only below members ok
// rejects: O(rejected × log n).
func (t *loadTree) leastOK(k int, ok func(int) bool) int32 {
	b := t.node[k].best
	switch {
	case b < 0:
		return -1
	case ok(int(b)):
		return b
	case k >= t.size:
		return -1
	}
	l, r := t.leastOK(2*k, ok), t.leastOK(2*k+1, ok)
	if t.cmp(r, l) < 0 {
		return r
	}
	return l
}

// firstBelow is the first member (in member order) with fewer than limit in
// flight for which ok holds (nil: any); -1 if none. For unit trees only.
func (t *loadTree) firstBelow(k int, limit int64, ok func(int) bool) int {
	if ok == nil {
		return t.firstBelowAny(limit)
	}
	nd := t.node[k]
	b := nd.best
	if b < 0 || int64(nd.n) >= limit {
		return -1
	}
	if k >= t.size {
		if ok == nil || ok(int(b)) {
			return int(b)
		}
		return -1
	}
	if i := t.firstBelow(2*k, limit, ok); i >= 0 {
		return i
	}
	return t.firstBelow(2*k+1, limit, ok)
}

// firstBelowAny is firstBelow(1, limit, nil), iteratively: a range holds a
// member below limit iff its least loaded one is, so the walk goes left
// whenever the left half holds one.
func (t *loadTree) firstBelowAny(limit int64) int {
	nodes := t.node
	if nd := nodes[1]; nd.best < 0 || int64(nd.n) >= limit {
		return -1
	}
	k := 1
	for k < t.size {
		k *= 2
		if l := nodes[k]; l.best < 0 || int64(l.n) >= limit {
			k++
		}
	}
	return k - t.size
}

// tieRule is how the least-loaded pickers choose among equally loaded members.
type tieRule uint8

const (
	// tieSchedule (wlc): the first tied member the view's smooth-WRR
	// schedule yields from the stripe's cursor, tried scheduleTries
	// positions; then the first tied member after the last one looked at.
	tieSchedule tieRule = iota
	// tieRotate (leastconn): the first tied member from a rotating start.
	tieRotate
	// tieRandom (wlc-random): a uniformly random tied member (on retries:
	// the first tied member from a random start).
	tieRandom
)

// scheduleTries bounds how many schedule positions a wlc tie-break reads.
// With every member tied (an idle cluster) the first one is taken: wlc then
// walks the smooth-WRR sequence exactly.
const scheduleTries = 8

// leastLoad is wlc, wlc-random and leastconn: the available, untried member
// with the least in-flight / weight, ties broken by the rule.
type leastLoad struct{ tie tieRule }

func (p *leastLoad) pick(s *Selection, g *group, v *view) int {
	t := g.load
	if t == nil || !t.live.Load() {
		return p.scan(s, g, v)
	}
	t.mu.Lock()
	t.sync(v)
	return t.acquire(s, p.treePick(s, g, v, t))
}

// treePick is leastLoad's pick from the live tree t (t.mu held, t synced with v).
func (p leastLoad) treePick(s *Selection, g *group, v *view, t *loadTree) int {
	if s.nTried == 0 {
		root := t.node[1]
		switch {
		case root.best < 0:
			return -1
		case root.ties == 1:
			return int(root.best)
		case p.tie == tieRandom:
			k := int(s.rand() % uint64(root.ties))
			if int(root.ties) == len(t.m) {
				return k // every member tied (an idle group): the k-th is member k
			}
			return t.kthTie(k)
		case p.tie == tieRotate:
			return t.firstTie(int(g.rr.Add(1)%uint64(len(g.members))), root.best, nil)
		}
		return t.scheduledTie(s, v, root)
	}
	ok := func(i int) bool { return !s.isTried(g.members[i].ep) }
	best := t.leastOK(1, ok)
	if best < 0 {
		return -1
	}
	if j := t.firstTie(int(best)+1, best, ok); j < 0 || j == int(best) {
		return int(best) // the only one at that load: no tie-break state moves
	}
	switch p.tie {
	case tieRandom:
		return t.firstTie(int(s.rand()%uint64(len(g.members))), best, ok)
	case tieRotate:
		return t.firstTie(int(g.rr.Add(1)%uint64(len(g.members))), best, ok)
	}
	return p.scheduled(s, v, best, func(i int) bool { return ok(i) && t.cmp(int32(i), best) == 0 },
		func(from int) int { return t.firstTie(from, best, ok) })
}

// scheduledTie is scheduled for a first attempt on the tree (t.mu held,
// root = t.node[1], tied with another member): a tie is a leaf at root's
// load, read from the leaf itself.
func (t *loadTree) scheduledTie(s *Selection, v *view, root loadNode) int {
	sc := v.sched
	if len(sc.order) == 0 {
		return int(root.best)
	}
	if int(root.ties) == v.nAvail {
		// Every available member is tied (an idle group): the schedule
		// holds only available members, so its next one is a tie.
		return int(sc.next(s.stripe))
	}
	var i int
	for range scheduleTries {
		// From the record, not the leaf: the acquire reads that line next.
		if i = int(sc.next(s.stripe)); t.leaf(int32(i)).cmp(root) == 0 {
			return i
		}
	}
	if i := t.firstLeast(i, root); i >= 0 {
		return i
	}
	return int(root.best) // wrapped around: the leftmost least loaded
}

// scheduled is the wlc tie-break: the first tied member (isTie) among the
// next scheduleTries positions of the view's schedule, else after(member
// at the last position).
func (p leastLoad) scheduled(s *Selection, v *view, best int32, isTie func(int) bool, after func(int) int) int {
	sc := v.sched
	if len(sc.order) == 0 {
		return int(best)
	}
	var i int
	for range scheduleTries {
		if i = int(sc.next(s.stripe)); isTie(i) {
			return i
		}
	}
	return after(i)
}

// scan is the least-loaded pick by a scan of every member: the same choice
// as the tree's, for a selection on a table that is no longer (or not yet)
// the current one.
func (p leastLoad) scan(s *Selection, g *group, v *view) int {
	ok := func(i int) bool { return v.avail[i] && v.weights[i] > 0 && !s.isTried(g.members[i].ep) }
	best, ties, bn, bw := leastScan(g, v, ok)
	if ties <= 1 {
		return best
	}
	isTie := func(i int) bool { return ok(i) && g.members[i].ep.InFlight()*bw == bn*int64(v.weights[i]) }
	after := func(from int) int { return firstFrom(len(g.members), from, isTie, best) }
	switch {
	case p.tie == tieRandom && s.nTried == 0:
		k := int(s.rand() % uint64(ties))
		for i := range g.members {
			if isTie(i) {
				if k == 0 {
					return i
				}
				k--
			}
		}
		return best
	case p.tie == tieRandom:
		return after(int(s.rand() % uint64(len(g.members))))
	case p.tie == tieRotate:
		return after(int(g.rr.Add(1) % uint64(len(g.members))))
	}
	return p.scheduled(s, v, int32(best), isTie, after)
}

// leastScan finds, among the members ok accepts, the least loaded (the
// first of equals), how many share its load, and that load (bn / bw).
func leastScan(g *group, v *view, ok func(int) bool) (best, ties int, bn, bw int64) {
	best = -1
	for i := range g.members {
		if !ok(i) {
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
	return best, ties, bn, bw
}

// firstFrom is the first i of 0..n-1 at or after from, wrapping around,
// for which want holds; otherwise.
func firstFrom(n, from int, want func(int) bool, otherwise int) int {
	for k := range n {
		if i := (from + k) % n; want(i) {
			return i
		}
	}
	return otherwise
}

// firstAvail is HAProxy's "first": the first available member (in
// configuration order) below max_conns_per_host in flight, else the first
// available one.
type firstAvail struct{ limit int64 }

func (p *firstAvail) pick(s *Selection, g *group, v *view) int {
	t := g.load
	ok := func(i int) bool { return v.avail[i] && !s.isTried(g.members[i].ep) }
	if t == nil || !t.live.Load() {
		return p.scan(g, ok)
	}
	var okTree func(int) bool
	if s.nTried > 0 {
		okTree = ok
	}
	t.mu.Lock()
	t.sync(v)
	i := -1
	if p.limit > 0 {
		i = t.firstBelow(1, p.limit, okTree)
	}
	if i < 0 {
		i = t.firstBelow(1, math.MaxInt64, okTree)
	}
	return t.acquire(s, i)
}

// acquire counts the pick of member i (-1: none) on s's stripe while the
// pick still holds t.mu, and unlocks it: the pick's tree walk and the
// acquire's path fix-up share one lock round trip, and no other pick sees
// the tree between them. Selection.take then does not count it again
// (s.acquired). An address other trees also track (another cluster lists
// it) has them updated after t.mu is released: two tree locks are never
// held together.
func (t *loadTree) acquire(s *Selection, i int) int {
	if i < 0 {
		t.mu.Unlock()
		return i
	}
	e := t.m[i].ep
	k := s.stripe & (inflightCells - 1)
	c := &e.load[k]
	n := c.n.Add(1)
	s.acquired = e
	if c.flags.Load()&cellDense != 0 {
		c.rec.copyCell(c, k) // a dense group of another cluster also holds the address
	}
	// Read after the count moved: a table swap that re-points the address
	// at new trees either shows here or re-reads the count itself. From
	// the cell just written: no other line of the endpoint is read.
	if c.solo.Load() == t {
		// The record now, the leaf and its path later (pend): by this
		// pick's release, which then undoes the record's change, or by
		// the next sync.
		t.flush() // none after a sync; kept so that one leaf at most is pending
		t.pendN = t.m[i].n
		t.setCell(i, int(k), int32(n))
		t.pend = int32(i) + 1
		t.mu.Unlock()
		return i
	}
	t.mu.Unlock()
	e.noteTrees()
	return i
}

// scan is firstAvail's pick among the members ok accepts, by a scan.
func (p firstAvail) scan(g *group, ok func(int) bool) int {
	fallback := -1
	for i := range g.members {
		if !ok(i) {
			continue
		}
		if p.limit <= 0 || g.members[i].ep.InFlight() < p.limit {
			return i
		}
		if fallback < 0 {
			fallback = i
		}
	}
	return fallback
}

// inFlightSum is Σ in-flight over v's available members: from the tree
// when it is live, else by a scan.
func (g *group) inFlightSum(v *view) int64 {
	if t := g.load; t != nil && t.live.Load() {
		t.mu.Lock()
		t.sync(v)
		n := t.sum
		t.mu.Unlock()
		return n
	}
	var sum int64
	for i := range g.members {
		if v.avail[i] {
			sum += g.members[i].ep.InFlight()
		}
	}
	return sum
}

// installLoadTrees makes t's trees live and points every endpoint at the
// trees holding it; the trees of the table it replaces (old, may be nil)
// stop being written and serving. Likewise for dense groups (loadRec):
// the old table's stop reading the records, the addresses of t's have
// their records kept, then t's read them. r.mu held.
func installLoadTrees(old, t *Table) {
	if old != nil {
		for _, c := range old.clusters {
			for _, g := range c.subs {
				if g.load != nil {
					g.load.live.Store(false)
				}
				g.dense.Store(false)
			}
		}
		for _, e := range old.endpoints {
			e.track(nil)
			e.setDense(false)
		}
	}
	if t == nil {
		return
	}
	slots := map[*Endpoint][]loadSlot{}
	for _, c := range t.clusters {
		for _, g := range c.subs {
			if c.needsDense() {
				for i := range g.members {
					g.members[i].ep.setDense(true)
				}
			}
			if g.load == nil {
				continue
			}
			for i := range g.members {
				e := g.members[i].ep
				slots[e] = append(slots[e], loadSlot{g.load, int32(i)})
			}
		}
	}
	for e, s := range slots {
		e.track(&s)
	}
	for _, c := range t.clusters {
		for _, g := range c.subs {
			if g.load != nil {
				// No lock: the request path takes the tree's mutex, a
				// config update never does. The next pick re-reads every count.
				g.load.resync.Store(true)
				g.load.live.Store(true)
			}
			if c.needsDense() {
				g.dense.Store(true)
			}
		}
	}
}

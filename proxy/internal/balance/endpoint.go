package balance

import (
	"math"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicelb/sluice/api/config"
)

// HealthState is an address's health as the proxy sees it.
type HealthState int32

const (
	// Normal takes traffic.
	Normal HealthState = iota
	// Checking was ejected by passive checks (fail_num consecutive request
	// failures) and is probed every check_interval until succ_num successes.
	Checking
	// Down failed fall consecutive always-on active probes; rise successes bring it back.
	Down
)

func (s HealthState) String() string {
	switch s {
	case Normal:
		return "NORMAL"
	case Checking:
		return "CHECKING"
	case Down:
		return "DOWN"
	}
	return "UNKNOWN"
}

// Override is an operator's runtime change to one address (HAProxy's
// "set weight" and "drain"). It applies to every cluster referencing the address.
type Override struct {
	// Weight replaces the configured weight when non-nil (0..config.MaxInstanceWeight).
	Weight *int `json:"weight,omitempty"`
	// Drain takes the address out of rotation (in-flight requests finish).
	Drain bool `json:"drain,omitempty"`
	// TTL clears the override after this long; 0 keeps it until ClearOverride.
	TTL time.Duration `json:"ttl,omitempty"`
}

type override struct {
	Override
	expires time.Time // zero: never
}

// healthRules is the health part of the policy of the first cluster (by
// name) referencing an address; an address shared by clusters with different
// health policies follows that one.
type healthRules struct {
	failNum, succNum int
	checkInterval    time.Duration
	active           bool
	interval         time.Duration
	timeout          time.Duration
	rise, fall       int
	probe            config.Probe
	slowStart        time.Duration
	floorPercent     int
	effFailNum       int // effective-weight demotion step divisor
}

// Endpoint is the runtime state of one backend address. It is shared by every
// table that references the address and survives table swaps. Safe for
// concurrent use.
type Endpoint struct {
	// Read by every Done, written rarely: one cache line shared by all cores.
	released    atomic.Bool
	consecFails atomic.Int32
	addr        netip.AddrPort
	reg         *Registry
	// rec is the address's compact load record (loadRec): its EWMA, and
	// a copy of its in-flight cells while cellDense is set. Set when the
	// endpoint is made, never changed.
	rec *loadRec
	// The least-load trees of the current table's groups holding the
	// address (nil: none); every in-flight change is written to them.
	trees atomic.Pointer[[]loadSlot]

	// The in-flight count, split over cache lines by stripe (see
	// Cluster.Start): picks on different cores do not pass one line back
	// and forth. InFlight sums the cells.
	load [inflightCells]cell

	// slot is the caller's (see Slot): read by every request, written
	// rarely, after the cells (the first line is full).
	slot atomic.Value

	mu          sync.Mutex
	rules       healthRules
	state       HealthState
	probeOK     int // consecutive probe successes while not Normal
	activeFails int // consecutive active probe failures while Normal
	ejectedAt   time.Time
	rampStart   time.Time // slow start began here; zero = no ramp
	ovr         *override
	effWeight   int    // effective weight (effective_weights); 0 = full
	baseWeight  int    // configured weight of the first member referencing it
	refs        int    // tables (current and pending) referencing it
	addrText    string // addr.String(), formatted once (every request logs it)
}

// Addr is the backend address; stable across table swaps.
func (e *Endpoint) Addr() netip.AddrPort { return e.addr }

// AddrString is Addr().String(), formatted when the endpoint was made, not
// per request.
func (e *Endpoint) AddrString() string { return e.addrText }

// Slot is a place for the caller to keep one value per address, read
// lock-free by every request: lbproxy keeps the address's connection pool
// there (forward.Pools.Cached), so a request finds it through the endpoint
// it picked instead of a map lookup, whose table with 1 000 addresses is
// mostly out of the caches. The endpoint never reads it.
func (e *Endpoint) Slot() *atomic.Value { return &e.slot }

// inflightCells is how many cache lines an endpoint's in-flight count is
// split over (a power of two).
const inflightCells = 4

// cell is one padded counter, with a copy of the endpoint's flags so that
// Done reads only the line it writes.
type cell struct {
	n     atomic.Int64
	flags atomic.Uint32 // cellReleased | cellFailing, the same in every cell
	// soloAt is the address's member index in solo.
	soloAt atomic.Int32
	// solo is the one load tree tracking the address, when exactly one
	// does (nil otherwise), the same in every cell: a tree's acquire and
	// the release read it from the line they have just written rather
	// than trees and its slice.
	solo atomic.Pointer[loadTree]
	// rec is the endpoint's rec, read from the line a pick or release
	// has just written rather than the endpoint's first.
	rec *loadRec
	_   [32]byte
}

// loadRec is what p2c-ewma and random(N) read of a candidate, in 32
// bytes rather than the endpoint's five lines (its first for the EWMA,
// four cells for the in-flight count): a draw of two candidates among
// 10 000 members missed 17 lines of D1 and 9.5 of a 1 MiB LL per pick in
// callgrind, most of them those ten. Records are allocated one by one as
// endpoints are made, so a table's are mostly adjacent, two to a line.
//
// ewma is the address's EWMA latency itself (float64 bits in ns, 0: no
// sample). cells[k] is a copy of load[k].n, kept while cellDense is set
// (the address is a member of a group that reads it: dense): every change
// of a cell is followed by copyCell, which stores the cell's value and
// re-reads the cell after its store, so at rest the copies equal the
// cells (see copyCell). The price: one locked instruction (copyCell's
// store) after every change of a dense address's count, two a request.
type loadRec struct {
	cells [inflightCells]atomic.Int32
	ewma  atomic.Uint64
	_     [8]byte
}

// inFlight is Σ cells: the endpoint's InFlight while cellDense is set.
func (r *loadRec) inFlight() int64 {
	return int64(r.cells[0].Load()) + int64(r.cells[1].Load()) + int64(r.cells[2].Load()) + int64(r.cells[3].Load())
}

// copyCell makes cells[k] equal c.n, c being cell k of the record's
// endpoint, just changed by the caller. Lock-free and exact at rest: a
// writer stores what it read of c.n, then re-reads c.n and leaves only
// when that is what it stored. So the last store to cells[k] is followed
// by its writer's re-read finding c.n equal to it, and any later change of
// c.n is followed by its own writer's store, which would come after that
// last one: at rest cells[k] = c.n. (A store, not a compare-and-swap: a
// stale store is repaired by the re-read of the writer that made it.)
func (r *loadRec) copyCell(c *cell, k uint32) {
	d := &r.cells[k&(inflightCells-1)]
	v := c.n.Load()
	for {
		d.Store(int32(v))
		w := c.n.Load()
		if w == v {
			return
		}
		v = w
	}
}

// work is p2c-ewma's cost of the record's endpoint before its weight:
// EWMA latency (whole ns, as Endpoint.EWMALatency gives it; 1 without a
// sample) × (in-flight + 1). The cost is work / weight; two costs are
// compared by cross-multiplying (cheaper), without the two divisions,
// the slowest instructions of a p2c pick.
func (r *loadRec) work(inFlight int64) float64 {
	l := float64(time.Duration(math.Float64frombits(r.ewma.Load())))
	if l <= 0 {
		l = 1
	}
	return l * float64(inFlight+1)
}

// cheaper reports whether work a at weight wa costs less than work b at
// weight wb (a / wa < b / wb; weights are positive).
func cheaper(a float64, wa int, b float64, wb int) bool {
	return a*float64(wb) < b*float64(wa)
}

const (
	cellReleased uint32 = 1 << iota // no table references the address
	cellFailing                     // consecFails is not zero
	cellTracked                     // trees is set: in-flight changes are written to load trees
	cellDense                       // rec.cells copies the cells (a dense group holds the address)
)

// setFlags and clearFlags change f in every cell (rare: a release, the
// first failure of a run, the success that ends it).
func (e *Endpoint) setFlags(f uint32) {
	for i := range e.load {
		e.load[i].flags.Or(f)
	}
}

func (e *Endpoint) clearFlags(f uint32) {
	for i := range e.load {
		e.load[i].flags.And(^f)
	}
}

// setReleased records whether any table references the address (e.mu held).
func (e *Endpoint) setReleased(v bool) {
	e.released.Store(v)
	if v {
		e.setFlags(cellReleased)
	} else {
		e.clearFlags(cellReleased)
	}
}

// InFlight is the number of picks not yet reported with Done.
func (e *Endpoint) InFlight() int64 {
	var n int64
	for i := range e.load {
		n += e.load[i].n.Load()
	}
	return n
}

// acquire counts one pick on stripe's cell; Pick.Done takes it back with
// release. Both report whether load trees track the address or a dense
// group reads its record: the caller then calls noteLoad. (Calling it
// here would keep them from being inlined into the pick and Done: a call
// costs most of the inlining budget.)
// The flag is read from the cell just written: an address no load tree
// tracks pays no second cache line.
func (e *Endpoint) acquire(stripe uint32) (tracked bool) {
	c := &e.load[stripe&(inflightCells-1)]
	c.n.Add(1)
	return c.flags.Load()&(cellTracked|cellDense) != 0
}

// release takes back one pick counted on c (one of e.load); see acquire.
func (e *Endpoint) release(c *cell) (tracked bool) {
	c.n.Add(-1)
	return c.flags.Load()&(cellTracked|cellDense) != 0
}

// noteRelease is noteLoad after a release on c, cell k of e.load: through c's solo tree
// when one tracks the address alone (c's line is the one just written),
// lock-free (loadTree.noteRelease), else through trees. The index is
// checked against the tree's members (fixed when it was made): a track
// running alongside (solo and soloAt are two words) sends the update the
// long way.
func (e *Endpoint) noteRelease(c *cell, k uint32) {
	f := c.flags.Load()
	if f&cellDense != 0 {
		c.rec.copyCell(c, k)
		if f&cellTracked == 0 {
			return
		}
	}
	if t := c.solo.Load(); t != nil {
		if i := c.soloAt.Load(); int(i) < len(t.m) && t.m[i].ep == e {
			t.noteRelease(i, k)
			return
		}
	}
	e.noteTrees()
}

// noteLoad writes the in-flight count, just changed on cell k, to the
// address's record (cellDense) and the trees tracking it.
func (e *Endpoint) noteLoad(k uint32) {
	c := &e.load[k&(inflightCells-1)]
	f := c.flags.Load()
	if f&cellDense != 0 {
		c.rec.copyCell(c, k)
	}
	if f&cellTracked != 0 {
		e.noteTrees()
	}
}

// noteTrees writes the in-flight count to the trees tracking the address.
func (e *Endpoint) noteTrees() {
	if ts := e.trees.Load(); ts != nil {
		noteLoad(*ts)
	}
}

// setDense starts (on) or stops keeping rec.cells a copy of the cells
// (r.mu held). Starting copies every cell after the flag is set: a change
// made before it is read here, one made after copies itself.
func (e *Endpoint) setDense(on bool) {
	if !on {
		e.clearFlags(cellDense)
		return
	}
	e.setFlags(cellDense)
	for k := range e.load {
		e.rec.copyCell(&e.load[k], uint32(k))
	}
}

// track points the address at the load trees holding it (nil: none).
func (e *Endpoint) track(ts *[]loadSlot) {
	var solo *loadTree
	var at int32
	if ts != nil && len(*ts) == 1 {
		solo, at = (*ts)[0].t, (*ts)[0].i
	}
	for i := range e.load {
		e.load[i].soloAt.Store(at)
		e.load[i].solo.Store(solo)
	}
	e.trees.Store(ts)
	if ts != nil {
		e.setFlags(cellTracked)
	} else {
		e.clearFlags(cellTracked)
	}
}

// Health returns the current health state.
func (e *Endpoint) Health() HealthState {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.state
}

// EWMALatency is the smoothed response time (0 before the first sample).
func (e *Endpoint) EWMALatency() time.Duration {
	return time.Duration(math.Float64frombits(e.rec.ewma.Load()))
}

// memberState is a consistent read of what the picker needs.
type memberState struct {
	health     HealthState
	ejectedAt  time.Time
	drained    bool
	weight     int       // dynamic weight (override, effective, slow start applied)
	static     bool      // weight equals the configured weight and will not change by itself
	until      time.Time // the state changes by itself at this time (zero: never)
	overridden bool
	progress   float64 // slow-start progress 0..1
}

// read computes the member's view for a configured weight at now.
func (e *Endpoint) read(configured int, now time.Time) memberState {
	e.mu.Lock()
	defer e.mu.Unlock()
	ms := memberState{health: e.state, ejectedAt: e.ejectedAt, static: true, progress: 1}
	w := configured
	if o := e.ovr; o != nil {
		if !o.expires.IsZero() && !now.Before(o.expires) {
			e.ovr = nil
		} else {
			ms.overridden = true
			ms.until = o.expires
			if o.Weight != nil {
				w = *o.Weight
			}
			ms.drained = o.Drain
			if w != configured || o.Drain {
				ms.static = false
			}
		}
	}
	if e.effWeight > 0 && e.baseWeight > 0 && e.effWeight < e.baseWeight && w > 0 {
		w = max(1, w*e.effWeight/e.baseWeight)
		ms.static = false
	}
	if !e.rampStart.IsZero() && e.rules.slowStart > 0 && w > 0 {
		el := now.Sub(e.rampStart)
		if el < e.rules.slowStart {
			ms.progress = float64(el) / float64(e.rules.slowStart)
			floor := float64(max(1, e.rules.floorPercent)) / 100
			f := floor + (1-floor)*ms.progress
			w = max(1, int(float64(w)*f))
			ms.static = false
			end := e.rampStart.Add(e.rules.slowStart)
			if ms.until.IsZero() || end.Before(ms.until) {
				ms.until = end
			}
		} else {
			e.rampStart = time.Time{}
		}
	}
	ms.weight = w
	return ms
}

// success/failure bookkeeping for passive health. Returns true when the
// health state changed.
func (e *Endpoint) reportFailure(now time.Time) bool {
	n := e.consecFails.Add(1)
	if n == 1 {
		e.setFlags(cellFailing)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	changed := false
	if e.rules.effFailNum > 0 && e.baseWeight > 0 {
		cur := e.effWeight
		if cur == 0 {
			cur = e.baseWeight
		}
		step := max(1, e.baseWeight/e.rules.effFailNum)
		nw := max(1, cur-step)
		if nw != cur {
			e.effWeight = nw
			changed = true
		}
	}
	if e.state == Normal && e.rules.failNum > 0 && int(n) >= e.rules.failNum {
		e.state = Checking
		e.ejectedAt = now
		if e.reg != nil {
			e.reg.ejections.Add(1)
		}
		e.probeOK = 0
		e.rampStart = time.Time{}
		e.poke()
		changed = true
	}
	return changed
}

// reportSuccess resets the failure run, reading only the pick's own cell
// unless a run is going on; the lock is taken only when effective weights
// are in use.
func (e *Endpoint) reportSuccess(c *cell, r *Registry) bool {
	if c.flags.Load()&cellFailing != 0 {
		e.endFailureRun()
	}
	if r == nil || !r.effActive.Load() {
		return false
	}
	return e.recoverWeight()
}

// endFailureRun zeroes consecFails; a failure counted meanwhile keeps the
// flag set.
func (e *Endpoint) endFailureRun() {
	e.consecFails.Store(0)
	e.clearFlags(cellFailing)
	if e.consecFails.Load() != 0 {
		e.setFlags(cellFailing)
	}
}

// recoverWeight raises a demoted effective weight by one step.
func (e *Endpoint) recoverWeight() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.effWeight > 0 && e.effWeight < e.baseWeight {
		e.effWeight++
		if e.effWeight >= e.baseWeight {
			e.effWeight = 0
		}
		return true
	}
	return false
}

// probeResult applies one active probe outcome; returns true when the health
// state changed. This is the one place (with reportFailure) that flips state.
func (e *Endpoint) probeResult(ok bool, now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch e.state {
	case Normal:
		if !e.rules.active {
			return false
		}
		if ok {
			e.activeFails = 0
			return false
		}
		e.activeFails++
		if e.activeFails >= max(1, e.rules.fall) {
			e.state = Down
			e.probeOK = 0
			e.rampStart = time.Time{}
			return true
		}
		return false
	default:
		if !ok {
			e.probeOK = 0
			return false
		}
		e.probeOK++
		need := max(1, e.rules.succNum)
		if e.state == Down {
			need = max(1, e.rules.rise)
		}
		if e.probeOK < need {
			return false
		}
		e.state = Normal
		e.probeOK, e.activeFails = 0, 0
		e.endFailureRun()
		e.ejectedAt = time.Time{}
		if e.rules.slowStart > 0 {
			e.rampStart = now
		}
		return true
	}
}

// needsProbe says whether a probe loop must run for the address, and its period.
func (e *Endpoint) needsProbe() (bool, time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.released.Load() {
		return false, 0
	}
	if e.state == Checking && !e.rules.active {
		return true, e.rules.checkInterval
	}
	if e.rules.active {
		if e.state == Checking {
			return true, min(e.rules.checkInterval, e.rules.interval)
		}
		return true, e.rules.interval
	}
	return false, 0
}

// poke wakes the registry's probe manager; e.mu held or not, it never blocks.
func (e *Endpoint) poke() {
	if e.reg != nil {
		e.reg.pokeManager()
	}
}

// observeLatency folds one response time into the EWMA (weight 0.3 for the new sample).
func (e *Endpoint) observeLatency(d time.Duration) {
	if d <= 0 {
		return
	}
	for {
		old := e.rec.ewma.Load()
		prev := math.Float64frombits(old)
		next := float64(d)
		if prev > 0 {
			next = 0.7*prev + 0.3*float64(d)
		}
		if e.rec.ewma.CompareAndSwap(old, math.Float64bits(next)) {
			return
		}
	}
}

package balance

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/probe"
)

// ProbeFunc runs one active health check against addr; nil error is healthy.
// It must honour ctx and return within timeout.
type ProbeFunc func(ctx context.Context, addr netip.AddrPort, p config.Probe, timeout time.Duration) error

// RegistryOptions configure a Registry. Every field is optional.
type RegistryOptions struct {
	// Now is the clock (health transitions, slow start, override TTLs). nil → time.Now.
	Now func() time.Time
	// Rand returns uniformly random 64-bit values. nil → math/rand/v2. It
	// must be safe for concurrent use.
	Rand func() uint64
	// Probe is the active health check. nil → probe.CheckPolicy (real http,
	// https, tcp and tls checks by the rules of package probe, the ones
	// lbagent uses). Probes only run while Run is running:
	// without Run, a CHECKING address stays excluded until a new table or an
	// operator override changes it.
	Probe ProbeFunc
	// Logger receives state transitions and recovered probe panics. nil → slog.Default().
	Logger *slog.Logger
	// MaxProbes bounds the active probes in flight (≤ 0 → probe.DefaultMaxInFlight):
	// thousands of unreachable instances each holding a probe until its
	// timeout cannot starve the probes of the healthy ones.
	MaxProbes int
	// StickySecret is the HMAC key signing sticky cookies. Empty → a random
	// per-process key (cookies then do not survive restarts or span proxies).
	StickySecret []byte
}

// Registry owns the per-address runtime state that survives table swaps. One
// per proxy process. Safe for concurrent use.
type Registry struct {
	now  func() time.Time
	rand func() uint64
	// ownRand: RegistryOptions.Rand was given (the tests' seeded sources);
	// selections draw from it rather than from their stripe (Selection.rand).
	ownRand bool
	probe   ProbeFunc
	limit   *probe.Limiter
	log     *slog.Logger
	secret  []byte

	// epoch changes whenever any address's availability or dynamic weight
	// may have changed; cached per-sub-cluster views are rebuilt on mismatch.
	epoch     atomic.Uint64
	effActive atomic.Bool // some cluster uses effective_weights

	// stripes is the number of smooth-WRR cursors per schedule and of
	// active-selection counters (a power of two; see Cluster.Start).
	stripes int

	// Proxy-wide retry budget accounting: live selections, counted per
	// stripe so that concurrent requests do not share a cache line, and
	// retry picks not yet Done (written only by retries).
	active  []cursor
	_       [64]byte
	retries atomic.Int64
	_       [56]byte
	// ejections counts passive ejections (NORMAL → CHECKING) since start.
	ejections atomic.Uint64

	mu        sync.Mutex
	endpoints map[netip.AddrPort]*Endpoint
	progress  map[progressKey]*schedule // smooth-WRR progress per (cluster, sub-cluster)
	current   *Table
	stored    bool // a table was stored at least once (slow start applies to later arrivals)
	wake      chan struct{}
}

type progressKey struct{ cluster, subcluster string }

// NewRegistry returns an empty registry.
func NewRegistry(o RegistryOptions) *Registry {
	r := &Registry{
		now: o.Now, rand: o.Rand, probe: o.Probe, log: o.Logger, limit: probe.NewLimiter(o.MaxProbes),
		endpoints: map[netip.AddrPort]*Endpoint{},
		progress:  map[progressKey]*schedule{},
		wake:      make(chan struct{}, 1),
		stripes:   stripeCount(runtime.GOMAXPROCS(0)),
	}
	r.active = make([]cursor, r.stripes)
	r.ownRand = o.Rand != nil
	if r.now == nil {
		r.now = time.Now
	}
	if r.rand == nil {
		r.rand = rand.Uint64
	}
	if r.probe == nil {
		r.probe = probe.CheckPolicy
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	r.secret = o.StickySecret
	if len(r.secret) == 0 {
		r.secret = make([]byte, 32)
		for i := range r.secret {
			r.secret[i] = byte(rand.Uint32())
		}
	}
	return r
}

func (r *Registry) bump() { r.epoch.Add(1) }

func (r *Registry) pokeManager() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Endpoint returns the state of addr, or nil if no table references it.
func (r *Registry) Endpoint(addr netip.AddrPort) *Endpoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.endpoints[addr]
}

// endpoint returns (creating) the state of addr for Build.
func (r *Registry) endpoint(addr netip.AddrPort) *Endpoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.endpoints[addr]; e != nil {
		return e
	}
	e := newEndpoint(addr, r)
	if r.stored {
		// Addresses that appear after the first table ramp up (slow start).
		e.rampStart = r.now()
	}
	r.endpoints[addr] = e
	return e
}

// newEndpoint is the state of a new address (no table references it yet).
func newEndpoint(addr netip.AddrPort, r *Registry) *Endpoint {
	e := &Endpoint{addr: addr, addrText: addr.String(), reg: r, rec: new(loadRec)}
	for k := range e.load {
		e.load[k].rec = e.rec
	}
	return e
}

// SetOverride sets an operator override on addr (an address some table
// references). It replaces any previous override of addr.
func (r *Registry) SetOverride(addr netip.AddrPort, o Override) error {
	if o.Weight != nil && (*o.Weight < 0 || *o.Weight > config.MaxInstanceWeight) {
		return fmt.Errorf("set override %s: weight %d: must be 0..%d", addr, *o.Weight, config.MaxInstanceWeight)
	}
	if o.TTL < 0 {
		return fmt.Errorf("set override %s: ttl %s: must not be negative", addr, o.TTL)
	}
	e := r.Endpoint(addr)
	if e == nil {
		return fmt.Errorf("set override %s: %w", addr, ErrUnknownAddress)
	}
	ov := &override{Override: o}
	if o.Weight != nil {
		w := *o.Weight
		ov.Weight = &w
	}
	if o.TTL > 0 {
		ov.expires = r.now().Add(o.TTL)
	}
	e.mu.Lock()
	e.ovr = ov
	e.mu.Unlock()
	r.bump()
	r.log.Info("balance: override set", "addr", addr.String(), "drain", o.Drain, "ttl_seconds", o.TTL.Seconds())
	return nil
}

// ClearOverride removes addr's override; clearing none is not an error.
func (r *Registry) ClearOverride(addr netip.AddrPort) error {
	e := r.Endpoint(addr)
	if e == nil {
		return fmt.Errorf("clear override %s: %w", addr, ErrUnknownAddress)
	}
	e.mu.Lock()
	e.ovr = nil
	e.mu.Unlock()
	r.bump()
	return nil
}

// Overrides lists the active overrides (expired ones are dropped).
func (r *Registry) Overrides() map[netip.AddrPort]Override {
	now := r.now()
	out := map[netip.AddrPort]Override{}
	r.mu.Lock()
	eps := make([]*Endpoint, 0, len(r.endpoints))
	for _, e := range r.endpoints {
		eps = append(eps, e)
	}
	r.mu.Unlock()
	for _, e := range eps {
		e.mu.Lock()
		if o := e.ovr; o != nil {
			if o.expires.IsZero() || now.Before(o.expires) {
				out[e.addr] = o.Override
			}
		}
		e.mu.Unlock()
	}
	return out
}

// setCurrent records which addresses t references: addresses no longer
// referenced are released (removed once their in-flight requests finish; their
// probe loops stop).
func (r *Registry) setCurrent(t *Table) {
	r.mu.Lock()
	old := r.current
	r.current = t
	r.stored = true
	if t != nil {
		for _, e := range t.endpoints {
			if r.endpoints[e.addr] == nil {
				r.endpoints[e.addr] = e // deleted while the table was being built
			}
			e.mu.Lock()
			e.refs++
			e.setReleased(false)
			e.mu.Unlock()
		}
		r.effActive.Store(t.effWeights)
	}
	if old != nil {
		for _, e := range old.endpoints {
			e.mu.Lock()
			e.refs--
			if e.refs <= 0 {
				e.setReleased(true)
			}
			e.mu.Unlock()
		}
	}
	installLoadTrees(old, t)
	r.sweepLocked()
	r.mu.Unlock()
	r.bump()
	r.pokeManager()
}

// sweepLocked drops released addresses with nothing in flight, and
// addresses created by a Build whose table was never stored.
func (r *Registry) sweepLocked() {
	for a, e := range r.endpoints {
		e.mu.Lock()
		gone := e.refs <= 0 && e.InFlight() == 0
		e.mu.Unlock()
		if gone {
			delete(r.endpoints, a)
		}
	}
	if r.current != nil {
		for k := range r.progress {
			if r.current.groupByKey(k) == nil {
				delete(r.progress, k)
			}
		}
	}
}

// released is called by Done when a released address's last request ends.
func (r *Registry) maybeSweep(e *Endpoint) {
	if e.released.Load() && e.InFlight() == 0 {
		r.mu.Lock()
		r.sweepLocked()
		r.mu.Unlock()
	}
}

// Run owns the active health-check goroutines: one per address that needs
// probes (CHECKING addresses, and every address of clusters with always-on
// checks). It returns when ctx is done and every probe loop has stopped.
func (r *Registry) Run(ctx context.Context) {
	type loop struct {
		cancel context.CancelFunc
		period time.Duration
		done   chan struct{}
	}
	loops := map[*Endpoint]*loop{}
	stop := func(e *Endpoint, l *loop) {
		l.cancel()
		<-l.done
		delete(loops, e)
	}
	defer func() {
		for e, l := range loops {
			stop(e, l)
		}
	}()
	for {
		r.mu.Lock()
		eps := make([]*Endpoint, 0, len(r.endpoints))
		for _, e := range r.endpoints {
			eps = append(eps, e)
		}
		r.mu.Unlock()
		want := map[*Endpoint]time.Duration{}
		for _, e := range eps {
			if ok, p := e.needsProbe(); ok && p > 0 {
				want[e] = p
			}
		}
		for e, l := range loops {
			if p, ok := want[e]; !ok || p != l.period {
				stop(e, l)
			}
		}
		for e, p := range want {
			if loops[e] != nil {
				continue
			}
			lctx, cancel := context.WithCancel(ctx)
			l := &loop{cancel: cancel, period: p, done: make(chan struct{})}
			loops[e] = l
			go func() {
				defer close(l.done)
				r.probeLoop(lctx, e, p)
			}()
		}
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
	}
}

// probeLoop probes e every period until ctx is done. The first probe
// waits a random part of the period, so loops started together (a new
// table of thousands of addresses) spread their probes over the period;
// each probe waits for a slot of the limiter before its timeout starts.
func (r *Registry) probeLoop(ctx context.Context, e *Endpoint, period time.Duration) {
	first := time.NewTimer(rand.N(period)) // not r.rand: picks own that sequence
	select {
	case <-ctx.Done():
		first.Stop()
		return
	case <-first.C:
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		release, err := r.limit.Acquire(ctx)
		if err != nil {
			return
		}
		e.mu.Lock()
		rules := e.rules
		e.mu.Unlock()
		err = r.safeProbe(ctx, e.addr, rules)
		release()
		if ctx.Err() != nil {
			return
		}
		if e.probeResult(err == nil, r.now()) {
			r.log.Info("balance: health state changed", "addr", e.addr.String(), "state", e.Health().String(), "probe_err", err)
			r.bump()
			r.pokeManager()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *Registry) safeProbe(ctx context.Context, addr netip.AddrPort, h healthRules) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("balance: probe panicked", "addr", addr.String(), "panic", p)
			err = fmt.Errorf("probe %s: panic: %v", addr, p)
		}
	}()
	timeout := h.timeout
	if timeout <= 0 {
		timeout = time.Second
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return r.probe(pctx, addr, h.probe, timeout)
}

// ProbeOnce runs one probe of addr now and applies the result (for the admin
// API and tests). It returns the probe error.
func (r *Registry) ProbeOnce(ctx context.Context, addr netip.AddrPort) error {
	e := r.Endpoint(addr)
	if e == nil {
		return fmt.Errorf("probe %s: %w", addr, ErrUnknownAddress)
	}
	e.mu.Lock()
	rules := e.rules
	e.mu.Unlock()
	err := r.safeProbe(ctx, addr, rules)
	if e.probeResult(err == nil, r.now()) {
		r.bump()
		r.pokeManager()
	}
	return err
}

// retryAllowed takes one retry token if the budget allows: retries in flight
// stay ≤ max(min, percent % of active requests).
func (r *Registry) retryAllowed(percent, minimum int) bool {
	for {
		cur := r.retries.Load()
		limit := max(int64(minimum), r.activeSelections()*int64(percent)/100)
		if cur >= limit {
			return false
		}
		if r.retries.CompareAndSwap(cur, cur+1) {
			return true
		}
	}
}

// RetryStats reports the proxy-wide budget counters (active selections, retries in flight).
func (r *Registry) RetryStats() (active, retries int64) {
	return r.activeSelections(), r.retries.Load()
}

// activeSelections sums the per-stripe counters (each may be off by the
// selections that started on one stripe and are still running).
func (r *Registry) activeSelections() int64 {
	var n uint64
	for i := range r.active {
		n += r.active[i].n.Load()
	}
	return int64(n)
}

// stripeCount is 4 × GOMAXPROCS rounded up to a power of two, at most 64:
// enough that concurrent requests rarely share a cursor.
func stripeCount(procs int) int {
	n := 1
	for n < 4*procs && n < 64 {
		n <<= 1
	}
	return n
}

// ProbesInFlight is the number of active probes running now; MaxProbes
// the bound on it.
func (r *Registry) ProbesInFlight() int { return r.limit.InFlight() }

// MaxProbes is the bound on active probes in flight.
func (r *Registry) MaxProbes() int { return r.limit.Max() }

// Ejections returns how many times passive health checks ejected an
// instance (NORMAL → CHECKING) since the registry was created.
func (r *Registry) Ejections() uint64 { return r.ejections.Load() }

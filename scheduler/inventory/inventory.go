// Package inventory keeps the scheduler's inputs — desired state, shift
// intents and progress, agent-registered instances, proxy demand reports —
// in memory, fed by list+watch of etcd (api/etcdwatch: list, then watch from
// revision+1; list again on compaction, closed channels, stalls and a wiped,
// replaced or restored store). After a replaced store the inputs are the new
// store's only: a desired state it lacks is dropped, not kept, so the
// scheduler never republishes the old store's inputs into a new lineage.
//
// Instances whose key vanished (agent lease expired, agent deleted it, or a
// resync no longer lists it) are kept, with the state they last reported, for
// the desired state's scheduler.instance_grace: an etcd or agent incident must
// not empty a sub-cluster in one step. Proxies' health checks exclude a
// really dead instance meanwhile. An instance whose last report was
// "draining" is removed at once: it carried no capacity already.
//
// An Inventory is safe for concurrent use; View returns an immutable value.
package inventory

import (
	"context"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/etcdwatch"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/report"
)

// Options tune an Inventory. Zero values take the documented defaults.
type Options struct {
	// Now is the clock (default time.Now); grace periods are measured with it.
	Now func() time.Time
	// StallTimeout: a watch silent this long gets a progress request, and is
	// restarted if it stays silent as long again. Default 30s.
	StallTimeout time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the inventory metrics; nil registers nothing.
	Registerer prometheus.Registerer
}

// ShiftEntry is a shift intent with the revision it was read at (for CAS).
type ShiftEntry struct {
	Shift       config.Shift
	ModRevision int64
}

// View is everything the planner needs, as of one moment. It is never
// modified after View returns it.
type View struct {
	// State is the last valid desired state; nil until one was read.
	State *config.State
	// StateRevision is the etcd mod revision of State.
	StateRevision int64
	// Members per cluster → sub-cluster: static instances of State with
	// agent-registered instances merged in (an agent report for a static
	// address replaces it), in a stable order.
	Members map[string]map[string][]config.Instance
	// Demand[proxyCluster][cluster] is the sum of the proxies' reported RPS.
	Demand map[string]map[string]float64
	// Shifts by id, and the progress the scheduler wrote for them.
	Shifts   map[string]ShiftEntry
	Progress map[string]config.ShiftProgress
	// Debounced counts instances kept only by the grace period.
	Debounced int
	// NextExpiry is when the next debounced instance leaves (zero: none).
	NextExpiry time.Time
	// Synced is true once every input was listed at least once.
	Synced bool
	// Invalid are the inputs ignored because they broke a rule, by etcd
	// key, with the rule in the operator's words (a hand-written intent
	// that fails decoding): shown by the scheduler's status and lbctl,
	// never dropped silently.
	Invalid map[string]string
	// Generations[cluster] changes whenever the cluster's own planner
	// inputs change: its entry in State.Clusters, its pins and drains, its
	// Members, or any proxy cluster's Demand for it (plan.View.Generations).
	// Values are never reused within one Inventory.
	Generations map[string]uint64
}

type instEntry struct {
	key    keys.InstanceKey
	inst   report.Instance
	goneAt time.Time // zero while the key exists
}

// Inventory is the in-memory view of the scheduler's inputs.
type Inventory struct {
	cli    *clientv3.Client
	layout keys.Layout
	now    func() time.Time
	stall  time.Duration
	log    *slog.Logger
	m      metrics

	mu        sync.Mutex
	state     *config.State
	stateRev  int64
	shifts    map[string]ShiftEntry
	progress  map[string]config.ShiftProgress
	instances map[string]*instEntry
	demand    map[string]report.Demand
	synced    map[string]bool
	heard     map[string]time.Time
	// invalid[key] is why the input at key is ignored (View.Invalid).
	invalid map[string]string
	// recovered is when the instances were listed again after a failed
	// listing (an etcd outage): no instance is removed for a grace period
	// from then, since agents are still registering again.
	recovered time.Time
	// gen is the last generation handed out; gens the current one per
	// cluster (see View.Generations).
	gen  uint64
	gens map[string]uint64

	changed chan struct{}
}

// The watched inputs.
const (
	inDesired   = "desired"
	inShifts    = "shifts"
	inProgress  = "shift-progress"
	inInstances = "instances"
	inDemand    = "demand"
)

var inputs = []string{inDesired, inShifts, inProgress, inInstances, inDemand}

// New returns an inventory reading under layout; Run fills it.
func New(cli *clientv3.Client, layout keys.Layout, o Options) *Inventory {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Inventory{
		cli: cli, layout: layout, now: o.Now, stall: o.StallTimeout, log: o.Logger,
		m:         newMetrics(o.Registerer),
		shifts:    map[string]ShiftEntry{},
		progress:  map[string]config.ShiftProgress{},
		instances: map[string]*instEntry{},
		demand:    map[string]report.Demand{},
		synced:    map[string]bool{},
		heard:     map[string]time.Time{},
		invalid:   map[string]string{},
		gens:      map[string]uint64{},
		changed:   make(chan struct{}, 1),
	}
}

// Changed receives a value after every change of the inputs (coalesced: one
// pending notification at most).
func (inv *Inventory) Changed() <-chan struct{} { return inv.changed }

// Run watches every input until ctx is done; it always returns ctx.Err().
func (inv *Inventory) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, in := range inputs {
		s := inv.sink(in)
		prefix := s.key
		cfg := etcdwatch.Config{
			Client: inv.cli, Key: prefix, Prefix: true, LineageKey: inv.layout.Lineage(),
			StallTimeout: inv.stall, Logger: inv.log.With("input", in),
			OnRestart: s.restarted,
			OnBehind:  func() { inv.m.behind.WithLabelValues(in).Inc() },
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = etcdwatch.Run(ctx, cfg, s)
		}()
	}
	wg.Wait()
	return ctx.Err()
}

// sink is the sink of one input. The desired key is watched as a prefix
// too; the sink ignores keys that merely start with it ("desired-old").
func (inv *Inventory) sink(in string) *inputSink {
	prefix := map[string]string{
		inDesired:   inv.layout.Desired(),
		inShifts:    inv.layout.ShiftsPrefix(),
		inProgress:  inv.layout.ShiftProgressPrefix(),
		inInstances: inv.layout.InstancesPrefix(),
		inDemand:    inv.layout.DemandPrefix(),
	}[in]
	return &inputSink{inv: inv, input: in, exact: in == inDesired, key: prefix}
}

// Synced reports whether every input was listed at least once.
func (inv *Inventory) Synced() bool {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.syncedLocked()
}

func (inv *Inventory) syncedLocked() bool {
	for _, in := range inputs {
		if !inv.synced[in] {
			return false
		}
	}
	return true
}

// Staleness is how long ago the least recently confirmed input was last
// heard from etcd (a listing, an event or a progress notification). Before
// the first listing of every input it is the time since the epoch of the
// clock, i.e. very large.
func (inv *Inventory) Staleness() time.Duration {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	now := inv.now()
	var worst time.Duration
	for _, in := range inputs {
		d := now.Sub(inv.heard[in])
		worst = max(worst, d)
	}
	return worst
}

func (inv *Inventory) notify() {
	select {
	case inv.changed <- struct{}{}:
	default:
	}
}

// deleteDemandLocked removes a demand report.
func (inv *Inventory) deleteDemandLocked(key string) {
	for c := range inv.demand[key].Clusters {
		inv.bumpLocked(c)
	}
	delete(inv.demand, key)
}

// bumpLocked gives cluster c a new generation.
func (inv *Inventory) bumpLocked(c string) {
	inv.gen++
	inv.gens[c] = inv.gen
}

// bumpStateLocked bumps every cluster whose config, pins or drains differ
// between two desired states (old may be nil).
func (inv *Inventory) bumpStateLocked(old, st *config.State) {
	type own struct {
		cfg    config.Cluster
		pins   []config.Pin
		drains []config.Drain
	}
	collect := func(s *config.State) map[string]*own {
		m := map[string]*own{}
		if s == nil {
			return m
		}
		get := func(c string) *own {
			if m[c] == nil {
				m[c] = &own{}
			}
			return m[c]
		}
		for c, cfg := range s.Clusters {
			get(c).cfg = cfg
		}
		for _, p := range s.Pins {
			get(p.Cluster).pins = append(get(p.Cluster).pins, p)
		}
		for _, d := range s.Drains {
			get(d.Cluster).drains = append(get(d.Cluster).drains, d)
		}
		return m
	}
	a, b := collect(old), collect(st)
	for c, x := range b {
		if y, ok := a[c]; !ok || !reflect.DeepEqual(x, y) {
			inv.bumpLocked(c)
		}
	}
	for c := range a {
		if _, ok := b[c]; !ok {
			inv.bumpLocked(c)
		}
	}
}

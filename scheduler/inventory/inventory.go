// Package inventory keeps the scheduler's inputs — desired state, shift
// intents and progress, agent-registered instances, proxy demand reports —
// in memory, fed by list+watch of etcd (list, then watch from revision+1;
// list again on compaction, closed channels and stalls).
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
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/validate"
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
		gens:      map[string]uint64{},
		changed:   make(chan struct{}, 1),
	}
}

// Changed receives a value after every change of the inputs (coalesced: one
// pending notification at most).
func (inv *Inventory) Changed() <-chan struct{} { return inv.changed }

// Run watches every input until ctx is done; it always returns ctx.Err().
func (inv *Inventory) Run(ctx context.Context) error {
	prefixes := map[string]string{
		inDesired:   inv.layout.Desired(),
		inShifts:    inv.layout.ShiftsPrefix(),
		inProgress:  inv.layout.ShiftProgressPrefix(),
		inInstances: inv.layout.InstancesPrefix(),
		inDemand:    inv.layout.DemandPrefix(),
	}
	var wg sync.WaitGroup
	for _, in := range inputs {
		prefix := prefixes[in]
		// The desired key is watched as a prefix too; the sink ignores keys
		// that merely start with it ("desired-old").
		s := &inputSink{inv: inv, input: in, exact: in == inDesired, key: prefix}
		wg.Add(1)
		go func() {
			defer wg.Done()
			watchLoop(ctx, inv.cli, prefix, s, inv.stall, inv.log, func() { inv.m.resyncs.WithLabelValues(s.input).Inc() })
		}()
	}
	wg.Wait()
	return ctx.Err()
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

// inputSink applies one input's listings and events to the inventory.
type inputSink struct {
	inv   *Inventory
	input string
	exact bool   // only key itself counts (desired)
	key   string // the watched key or prefix
	// down is set when a listing failed; the next listing ends the outage.
	// Only the input's watch loop uses it.
	down bool
}

// listFailed records that a listing failed: etcd could not be used.
func (s *inputSink) listFailed() { s.down = true }

func (s *inputSink) reset(kvs []*mvccpb.KeyValue, rev int64) {
	inv := s.inv
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if s.down && s.input == inInstances {
		inv.recovered = inv.now()
		inv.log.Info("instances listed again after an etcd outage; none is removed for the instance grace")
	}
	s.down = false
	seen := map[string]bool{}
	for _, kv := range kvs {
		if s.exact && string(kv.Key) != s.key {
			continue
		}
		seen[string(kv.Key)] = true
		s.putLocked(kv)
	}
	// Whatever the listing no longer has was deleted while we were away.
	switch s.input {
	case inShifts:
		for id := range inv.shifts {
			if k, err := inv.layout.Shift(id); err != nil || !seen[k] {
				delete(inv.shifts, id)
			}
		}
	case inProgress:
		for id := range inv.progress {
			if k, err := inv.layout.ShiftProgress(id); err != nil || !seen[k] {
				delete(inv.progress, id)
			}
		}
	case inInstances:
		for k := range inv.instances {
			if !seen[k] {
				s.goneLocked(k)
			}
		}
	case inDemand:
		for k := range inv.demand {
			if !seen[k] {
				inv.deleteDemandLocked(k)
			}
		}
	case inDesired:
		if len(seen) == 0 && inv.state != nil {
			s.desiredDeletedLocked()
		}
	}
	inv.synced[s.input] = true
	inv.heard[s.input] = inv.now()
	inv.notify()
}

func (s *inputSink) apply(evs []*clientv3.Event, rev int64) {
	inv := s.inv
	inv.mu.Lock()
	defer inv.mu.Unlock()
	for _, ev := range evs {
		if s.exact && string(ev.Kv.Key) != s.key {
			continue
		}
		if ev.Type == clientv3.EventTypeDelete {
			s.deleteLocked(string(ev.Kv.Key))
		} else {
			s.putLocked(ev.Kv)
		}
	}
	inv.heard[s.input] = inv.now()
	inv.notify()
}

func (s *inputSink) heard(rev int64) {
	s.inv.mu.Lock()
	s.inv.heard[s.input] = s.inv.now()
	s.inv.mu.Unlock()
}

func (s *inputSink) putLocked(kv *mvccpb.KeyValue) {
	inv := s.inv
	key := string(kv.Key)
	switch s.input {
	case inDesired:
		var st config.State
		err := codec.Unmarshal(kv.Value, &st)
		if err == nil {
			err = validate.State(&st)
		}
		if err != nil {
			inv.m.invalid.WithLabelValues(inDesired).Inc()
			inv.log.Error("desired state ignored; keeping the last valid one", "revision", kv.ModRevision, "err", err)
			return
		}
		if inv.state != nil && kv.ModRevision == inv.stateRev {
			return
		}
		inv.bumpStateLocked(inv.state, &st)
		inv.state, inv.stateRev = &st, kv.ModRevision
	case inShifts:
		var sh config.Shift
		if err := decodeNamed(kv.Value, &sh, key, func(id string) (string, error) { return inv.layout.Shift(id) }, &sh.ID); err != nil {
			inv.m.invalid.WithLabelValues(inShifts).Inc()
			inv.log.Error("shift intent ignored", "key", key, "err", err)
			return
		}
		inv.shifts[sh.ID] = ShiftEntry{Shift: sh, ModRevision: kv.ModRevision}
	case inProgress:
		var p config.ShiftProgress
		if err := decodeNamed(kv.Value, &p, key, func(id string) (string, error) { return inv.layout.ShiftProgress(id) }, &p.ID); err != nil {
			inv.m.invalid.WithLabelValues(inProgress).Inc()
			inv.log.Error("shift progress ignored", "key", key, "err", err)
			return
		}
		inv.progress[p.ID] = p
	case inInstances:
		ik, err := inv.layout.ParseInstance(key)
		var r report.Instance
		if err == nil {
			err = codec.UnmarshalJSON(kv.Value, &r)
		}
		if err == nil {
			err = checkInstance(r)
		}
		if err != nil {
			inv.m.invalid.WithLabelValues(inInstances).Inc()
			inv.log.Error("instance registration ignored", "key", key, "err", err)
			// A garbled update must not keep an old healthy copy forever.
			s.goneLocked(key)
			return
		}
		ne := &instEntry{key: ik, inst: r}
		if old := inv.instances[key]; old == nil || !old.goneAt.IsZero() || !reflect.DeepEqual(toConfig(old), toConfig(ne)) {
			inv.bumpLocked(ik.Cluster)
		}
		inv.instances[key] = ne
	case inDemand:
		pk, err := inv.layout.ParseDemand(key)
		var d report.Demand
		if err == nil {
			err = codec.UnmarshalJSON(kv.Value, &d)
		}
		if err != nil {
			inv.m.invalid.WithLabelValues(inDemand).Inc()
			inv.log.Error("demand report ignored", "key", key, "err", err)
			inv.deleteDemandLocked(key)
			return
		}
		d.ProxyCluster = pk.ProxyCluster
		old := inv.demand[key]
		for c, cd := range d.Clusters {
			if oc, ok := old.Clusters[c]; !ok || oc.RPS != cd.RPS || old.ProxyCluster != d.ProxyCluster {
				inv.bumpLocked(c)
			}
		}
		for c := range old.Clusters {
			if _, ok := d.Clusters[c]; !ok {
				inv.bumpLocked(c)
			}
		}
		inv.demand[key] = d
	}
}

func (s *inputSink) deleteLocked(key string) {
	inv := s.inv
	switch s.input {
	case inDesired:
		s.desiredDeletedLocked()
	case inShifts:
		for id := range inv.shifts {
			if k, _ := inv.layout.Shift(id); k == key {
				delete(inv.shifts, id)
			}
		}
	case inProgress:
		for id := range inv.progress {
			if k, _ := inv.layout.ShiftProgress(id); k == key {
				delete(inv.progress, id)
			}
		}
	case inInstances:
		s.goneLocked(key)
	case inDemand:
		inv.deleteDemandLocked(key)
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

func (s *inputSink) desiredDeletedLocked() {
	s.inv.m.invalid.WithLabelValues(inDesired).Inc()
	s.inv.log.Error("desired state key deleted; keeping the last valid one", "key", s.key)
}

// goneLocked starts the grace period of an instance whose key vanished, or
// removes it at once when it was draining.
func (s *inputSink) goneLocked(key string) {
	inv := s.inv
	e, ok := inv.instances[key]
	if !ok {
		return
	}
	if e.inst.State == config.StateDraining {
		delete(inv.instances, key)
		inv.bumpLocked(e.key.Cluster)
		return
	}
	if e.goneAt.IsZero() {
		e.goneAt = inv.now()
	}
}

func checkInstance(r report.Instance) error {
	switch r.State {
	case "", config.StateHealthy, config.StateUnhealthy, config.StateDraining:
	default:
		return fmt.Errorf("state %q is not healthy, unhealthy or draining", r.State)
	}
	if r.Weight < 0 || r.Weight > config.MaxInstanceWeight {
		return fmt.Errorf("weight %d is outside 0..%d", r.Weight, config.MaxInstanceWeight)
	}
	if r.CapacityRPS < 0 {
		return fmt.Errorf("capacity_rps %d is negative", r.CapacityRPS)
	}
	return nil
}

// decodeNamed decodes a value whose key ends in its id and checks they agree.
func decodeNamed(raw []byte, v any, key string, keyOf func(string) (string, error), id *string) error {
	if err := codec.UnmarshalJSON(raw, v); err != nil {
		return err
	}
	k, err := keyOf(*id)
	if err != nil {
		return fmt.Errorf("id: %w", err)
	}
	if k != key {
		return fmt.Errorf("id %q does not match key %q", *id, key)
	}
	return nil
}

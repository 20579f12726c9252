package inventory

import (
	"fmt"
	"reflect"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/etcdwatch"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/validate"
)

// inputSink applies one input's listings and events to the inventory.
type inputSink struct {
	inv   *Inventory
	input string
	exact bool   // only key itself counts (desired)
	key   string // the watched key or prefix
	// down is set when a listing failed; the next listing ends the outage.
	// replaced is set when etcd turned out to be another store; the next
	// listing is that store's whole truth. Only the input's watch loop uses
	// them.
	down, replaced bool
}

// restarted records why the input's watch is listed again.
func (s *inputSink) restarted(reason etcdwatch.Reason, listed bool, err error) {
	s.inv.m.resyncs.WithLabelValues(s.input).Inc()
	if !listed {
		s.down = true // etcd could not be used
	}
	if reason == etcdwatch.ReasonStoreReplaced {
		s.replaced = true
	}
}

func (s *inputSink) Reset(kvs []*mvccpb.KeyValue, rev int64) error {
	inv := s.inv
	inv.mu.Lock()
	defer inv.mu.Unlock()
	replaced := s.replaced
	s.replaced = false
	if replaced && s.input == inDesired {
		inv.stateRev = 0 // revisions of the old store say nothing about this one's
	}
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
	for k := range inv.invalid {
		if strings.HasPrefix(k, s.key) && !seen[k] {
			delete(inv.invalid, k)
		}
	}
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
		switch {
		case len(seen) == 0 && inv.state != nil && replaced:
			// The old store's state is not this store's: without one the
			// scheduler plans and publishes nothing.
			inv.bumpStateLocked(inv.state, nil)
			inv.state, inv.stateRev = nil, 0
			inv.log.Warn("etcd is another store (wiped, replaced or restored) without a desired state; the old one is dropped", "key", s.key)
		case len(seen) == 0 && inv.state != nil:
			s.desiredDeletedLocked()
		}
	}
	inv.synced[s.input] = true
	inv.heard[s.input] = inv.now()
	inv.notify()
	return nil
}

func (s *inputSink) Apply(evs []*clientv3.Event, rev int64) error {
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
	return nil
}

func (s *inputSink) Heard(rev int64) {
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
			inv.invalid[key] = fmt.Sprintf("desired state at revision %d ignored (the scheduler keeps the last valid one): %v", kv.ModRevision, err)
			return
		}
		delete(inv.invalid, key)
		if inv.state != nil && kv.ModRevision == inv.stateRev {
			return
		}
		inv.bumpStateLocked(inv.state, &st)
		inv.state, inv.stateRev = &st, kv.ModRevision
	case inShifts:
		sh, err := DecodeShift(inv.layout, key, kv.Value)
		if err != nil {
			inv.m.invalid.WithLabelValues(inShifts).Inc()
			inv.log.Error("shift intent ignored", "key", key, "err", err)
			inv.invalid[key] = "shift intent ignored: " + err.Error()
			return
		}
		delete(inv.invalid, key)
		inv.shifts[sh.ID] = ShiftEntry{Shift: sh, ModRevision: kv.ModRevision}
	case inProgress:
		var p config.ShiftProgress
		if err := decodeNamed(kv.Value, &p, key, func(id string) (string, error) { return inv.layout.ShiftProgress(id) }, &p.ID); err != nil {
			inv.m.invalid.WithLabelValues(inProgress).Inc()
			inv.log.Error("shift progress ignored", "key", key, "err", err)
			inv.invalid[key] = "shift progress ignored: " + err.Error()
			return
		}
		delete(inv.invalid, key)
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
			inv.invalid[key] = "instance registration ignored: " + err.Error()
			// A garbled update must not keep an old healthy copy forever.
			s.goneLocked(key)
			return
		}
		delete(inv.invalid, key)
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
			inv.invalid[key] = "demand report ignored: " + err.Error()
			inv.deleteDemandLocked(key)
			return
		}
		delete(inv.invalid, key)
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
	delete(inv.invalid, key)
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

// DecodeShift decodes the shift intent stored at key with the scheduler's
// rules (strict JSON, the id matching the key): what fails is ignored by
// the scheduler and listed in View.Invalid. lbctl
// decodes with it to show such an intent as invalid, with the rule.
func DecodeShift(layout keys.Layout, key string, raw []byte) (config.Shift, error) {
	var sh config.Shift
	if err := decodeNamed(raw, &sh, key, layout.Shift, &sh.ID); err != nil {
		return config.Shift{}, err
	}
	return sh, nil
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

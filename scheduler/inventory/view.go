package inventory

// The View the planner reads, built from the inputs the sinks keep.

import (
	"sort"

	"github.com/sluicelb/sluice/api/config"
)

// View returns the current inputs. Instances whose grace period ended by now
// are dropped here.
func (inv *Inventory) View() View {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	now := inv.now()
	v := View{
		State: inv.state, StateRevision: inv.stateRev,
		Shifts:   make(map[string]ShiftEntry, len(inv.shifts)),
		Progress: make(map[string]config.ShiftProgress, len(inv.progress)),
		Demand:   map[string]map[string]float64{},
		Synced:   inv.syncedLocked(),
	}
	for id, s := range inv.shifts {
		v.Shifts[id] = s
	}
	for id, p := range inv.progress {
		v.Progress[id] = p
	}
	if len(inv.invalid) > 0 {
		v.Invalid = make(map[string]string, len(inv.invalid))
		for k, why := range inv.invalid {
			v.Invalid[k] = why
		}
	}
	for _, d := range inv.demand {
		row := v.Demand[d.ProxyCluster]
		if row == nil {
			row = map[string]float64{}
			v.Demand[d.ProxyCluster] = row
		}
		for c, cd := range d.Clusters {
			row[c] += cd.RPS
		}
	}
	if inv.state == nil {
		return v
	}
	grace := inv.state.Scheduler.InstanceGrace.D()
	v.Members = staticMembers(inv.state)
	agentKeys := make([]string, 0, len(inv.instances))
	for k, e := range inv.instances {
		if !e.goneAt.IsZero() {
			exp := e.goneAt.Add(grace)
			if ra := inv.recovered.Add(grace); ra.After(exp) {
				exp = ra // the outage ended lately: agents are still registering
			}
			if !now.Before(exp) {
				delete(inv.instances, k)
				inv.bumpLocked(e.key.Cluster)
				inv.log.Info("instance removed after grace", "key", k, "grace", grace)
				continue
			}
			v.Debounced++
			if v.NextExpiry.IsZero() || exp.Before(v.NextExpiry) {
				v.NextExpiry = exp
			}
		}
		agentKeys = append(agentKeys, k)
	}
	sort.Strings(agentKeys)
	ignored := 0
	for _, k := range agentKeys {
		e := inv.instances[k]
		subs, ok := v.Members[e.key.Cluster]
		if !ok {
			ignored++
			continue
		}
		list, ok := subs[e.key.SubCluster]
		if !ok {
			ignored++
			continue
		}
		subs[e.key.SubCluster] = config.MergeInstance(list, toConfig(e))
	}
	v.Generations = make(map[string]uint64, len(inv.gens))
	for c, g := range inv.gens {
		v.Generations[c] = g
	}
	inv.m.unknownInstances.Set(float64(ignored))
	inv.m.debounced.Set(float64(v.Debounced))
	return v
}

func staticMembers(st *config.State) map[string]map[string][]config.Instance {
	m := make(map[string]map[string][]config.Instance, len(st.Clusters))
	for cn, c := range st.Clusters {
		subs := make(map[string][]config.Instance, len(c.SubClusters))
		for sn, sc := range c.SubClusters {
			subs[sn] = append([]config.Instance(nil), sc.Instances...)
		}
		m[cn] = subs
	}
	return m
}

func toConfig(e *instEntry) config.Instance {
	return config.Instance{
		Addr: e.key.Addr.Addr().String(), Port: int(e.key.Addr.Port()),
		Weight: e.inst.Weight, CapacityRPS: e.inst.CapacityRPS,
		State: e.inst.State, Labels: e.inst.Labels,
	}
}

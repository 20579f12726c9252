package balance

import (
	"github.com/sluicelb/sluice/api/config"
)

// TableView is a JSON-able picture of a table and the live state of its
// addresses, for the admin API (/v1/table) and lbctl.
type TableView struct {
	Version  uint64                 `json:"version"`
	Clusters map[string]ClusterView `json:"clusters"`
}

// ClusterView is one cluster's row and sub-clusters.
type ClusterView struct {
	SubclusterMode string `json:"subcluster_mode"`
	Instance       string `json:"instance"`
	// Row is the configured weight row (GSLB_BLACKHOLE included).
	Row map[string]int `json:"row"`
	// EffectiveRow is the share (percent) each sub-cluster gets now, after
	// the share of sub-clusters with nothing available was spread.
	EffectiveRow map[string]float64 `json:"effective_row"`
	SubClusters  []SubClusterView   `json:"subclusters"`
}

// SubClusterView is one sub-cluster.
type SubClusterView struct {
	Name      string         `json:"name"`
	Weight    int            `json:"weight"`
	Available int            `json:"available"` // available instances
	Panic     bool           `json:"panic,omitempty"`
	Instances []InstanceView `json:"instances"`
}

// InstanceView is one instance's configuration and live state.
type InstanceView struct {
	Addr            string    `json:"addr"`
	Weight          int       `json:"weight"`           // configured
	EffectiveWeight int       `json:"effective_weight"` // used now (0: not picked)
	Health          string    `json:"health"`
	AgentState      string    `json:"agent_state,omitempty"`
	Available       bool      `json:"available"`
	InFlight        int64     `json:"in_flight"`
	SlowStart       float64   `json:"slow_start"` // ramp progress 0..1 (1: done)
	Override        *Override `json:"override,omitempty"`
}

// Describe reports the table with live state. It does not change any state.
func (t *Table) Describe() TableView {
	tv := TableView{Version: t.Version(), Clusters: map[string]ClusterView{}}
	ovr := t.reg.Overrides()
	for name, c := range t.clusters {
		cv := ClusterView{SubclusterMode: c.mode, Instance: c.algoName, Row: map[string]int{}, EffectiveRow: map[string]float64{}}
		if c.bhWeight > 0 {
			cv.Row[config.Blackhole] = c.bhWeight
		}
		for _, g := range c.subs {
			cv.Row[g.name] = g.weight
			v := g.currentView()
			sv := SubClusterView{Name: g.name, Weight: g.weight, Available: v.nAvail, Panic: v.panic}
			for i, m := range g.members {
				iv := InstanceView{Addr: m.ep.addr.String(), Weight: m.weight, EffectiveWeight: v.weights[i],
					Health: v.states[i].health.String(), Available: v.avail[i], InFlight: m.ep.InFlight(),
					SlowStart: v.states[i].progress}
				if !m.agentOK {
					iv.AgentState = "excluded"
				}
				if o, ok := ovr[m.ep.addr]; ok {
					iv.Override = &o
				}
				sv.Instances = append(sv.Instances, iv)
			}
			cv.SubClusters = append(cv.SubClusters, sv)
		}
		cv.EffectiveRow = c.effectiveRow()
		tv.Clusters[name] = cv
	}
	return tv
}

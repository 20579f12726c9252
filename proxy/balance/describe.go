package balance

import (
	"errors"
	"net/http"
	"net/netip"

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
		spreadable := 0
		for _, g := range c.subs {
			cv.Row[g.name] = g.weight
			v := g.currentView()
			if v.nAvail > 0 {
				spreadable += g.weight
			}
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
		if c.rowTotal > 0 {
			bh := float64(c.bhWeight) * 100 / float64(c.rowTotal)
			if c.bhWeight > 0 {
				cv.EffectiveRow[config.Blackhole] = bh
			}
			for _, g := range c.subs {
				share := 0.0
				if g.currentView().nAvail > 0 && spreadable > 0 {
					if c.pol.Balance.FailFast {
						share = float64(g.weight) * 100 / float64(c.rowTotal)
					} else {
						share = (100 - bh) * float64(g.weight) / float64(spreadable)
					}
				}
				cv.EffectiveRow[g.name] = share
			}
		}
		tv.Clusters[name] = cv
	}
	return tv
}

// Explanation says what Selection.Next would pick first for a request and why.
type Explanation struct {
	Cluster    string `json:"cluster"`
	Version    uint64 `json:"version"`
	Mode       string `json:"subcluster_mode"`
	HashKey    string `json:"hash_key"`
	KeyHash    uint64 `json:"key_hash,omitempty"`
	KeyRandom  bool   `json:"key_random,omitempty"` // empty key: a random draw
	SubCluster string `json:"subcluster,omitempty"`
	Blackhole  bool   `json:"blackhole,omitempty"`
	Instance   string `json:"instance,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Algorithm  string `json:"algorithm"`
	Cross      bool   `json:"cross,omitempty"`
	Error      string `json:"error,omitempty"`
}

// Explain reports what the first Next() would pick and why, without
// acquiring anything (no in-flight change, no schedule advance; random draws
// are still drawn, so random modes may differ from the real pick).
func (c *Cluster) Explain(req *http.Request, clientIP netip.Addr) Explanation {
	s := &Selection{c: c, req: req, ip: clientIP, primary: -1, dry: true, live: true}
	ex := Explanation{Cluster: c.name, Version: c.table.Version(), Mode: c.mode, HashKey: c.key.kind, Algorithm: c.algoName}
	if c.key.header != "" {
		ex.HashKey += ":" + c.key.header
	}
	h, ok := s.key()
	ex.KeyHash, ex.KeyRandom = h, !ok
	p, err := s.Next()
	switch {
	case errors.Is(err, ErrBlackhole):
		ex.Blackhole, ex.SubCluster, ex.Reason = true, config.Blackhole, "blackhole"
	case err != nil:
		ex.Error = err.Error()
	default:
		ex.SubCluster, ex.Instance, ex.Reason, ex.Cross = p.SubCluster(), p.ep.addr.String(), p.Reason(), p.Cross()
	}
	return ex
}

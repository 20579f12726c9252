package lbscheduler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
	"github.com/sluicelb/sluice/scheduler/internal/api"
	"github.com/sluicelb/sluice/scheduler/internal/dashboard"
	"github.com/sluicelb/sluice/scheduler/internal/shift"
	"github.com/sluicelb/sluice/scheduler/inventory"
	"github.com/sluicelb/sluice/scheduler/plan"
)

// PlanDoc is what GET and POST /v1/plan return.
type PlanDoc struct {
	SchedulerID string    `json:"scheduler_id"`
	Leader      bool      `json:"leader"`
	WhatIf      bool      `json:"what_if,omitempty"`
	ComputedAt  time.Time `json:"computed_at"`
	// StateRevision is the etcd revision of the desired state used.
	StateRevision int64 `json:"state_revision"`
	// DebouncedInstances are kept only by the grace period.
	DebouncedInstances int `json:"debounced_instances"`
	// ProxyClusters: the rows and explanations per proxy cluster.
	ProxyClusters map[string]ProxyClusterPlan `json:"proxy_clusters"`
	// Clusters: per backend cluster flows, drops, objective, utilisation.
	Clusters map[string]plan.ClusterPlan `json:"clusters"`
}

// ProxyClusterPlan is one proxy cluster's computed snapshot, summarised.
type ProxyClusterPlan struct {
	// Hash is the computed content hash; LiveVersion/LiveHash what is live.
	Hash        string             `json:"hash"`
	LiveVersion uint64             `json:"live_version,omitempty"`
	LiveHash    string             `json:"live_hash,omitempty"`
	Rows        map[string]RowPlan `json:"rows"`
}

// RowPlan is one row with how it was computed.
type RowPlan struct {
	Row         snapshot.Row          `json:"row"`
	Explanation *snapshot.Explanation `json:"explanation,omitempty"`
}

func newPlanDoc(id string, leader bool, now time.Time, v inventory.View, pl *plan.Plan, live map[string]*snapshot.Snapshot) *PlanDoc {
	d := &PlanDoc{
		SchedulerID: id, Leader: leader, ComputedAt: now.UTC(), StateRevision: v.StateRevision,
		DebouncedInstances: v.Debounced, ProxyClusters: map[string]ProxyClusterPlan{}, Clusters: pl.Clusters,
	}
	for _, pc := range pl.ProxyClusters() {
		p := ProxyClusterPlan{Hash: pl.Hashes[pc], Rows: map[string]RowPlan{}}
		if l := live[pc]; l != nil {
			p.LiveVersion, p.LiveHash = l.Meta.Version, l.Meta.Hash
		}
		for cn := range pl.Clusters {
			if c, ok := pl.Row(pc, cn); ok {
				p.Rows[cn] = RowPlan{Row: c.Row, Explanation: c.Explanation}
			}
		}
		d.ProxyClusters[pc] = p
	}
	return d
}

// source implements api.Source.
type source struct{ s *Scheduler }

func (src source) Ready() bool { return src.s.inv.Synced() }

// NotReadyReason says why /readyz answers 503: etcd's last error while the
// scheduler cannot use it, else that the inputs are not listed yet.
func (src source) NotReadyReason() string {
	if e := src.s.etcd; e != nil && !e.Connected() {
		if st := e.State(); st.LastError != "" {
			return "inventory not synced: waiting for etcd: " + st.LastError
		}
		return "inventory not synced: waiting for etcd"
	}
	return "inventory not synced"
}

func (src source) Plan(ctx context.Context) (any, error) {
	d := src.s.doc.Load()
	if d == nil {
		return nil, api.ErrNotReady
	}
	return d, nil
}

func (src source) History(ctx context.Context, pc string) (any, error) {
	h, err := src.s.pub.History(ctx, pc)
	if err != nil {
		return nil, err
	}
	return map[string]any{"proxy_cluster": pc, "versions": h}, nil
}

// WhatIf applies w to a copy of the current inputs and computes, without
// publishing. The modified desired state must pass validate.State.
func (src source) WhatIf(ctx context.Context, w api.WhatIf) (any, error) {
	s := src.s
	v := s.inv.View()
	if !v.Synced || v.State == nil {
		return nil, api.ErrNotReady
	}
	st := *v.State
	st.Pins = slices.Clone(st.Pins)
	st.Drains = slices.Clone(st.Drains)
	intents := map[string]config.Shift{}
	for id, e := range v.Shifts {
		intents[id] = e.Shift
	}
	// Shifts as recorded in etcd, plus the proposed one.
	active := followerShifts(intents, v.Progress)
	switch {
	case len(w.Pins) > 0:
		for _, p := range w.Pins {
			st.Pins = slices.DeleteFunc(st.Pins, func(x config.Pin) bool {
				return x.ProxyCluster == p.ProxyCluster && x.Cluster == p.Cluster
			})
			st.Pins = append(st.Pins, p)
		}
	case w.Drain != "":
		c, sc, _ := strings.Cut(w.Drain, "/")
		st.Drains = append(st.Drains, config.Drain{Cluster: c, SubCluster: sc, Reason: "what-if"})
	case w.Shift != nil:
		sh := *w.Shift
		if sh.ID == "" {
			sh.ID = "what-if"
		}
		active = append(active, shift.Active{Shift: sh, AppliedPercent: sh.Percent})
	}
	if err := validate.State(&st); err != nil {
		return nil, fmt.Errorf("%w: %w", api.ErrBadRequest, err)
	}
	v.State = &st
	// The proposal changed pins, drains or shifts the generations do not
	// cover: the what-if planner compares every cluster's inputs itself.
	v.Generations = nil
	s.whatIfMu.Lock()
	defer s.whatIfMu.Unlock()
	prev := s.livePrev(ctx)
	pl, err := s.whatIf.ComputePlan(planView(v, active), prev)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", api.ErrBadRequest, err)
	}
	d := newPlanDoc(s.cfg.ID, s.IsLeader(), s.cfg.Now(), v, pl, prev)
	d.WhatIf = true
	return d, nil
}

// livePrev reads the live snapshots without touching the control loop's cache.
func (s *Scheduler) livePrev(ctx context.Context) map[string]*snapshot.Snapshot {
	prev, err := s.pub.LoadCurrent(ctx, nil)
	if err != nil {
		s.log.Warn("what-if: reading live snapshots", "err", err)
	}
	return prev
}

// dashboardInputs is what the dashboard shows: the inventory's current
// inputs and the last computed plan.
func (s *Scheduler) dashboardInputs() (dashboard.Inputs, bool) {
	v := s.inv.View()
	in := dashboard.Inputs{SchedulerID: s.cfg.ID, Leader: s.IsLeader(), State: v.State, StateRevision: v.StateRevision,
		Members: v.Members, Shifts: map[string]config.Shift{}, Progress: v.Progress,
		Rows: map[string]map[string]dashboard.RowInput{}, Hashes: map[string]string{}}
	for id, e := range v.Shifts {
		in.Shifts[id] = e.Shift
	}
	d := s.doc.Load()
	if d == nil {
		return in, false
	}
	in.ComputedAt = d.ComputedAt
	for pc, p := range d.ProxyClusters {
		in.Hashes[pc] = p.Hash
		rows := map[string]dashboard.RowInput{}
		for cn, r := range p.Rows {
			rows[cn] = dashboard.RowInput{Row: r.Row, Explanation: r.Explanation}
		}
		in.Rows[pc] = rows
	}
	return in, v.Synced
}

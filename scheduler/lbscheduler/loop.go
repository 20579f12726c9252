package lbscheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/backoff"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/scheduler/internal/publish"
	"github.com/sluicelb/sluice/scheduler/internal/shift"
	"github.com/sluicelb/sluice/scheduler/inventory"
	"github.com/sluicelb/sluice/scheduler/plan"
)

// retryAfterError is how soon the loop tries again after a failed round.
const retryAfterError = time.Second

// controlLoop reconciles after every (debounced) input change, leadership
// change, due shift step, grace expiry and GC tick.
func (s *Scheduler) controlLoop(ctx context.Context) {
	gc := time.NewTicker(s.cfg.GCInterval)
	defer gc.Stop()
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.inv.Changed():
		case <-s.kick:
		case <-wake.C:
		case <-gc.C:
			s.collect(ctx)
			continue
		}
		// Debounce: let a burst of changes settle, then reconcile once.
		if !backoff.Sleep(ctx, s.cfg.Debounce) {
			return
		}
		select {
		case <-s.inv.Changed():
		default:
		}
		next, err := s.reconcile(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.log.Error("reconcile failed", "err", err)
			next = s.cfg.Now().Add(retryAfterError)
		}
		d := time.Hour
		if !next.IsZero() {
			d = max(next.Sub(s.cfg.Now()), time.Millisecond)
		}
		wake.Reset(d)
	}
}

// reconcile computes from the current inputs and, as leader, publishes.
// It returns when it wants to run again (zero: only on changes).
func (s *Scheduler) reconcile(ctx context.Context) (time.Time, error) {
	view := s.inv.View()
	if !view.Synced || view.State == nil {
		return time.Time{}, nil
	}
	now := s.cfg.Now()
	lead := s.lead.Load()
	prev, err := s.pub.LoadCurrent(ctx, s.prev)
	if err != nil {
		s.log.Warn("reading live snapshots", "err", err)
		if prev == nil {
			return time.Time{}, err
		}
	}
	s.prev = prev

	intents := make(map[string]config.Shift, len(view.Shifts))
	for id, e := range view.Shifts {
		intents[id] = e.Shift
	}
	var active []shift.Active
	if lead != nil {
		if s.exec == nil || s.execTerm != lead {
			s.exec, s.execTerm = shift.NewExecutor(view.Progress, now), lead
		}
		active = s.exec.Step(now, intents)
	} else {
		s.exec, s.execTerm = nil, nil
		active = followerShifts(intents, view.Progress)
	}

	pv := planView(view, active)
	pv.Now = now
	start := time.Now()
	if lead != nil {
		s.book.begin(lead, now, inputRevision(view))
		s.book.view = view
	}
	// ComputePlan assembles no snapshot: publishAll builds only those whose
	// content hash differs from the live one.
	pl, err := s.planner.ComputePlan(pv, prev)
	s.m.compute.Observe(time.Since(start).Seconds())
	if err != nil {
		if lead != nil {
			s.book.err = "compute: " + err.Error()
			if werr := s.writeStatus(ctx, lead); werr != nil {
				s.log.Warn("writing scheduler status", "err", werr)
			}
		}
		return time.Time{}, fmt.Errorf("compute: %w", err)
	}
	s.observe(pl.Clusters)
	if s.exec != nil {
		s.exec.Observe(active, shiftResults(pl))
	}
	s.doc.Store(newPlanDoc(s.cfg.ID, lead != nil, now, view, pl, prev))
	s.dash.Notify()

	next := view.NextExpiry
	if !pl.NextPace.IsZero() && (next.IsZero() || pl.NextPace.Before(next)) {
		next = pl.NextPace // a paced row may take its next step
	}
	if lead == nil {
		return next, nil
	}
	if s.exec != nil {
		if due := s.exec.NextDue(intents); !due.IsZero() && (next.IsZero() || due.Before(next)) {
			next = due
		}
	}
	versions, err := s.publishAll(ctx, lead, pl, prev, active)
	if due := s.stepRollouts(ctx, lead, pl.ProxyClusters()); !due.IsZero() && (next.IsZero() || due.Before(next)) {
		next = due
	}
	s.book.keep(pl.ProxyClusters())
	if werr := s.writeStatus(ctx, lead); werr != nil {
		s.log.Warn("writing scheduler status", "err", werr)
	}
	if err != nil {
		return next, err
	}
	if err := s.writeProgress(ctx, lead, now, intents, versions); err != nil {
		return next, err
	}
	return next, nil
}

// publishAll publishes every snapshot whose content changed; it returns the
// live version per proxy cluster.
func (s *Scheduler) publishAll(ctx context.Context, lead *publish.Leadership, pl *plan.Plan, prev map[string]*snapshot.Snapshot, active []shift.Active) (map[string]uint64, error) {
	pcs := pl.ProxyClusters() // sorted
	versions := map[string]uint64{}
	var errs []error
	history := 0
	st := s.inv.View().State
	if st != nil {
		history = st.Scheduler.History
	}
	for _, pc := range pcs {
		var pol *config.RolloutPolicy
		if st != nil {
			pol = st.RolloutFor(pc)
		}
		urgent := ""
		if pol != nil && prev[pc] != nil && prev[pc].Meta.Hash != pl.Hashes[pc] { // assembled only for a staged change
			if urgent = markedUrgent(st, active, pc, prev[pc], inputsFor(s.book.view, active, pc)); urgent == "" {
				urgent = urgentReason(st, prev[pc], pl.Snapshot(pc))
			}
		}
		out, err := s.staged.Publish(ctx, lead, pc, pl.Hashes[pc], func() (*snapshot.Snapshot, string) {
			sp := pl.Snapshot(pc)
			if sp == nil {
				return nil, ""
			}
			snap := *sp // a copy: the plan's is shared and immutable
			snap.Meta.Inputs = inputsFor(s.book.view, active, pc)
			snap.Meta.Intents = intentsFor(s.book.view, active, pc)
			return &snap, reason(pc, &snap, prev[pc], active)
		}, pol, urgent, s.book.inputRev)
		r := out.Result
		s.book.note(pc, r, err, s.cfg.Now())
		if out.Held != "" {
			s.book.held(pc, out.Held)
		}
		if errors.Is(err, publish.ErrFenced) {
			s.log.Error("publish fenced: stepping down", "proxy_cluster", pc)
			select {
			case s.stepDown <- lead:
			default:
			}
			return versions, err
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		versions[pc] = r.Version
		if r.Outcome == publish.Published {
			if _, err := s.pub.Prune(ctx, lead, pc, history); err != nil {
				s.log.Warn("pruning history", "proxy_cluster", pc, "err", err)
			}
		}
	}
	return versions, errors.Join(errs...)
}

// writeProgress records each shift's progress (fenced on leadership).
func (s *Scheduler) writeProgress(ctx context.Context, lead *publish.Leadership, now time.Time, intents map[string]config.Shift, versions map[string]uint64) error {
	if s.exec == nil {
		return nil
	}
	for _, p := range s.exec.Progress(now, intents, func(sh config.Shift) uint64 { return versions[sh.ProxyCluster] }) {
		k, err := s.layout.ShiftProgress(p.ID)
		if err != nil {
			return err
		}
		raw, _ := json.Marshal(p)
		r, err := s.cli.Txn(ctx).If(lead.Fence()).Then(clientv3.OpPut(k, string(raw))).Commit()
		if err != nil {
			return fmt.Errorf("write shift progress %s: %w", p.ID, err)
		}
		if !r.Succeeded {
			return fmt.Errorf("write shift progress %s: %w", p.ID, publish.ErrFenced)
		}
		s.exec.MarkWritten(p)
	}
	return nil
}

// collect is the leader's periodic orphan-part collection.
func (s *Scheduler) collect(ctx context.Context) {
	lead := s.lead.Load()
	if lead == nil {
		return
	}
	n, err := s.pub.CollectParts(ctx, lead, s.cfg.PartGrace)
	if err != nil {
		s.log.Warn("collecting orphan parts", "err", err)
	}
	if n > 0 {
		s.log.Info("collected orphan parts", "count", n)
	}
	if _, err := s.collectGone(ctx, lead); err != nil {
		s.log.Warn("collecting gone proxies", "err", err)
	}
}

// shiftResults is what the plan moved per shift, for the executor.
func shiftResults(pl *plan.Plan) map[string]shift.Result {
	out := map[string]shift.Result{}
	for id, r := range pl.ShiftResults() {
		out[id] = shift.Result{Moved: r.Moved, Reason: r.Reason}
	}
	return out
}

// followerShifts: followers do not run ramps; they show what the leader
// recorded.
func followerShifts(intents map[string]config.Shift, progress map[string]config.ShiftProgress) []shift.Active {
	ids := make([]string, 0, len(intents))
	for id := range intents {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []shift.Active
	for _, id := range ids {
		p, ok := progress[id]
		if !ok || intents[id].State == config.ShiftAborted || p.AppliedPercent <= 0 {
			continue
		}
		out = append(out, shift.Active{Shift: intents[id], AppliedPercent: p.AppliedPercent})
	}
	return out
}

func planView(v inventory.View, active []shift.Active) plan.View {
	pv := plan.View{State: v.State, Members: v.Members, Demand: v.Demand, Generations: v.Generations}
	for _, a := range active {
		pv.Shifts = append(pv.Shifts, plan.ActiveShift{Shift: a.Shift, AppliedPercent: a.AppliedPercent})
	}
	return pv
}

// reason says in a few words what changed for pc, e.g.
// "row demo-main; members demo-main/SC1; shift s-1 20/30".
func reason(pc string, next, prev *snapshot.Snapshot, active []shift.Active) string {
	if prev == nil {
		return "initial snapshot"
	}
	var parts []string
	if !reflect.DeepEqual(next.Products, prev.Products) || next.DefaultProduct != prev.DefaultProduct {
		parts = append(parts, "routes")
	}
	if !reflect.DeepEqual(next.Settings, prev.Settings) {
		parts = append(parts, "settings")
	}
	names := make([]string, 0, len(next.Clusters))
	for n := range next.Clusters {
		names = append(names, n)
	}
	for n := range prev.Clusters {
		if _, ok := next.Clusters[n]; !ok {
			parts = append(parts, "removed cluster "+n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		nc := next.Clusters[n]
		pc, ok := prev.Clusters[n]
		switch {
		case !ok:
			parts = append(parts, "new cluster "+n)
			continue
		case !reflect.DeepEqual(nc.Row, pc.Row):
			parts = append(parts, "row "+n)
		}
		subs := make([]string, 0, len(nc.SubClusters))
		for sn := range nc.SubClusters {
			subs = append(subs, sn)
		}
		sort.Strings(subs)
		for _, sn := range subs {
			if !reflect.DeepEqual(nc.SubClusters[sn], pc.SubClusters[sn]) {
				parts = append(parts, "members "+n+"/"+sn)
			}
		}
		if !reflect.DeepEqual(nc.Policy, pc.Policy) {
			parts = append(parts, "policy "+n)
		}
	}
	for _, a := range active {
		if a.Shift.ProxyCluster == pc {
			parts = append(parts, fmt.Sprintf("shift %s %d/%d", a.Shift.ID, a.AppliedPercent, a.Shift.Percent))
		}
	}
	if len(parts) > 8 {
		parts = append(parts[:8], fmt.Sprintf("and %d more", len(parts)-8))
	}
	if len(parts) == 0 {
		return "recomputed"
	}
	return strings.Join(parts, "; ")
}

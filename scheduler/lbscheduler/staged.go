package lbscheduler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/scheduler/internal/publish"
	"github.com/sluicelb/sluice/scheduler/internal/rollout"
	"github.com/sluicelb/sluice/scheduler/internal/shift"
	"github.com/sluicelb/sluice/scheduler/plan"
)

// stepRollouts moves every active staged rollout one step (leader only); it
// returns when to look again (zero: none active).
func (s *Scheduler) stepRollouts(ctx context.Context, lead *publish.Leadership, pcs []string) (next time.Time) {
	st := s.inv.View().State
	for _, pc := range pcs {
		var pol *config.RolloutPolicy
		if st != nil {
			pol = st.RolloutFor(pc)
		}
		rec, active, err := s.staged.Step(ctx, lead, pc, pol)
		if errors.Is(err, publish.ErrFenced) {
			select {
			case s.stepDown <- lead:
			default:
			}
			return next
		}
		if err != nil {
			s.log.Warn("staged rollout step failed", "proxy_cluster", pc, "err", err)
		}
		if !active && rec.Holds(rec.CandidateHash) {
			s.book.held(pc, rollout.HeldReason(rec))
		}
		if active || err != nil {
			next = s.cfg.Now().Add(rollout.Tick)
		}
	}
	return next
}

// held records that pc's newest inputs are held back by a rollback.
func (b *statusBook) held(pc, why string) {
	res := b.results[pc]
	res.Result, res.Reason = report.PublishRolledBack, why
	b.results[pc] = res
}

// urgentReason says why pc's new snapshot next skips the stages ("" when it
// does not): a drain of a sub-cluster that carries weight in the live
// snapshot, or weight leaving a sub-cluster that has no available instance
// left.
func urgentReason(st *config.State, live, next *snapshot.Snapshot) string {
	if st == nil || live == nil {
		return ""
	}
	for _, d := range st.Drains {
		if c, ok := live.Clusters[d.Cluster]; ok && c.Row.Weights[d.SubCluster] > 0 {
			return fmt.Sprintf("drain of cluster %s sub-cluster %s", d.Cluster, d.SubCluster)
		}
	}
	if next == nil {
		return ""
	}
	for _, name := range sortedNames(next.Clusters) {
		nc, lc := next.Clusters[name], live.Clusters[name]
		for _, sub := range sortedNames(lc.Row.Weights) {
			w := lc.Row.Weights[sub]
			if sub == config.Blackhole || w == 0 || nc.Row.Weights[sub] >= w || availableIn(nc.SubClusters[sub]) > 0 {
				continue
			}
			return fmt.Sprintf("weight leaving cluster %s sub-cluster %s, which has no available instance", name, sub)
		}
	}
	return ""
}

// markedUrgent says why pc's next snapshot, computed from inputs in, skips
// the stages because an operator marked the write urgent ("" when none did):
// the desired state's write carries the mark (lbctl --urgent) and the live
// snapshot was computed from an earlier one, or an active shift of pc is
// urgent (each of its steps).
func markedUrgent(st *config.State, active []shift.Active, pc string, live *snapshot.Snapshot, in *snapshot.Inputs) string {
	if st != nil && st.Urgent != nil && live != nil && (live.Meta.Inputs == nil || live.Meta.Inputs.Desired != in.Desired) {
		return fmt.Sprintf("%s --urgent by %s (desired state revision %d)", st.Urgent.What, st.Urgent.Author, in.Desired)
	}
	for _, a := range active {
		if a.Shift.ProxyCluster == pc && a.Shift.Urgent {
			return fmt.Sprintf("shift %s --urgent by %s", a.Shift.ID, a.Shift.Author)
		}
	}
	return ""
}

// availableIn counts a sub-cluster's instances that take traffic.
func availableIn(sc config.SubCluster) int {
	n := 0
	for _, in := range sc.Instances {
		if plan.Available(in) {
			n++
		}
	}
	return n
}

func sortedNames[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

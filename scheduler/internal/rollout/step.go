package rollout

import (
	"context"
	"fmt"
	"reflect"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
	rs "github.com/sluicelb/sluice/api/rollout"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/scheduler/internal/publish"
)

// Step judges pc's active rollout and moves it: the next stage, promotion,
// or rollback. It returns the record after the step (zero State: none) and
// whether the rollout still needs steps (then again after Tick).
func (c *Controller) Step(ctx context.Context, lead *publish.Leadership, pc string, pol *config.RolloutPolicy) (rs.Staged, bool, error) {
	rec, err := c.record(ctx, pc)
	if err != nil || !rec.Active() {
		return rec, false, err
	}
	ptr, ptrRev, err := c.pub.Current(ctx, pc)
	if err != nil {
		return rec, true, err
	}
	if ptr.Candidate == nil || ptr.Candidate.Rollout != rec.ID || ptr.Lineage != rec.Lineage {
		// The pointer moved outside this rollout (a wipe, an operator):
		// the record ends; the next publish starts afresh.
		rec.State, rec.Reason, rec.EndedAt = rs.StageAborted, "the pointer no longer carries this rollout's candidate", c.now().UTC()
		return rec, false, c.pub.Fenced(ctx, lead, c.put(rec))
	}
	if pol == nil || len(pol.Stages) == 0 {
		return rec, true, nil // the next publish ends it (publishAll)
	}
	op, del, err := c.op(ctx, pc)
	if err != nil {
		return rec, true, err
	}
	now := c.now().UTC().Truncate(time.Millisecond)
	before := rec
	switch op.Op {
	case rs.OpAbort:
		_, err := c.rollback(ctx, lead, rec, rs.StageAborted, "", "aborted by "+author(op), false)
		if err == nil {
			err = c.pub.Fenced(ctx, lead, del...)
		}
		rec, _ = c.record(ctx, pc)
		return rec, false, err
	case rs.OpPause:
		if rec.State != rs.StagePaused {
			rec.PausedState, rec.State, rec.Reason = rec.State, rs.StagePaused, "paused by "+author(op)
		}
	case rs.OpResume:
		if rec.State == rs.StagePaused {
			rec.State, rec.PausedState, rec.Reason = rec.PausedState, "", ""
			rec.StageStarted = now // the stage's timers start again
			if rec.State == rs.StageBaking {
				rec.BakeStarted = now
			}
		}
	case rs.OpPromote:
		if op.All {
			return c.promoteAll(ctx, lead, rec, ptr, ptrRev, now, del, "promoted to every proxy at once by "+author(op))
		}
		if rec.State != rs.StagePaused {
			return c.advance(ctx, lead, rec, ptr, ptrRev, pol, now, del, "promoted by "+author(op))
		}
	}
	stage := pol.Stages[min(rec.Stage, len(pol.Stages)-1)]
	gates := pol.Gates.WithDefaults()
	if rec.State == rs.StageProgressing || rec.State == rs.StageBaking {
		live, demand, err := c.reports(ctx, pc)
		if err != nil {
			return rec, true, err
		}
		sel := selected(ptr.Candidate, live)
		rec.Selected = ids(sel)
		gone, err := c.absent(ctx, rec, ptr.Candidate, live)
		if err != nil {
			return rec, true, err
		}
		v, done := applyGate(rec, live, sel, gone, gates.ApplyTimeout.D(), now)
		if rec.State == rs.StageBaking && v.failed == "" {
			cand, err := c.candidate(ctx, rec)
			if err != nil {
				return rec, true, err
			}
			stageSide, stableSide := c.sides(rec, live, demand, ptr.Candidate, cand)
			tv := trafficGates(stageSide, stableSide, gates, cand, rec.Baseline, judgements(stage.BakeTime()))
			if stableSide.answers >= uint64(*gates.MinRequests) {
				rec.Baseline = &rs.Baseline{Ratio5xx: stableSide.ratio(), P99Ms: stableSide.all.Quantile(0.99), Answers: stableSide.answers, At: now}
			}
			v.gates = append(v.gates, tv.gates...)
			if v.failed == "" {
				v.failed, v.reason = tv.failed, tv.reason
			}
		}
		rec.Gates = v.gates
		switch {
		case v.failed != "":
			reason := fmt.Sprintf("stage %d of %d, gate %s: %s", rec.Stage+1, rec.Stages, v.failed, v.reason)
			_, err := c.rollback(ctx, lead, rec, rs.StageRolledBack, v.failed, reason, false)
			if err == nil && len(del) > 0 {
				err = c.pub.Fenced(ctx, lead, del...)
			}
			rec, _ = c.record(ctx, pc)
			return rec, false, err
		case rec.State == rs.StageProgressing && done:
			rec.State, rec.BakeStarted = rs.StageBaking, now
		case rec.State == rs.StageBaking && done && now.Sub(rec.BakeStarted) >= stage.BakeTime():
			if pol.Promotion == config.PromotionManual {
				rec.State, rec.Reason = rs.StageAwaitingPromotion, fmt.Sprintf("stage %d of %d passed its gates; lbctl rollout promote starts the next", rec.Stage+1, rec.Stages)
			} else {
				return c.advance(ctx, lead, rec, ptr, ptrRev, pol, now, del, "gates passed")
			}
		}
	}
	if reflect.DeepEqual(before, rec) && len(del) == 0 {
		return rec, true, nil
	}
	return rec, true, c.pub.Fenced(ctx, lead, append(del, c.put(rec))...)
}

// promoted is the plain pointer to ptr's candidate. It keeps the
// candidate's push (snapshot.Push, written by PublishCandidate): its parts
// are the ones the candidate added, which the proxies outside the stage
// lack, so they read little or nothing at the promotion either; a proxy
// uses a push only for the version it names.
func promoted(ptr snapshot.Pointer) snapshot.Pointer {
	return snapshot.Pointer{Lineage: ptr.Lineage, Version: ptr.Candidate.Version, Hash: ptr.Candidate.Hash, Push: ptr.Push}
}

// promoteAll makes the candidate every proxy's snapshot now (URGENT).
func (c *Controller) promoteAll(ctx context.Context, lead *publish.Leadership, rec rs.Staged, ptr snapshot.Pointer, ptrRev int64,
	now time.Time, del []clientv3.Op, why string) (rs.Staged, bool, error) {
	next := promoted(ptr)
	rec.State, rec.Reason, rec.EndedAt, rec.PausedState = rs.StageUrgent, why, now, ""
	if err := c.pub.MovePointer(ctx, lead, rec.ProxyCluster, ptrRev, next, append(del, c.put(rec))...); err != nil {
		return rec, true, err
	}
	c.log.Warn("staged rollout skipped its remaining stages", "proxy_cluster", rec.ProxyCluster, "rollout", rec.ID, "why", why)
	return rec, false, nil
}

// advance starts the next stage, or promotes the candidate after the last.
func (c *Controller) advance(ctx context.Context, lead *publish.Leadership, rec rs.Staged, ptr snapshot.Pointer, ptrRev int64,
	pol *config.RolloutPolicy, now time.Time, del []clientv3.Op, why string) (rs.Staged, bool, error) {
	if rec.Stage+1 >= len(pol.Stages) {
		next := promoted(ptr)
		rec.State, rec.Reason, rec.EndedAt, rec.Selected = rs.StageDone, why+": promoted to every proxy", now, nil
		if err := c.pub.MovePointer(ctx, lead, rec.ProxyCluster, ptrRev, next, append(del, c.put(rec))...); err != nil {
			return rec, true, err
		}
		c.log.Info("staged rollout promoted to every proxy", "proxy_cluster", rec.ProxyCluster, "rollout", rec.ID, "version", next.Version)
		return rec, false, nil
	}
	live, _, err := c.reports(ctx, rec.ProxyCluster)
	if err != nil {
		return rec, true, err
	}
	sel := selection(pol.Stages[rec.Stage+1], rec.ProxyCluster, ids(live))
	// A stage includes the previous stages' proxies.
	sel.IDs = union(sel.IDs, ptr.Candidate.IDs)
	sel.Percent = max(sel.Percent, ptr.Candidate.Percent)
	sel.All = sel.All || ptr.Candidate.All
	sel.Version, sel.Hash, sel.Rollout, sel.Stage = ptr.Candidate.Version, ptr.Candidate.Hash, rec.ID, rec.Stage+1
	next := ptr
	next.Candidate = &sel
	rec.Stage++
	rec.State, rec.Reason, rec.StageStarted, rec.BakeStarted, rec.Gates = rs.StageProgressing, "", now, time.Time{}, nil
	if err := c.pub.MovePointer(ctx, lead, rec.ProxyCluster, ptrRev, next, append(del, c.put(rec))...); err != nil {
		return rec, true, err
	}
	c.log.Info("staged rollout: next stage", "proxy_cluster", rec.ProxyCluster, "rollout", rec.ID, "stage", rec.Stage+1, "of", rec.Stages, "why", why)
	return rec, true, nil
}

// sides splits the demand reports written since the bake started into the
// stage's proxies running the candidate and the others running stable.
func (c *Controller) sides(rec rs.Staged, live []report.ProxyStatus, demand map[string]report.Demand, cand *snapshot.Candidate, snap *snapshot.Snapshot) (stage, stable side) {
	for _, st := range live {
		if !cand.Selects(st.ID) && st.AppliedLineage == rec.Lineage && st.AppliedVersion == rec.StableVersion {
			stable.live++
		}
		d, ok := demand[st.ID]
		if !ok || d.UpdatedAt.Before(rec.BakeStarted) || st.AppliedLineage != rec.Lineage {
			continue
		}
		switch {
		case cand.Selects(st.ID) && st.AppliedVersion == rec.CandidateVersion:
			stage.add(d, snap)
		case !cand.Selects(st.ID) && st.AppliedVersion == rec.StableVersion:
			stable.add(d, snap)
		}
	}
	return stage, stable
}

// candidate loads (once) the candidate snapshot: the gates compare with its
// weights and policies.
func (c *Controller) candidate(ctx context.Context, rec rs.Staged) (*snapshot.Snapshot, error) {
	k := fmt.Sprintf("%s/%d", rec.ProxyCluster, rec.CandidateVersion)
	if s := c.snaps[k]; s != nil {
		return s, nil
	}
	s, err := c.pub.Load(ctx, rec.ProxyCluster, rec.CandidateVersion)
	if err != nil {
		return nil, err
	}
	if len(c.snaps) > 32 { // one candidate per proxy cluster at a time
		clear(c.snaps)
	}
	c.snaps[k] = s
	return s, nil
}

func union(a, b []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range append(append([]string(nil), a...), b...) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func author(op rs.RolloutOp) string {
	if op.Author == "" {
		return "an operator"
	}
	return op.Author
}

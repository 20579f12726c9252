// Package rollout is the scheduler leader's staged rollout controller: with
// a rollout policy (config.RolloutPolicy) a new snapshot is published as a
// candidate that only the current stage's proxies run (snapshot.Candidate
// in the pointer), gates judge each stage from the proxies' status and
// traffic reports, and a breach republishes the stable content as a new
// version (a rollback). The record (api/rollout.Staged, rollouts/<pc>) is
// written in the same fenced transactions as the pointer, so a new leader
// continues from the recorded stage.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/keys"
	rs "github.com/sluicelb/sluice/api/rollout"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/scheduler/internal/publish"
)

// Tick is how often an active rollout's gates are judged.
const Tick = time.Second

// Controller runs the staged rollouts of every proxy cluster. It is used
// from the scheduler's control loop only (one goroutine).
type Controller struct {
	cli    *clientv3.Client
	layout keys.Layout
	pub    *publish.Publisher
	log    *slog.Logger
	now    func() time.Time
	snaps  map[string]*snapshot.Snapshot // candidate snapshots by pc/version
}

// Options configures a Controller.
type Options struct {
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now is the clock of bake times, stage deadlines and the record's
	// stamps (default time.Now).
	Now func() time.Time
}

// New returns a controller publishing through pub.
func New(cli *clientv3.Client, layout keys.Layout, pub *publish.Publisher, o Options) *Controller {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Controller{cli: cli, layout: layout, pub: pub, log: o.Logger.With("component", "rollout"), now: o.Now,
		snaps: map[string]*snapshot.Snapshot{}}
}

// Outcome is a publish through the controller.
type Outcome struct {
	publish.Result
	// Held: the inputs are those of a rolled-back candidate; not published
	// again until they change or `lbctl rollout retry` (the reason).
	Held string
}

// Publish publishes pc's snapshot of content hash (build makes it): staged
// when pol is set and the change is not urgent (urgent says why it is),
// else to every proxy at once (ending a rollout in progress).
func (c *Controller) Publish(ctx context.Context, lead *publish.Leadership, pc, hash string,
	build func() (*snapshot.Snapshot, string), pol *config.RolloutPolicy, urgent string, inputRev int64) (Outcome, error) {
	rec, err := c.record(ctx, pc)
	if err != nil {
		return Outcome{}, err
	}
	ptr, _, err := c.pub.Current(ctx, pc)
	if err != nil {
		return Outcome{}, err
	}
	if pol == nil || len(pol.Stages) == 0 || urgent != "" || ptr.Version == 0 {
		return c.publishAll(ctx, lead, pc, hash, build, pol, urgent, ptr, rec)
	}
	if rec.Holds(hash) {
		op, del, err := c.op(ctx, pc)
		if err != nil {
			return Outcome{}, err
		}
		if op.Op != rs.OpRetry {
			if op.Op != "" { // nothing else applies to an ended rollout
				_ = c.pub.Fenced(ctx, lead, del...)
			}
			return Outcome{Result: publish.Result{Outcome: publish.Unchanged, Lineage: ptr.Lineage, Version: ptr.Version, Hash: ptr.Hash},
				Held: heldReason(rec)}, nil
		}
		c.log.Info("retrying a held candidate on the operator's request", "proxy_cluster", pc, "rollout", rec.ID, "by", op.Author)
		rec.Released = true
		if err := c.pub.Fenced(ctx, lead, append(del, c.put(rec))...); err != nil {
			return Outcome{}, err
		}
	}
	if ptr.Candidate != nil {
		if ptr.Candidate.Hash == hash {
			return Outcome{Result: publish.Result{Outcome: publish.Unchanged, Lineage: ptr.Lineage, Version: ptr.Candidate.Version, Hash: hash}}, nil
		}
		// New inputs mid-rollout: the stable content first (so that the
		// proxies that ran the old candidate come back), then a new rollout.
		why := fmt.Sprintf("superseded by input revision %d", inputRev)
		if ptr.Hash == hash {
			why = fmt.Sprintf("the inputs went back to the stable content (input revision %d)", inputRev)
		}
		if _, err := c.rollback(ctx, lead, rec, rs.StageAborted, "", why, true); err != nil {
			return Outcome{}, err
		}
		if ptr, _, err = c.pub.Current(ctx, pc); err != nil {
			return Outcome{}, err
		}
	}
	if ptr.Hash == hash && ptr.Candidate == nil {
		return Outcome{Result: publish.Result{Outcome: publish.Unchanged, Lineage: ptr.Lineage, Version: ptr.Version, Hash: hash}}, nil
	}
	live, _, err := c.reports(ctx, pc)
	if err != nil {
		return Outcome{}, err
	}
	now := c.now().UTC().Truncate(time.Millisecond)
	var next rs.Staged
	res, err := c.pub.PublishCandidate(ctx, lead, pc, hash, build,
		func(version uint64) snapshot.Candidate {
			sel := selection(pol.Stages[0], pc, ids(live))
			sel.Rollout, sel.Stage = fmt.Sprintf("%s-v%d", pc, version), 0
			return sel
		},
		func(cur, ptr snapshot.Pointer) []clientv3.Op {
			next = rs.Staged{ID: ptr.Candidate.Rollout, ProxyCluster: pc, State: rs.StageProgressing, Lineage: ptr.Lineage,
				StableVersion: cur.Version, StableHash: cur.Hash, CandidateVersion: ptr.Candidate.Version, CandidateHash: ptr.Candidate.Hash,
				Stage: 0, Stages: len(pol.Stages), InputRevision: inputRev, StartedAt: now, StageStarted: now}
			return []clientv3.Op{c.put(next)}
		})
	if err == nil && res.Outcome == publish.Published {
		c.log.Info("staged rollout started", "proxy_cluster", pc, "rollout", next.ID, "stable_version", next.StableVersion,
			"candidate_version", next.CandidateVersion, "stages", next.Stages)
	}
	return Outcome{Result: res}, err
}

// publishAll publishes to every proxy at once; a rollout in progress ends
// (URGENT when urgent says why, else ABORTED: the policy was removed).
func (c *Controller) publishAll(ctx context.Context, lead *publish.Leadership, pc, hash string,
	build func() (*snapshot.Snapshot, string), pol *config.RolloutPolicy, urgent string, ptr snapshot.Pointer, rec rs.Staged) (Outcome, error) {
	if ptr.Candidate == nil && (urgent == "" || pol == nil || ptr.Hash == hash) {
		res, err := c.pub.PublishHash(ctx, lead, pc, hash, build)
		return Outcome{Result: res}, err
	}
	s, why := build()
	if s == nil {
		return Outcome{}, fmt.Errorf("publish %s: %w: no snapshot for this proxy cluster", pc, publish.ErrInvalid)
	}
	cp := *s
	if cp.Meta.Hash == "" {
		cp.Meta.Hash = hash
	}
	state, reason := rs.StageUrgent, urgent
	if urgent == "" {
		state, reason = rs.StageAborted, "the rollout policy was removed: published to every proxy"
	} else {
		why += " (urgent: " + urgent + ")"
	}
	now := c.now().UTC()
	res, err := c.pub.Republish(ctx, lead, &cp, why, func(cur, next snapshot.Pointer) []clientv3.Op {
		if rec.State == "" || !rec.Active() {
			rec = rs.Staged{ID: fmt.Sprintf("%s-v%d", pc, next.Version), ProxyCluster: pc, Lineage: next.Lineage,
				StableVersion: cur.Version, StableHash: cur.Hash, StartedAt: now, StageStarted: now}
		}
		rec.State, rec.Reason, rec.EndedAt = state, reason, now
		rec.CandidateVersion, rec.CandidateHash = next.Version, next.Hash
		return []clientv3.Op{c.put(rec)}
	})
	if err == nil {
		c.log.Warn("published to every proxy at once", "proxy_cluster", pc, "version", res.Version, "state", state, "reason", reason)
	}
	return Outcome{Result: res}, err
}

// rollback republishes the stable content as a new version every proxy runs
// and ends rec as state (ROLLED_BACK or ABORTED) with gate and reason.
func (c *Controller) rollback(ctx context.Context, lead *publish.Leadership, rec rs.Staged, state, gate, reason string, release bool) (publish.Result, error) {
	stable, err := c.pub.Load(ctx, rec.ProxyCluster, rec.StableVersion)
	if err != nil {
		return publish.Result{}, fmt.Errorf("rollback %s: read stable v%d: %w", rec.ID, rec.StableVersion, err)
	}
	why := fmt.Sprintf("rollback of %s (v%d): %s", rec.ID, rec.CandidateVersion, reason)
	if state == rs.StageAborted {
		why = fmt.Sprintf("abort of %s (v%d): %s", rec.ID, rec.CandidateVersion, reason)
	}
	now := c.now().UTC().Truncate(time.Millisecond)
	res, err := c.pub.Republish(ctx, lead, stable, why, func(_, next snapshot.Pointer) []clientv3.Op {
		rec.State, rec.FailedGate, rec.Reason, rec.EndedAt, rec.RollbackVersion = state, gate, reason, now, next.Version
		rec.Released = release
		return []clientv3.Op{c.put(rec)}
	})
	if err != nil {
		return res, err
	}
	c.log.Warn("staged rollout ended: stable content republished", "proxy_cluster", rec.ProxyCluster, "rollout", rec.ID,
		"state", state, "gate", gate, "reason", reason, "version", res.Version)
	return res, nil
}

// heldReason says why a rollout holds its inputs back, and what releases
// them.
func heldReason(rec rs.Staged) string {
	what := "rolled back"
	if rec.State == rs.StageAborted {
		what = "aborted"
	}
	return fmt.Sprintf("rollout %s was %s (%s); lbctl rollout retry or new inputs release it", rec.ID, what, rec.Reason)
}

// HeldReason is heldReason for the scheduler's status.
func HeldReason(rec rs.Staged) string { return heldReason(rec) }

// ErrNoRecord: the pointer carries a candidate the record does not describe.
var ErrNoRecord = errors.New("staged rollout record does not match the pointer")

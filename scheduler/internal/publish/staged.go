package publish

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/snapshot"
)

// Staged rollouts (scheduler/internal/rollout) publish through these: a candidate
// that only the stage's proxies run, pointer moves between stages, and the
// republication of the stable content as a new version (a rollback). Each
// commits its pointer with the caller's extra operations (the rollout
// record) in one transaction fenced on the leadership.

// PublishCandidate publishes the snapshot build returns as a new version
// named by the pointer's Candidate (sel fills in its selection); Version and
// Hash of the pointer stay the stable snapshot's. Unchanged when the pointer
// already carries this candidate. extra gets the current and the new pointer.
func (p *Publisher) PublishCandidate(ctx context.Context, lead *Leadership, pc, hash string,
	build func() (*snapshot.Snapshot, string), sel func(version uint64) snapshot.Candidate,
	extra func(cur, next snapshot.Pointer) []clientv3.Op) (Result, error) {
	res, err := p.count(p.publish(ctx, lead, pc, hash, build, how{
		unchanged: func(cur snapshot.Pointer, lineage, hash string) bool {
			return cur.Lineage == lineage && cur.Candidate != nil && cur.Candidate.Hash == hash
		},
		pointer: func(cur snapshot.Pointer, lineage string, version uint64, hash string) snapshot.Pointer {
			c := sel(version)
			c.Version, c.Hash = version, hash
			return snapshot.Pointer{Lineage: cur.Lineage, Version: cur.Version, Hash: cur.Hash, Candidate: &c}
		},
		extra: extra,
	}))
	if err == nil && res.Outcome == Unchanged {
		ptr, _, rerr := p.Current(ctx, pc)
		if rerr == nil && ptr.Candidate != nil {
			res.Version = ptr.Candidate.Version
		}
	}
	return res, err
}

// Republish publishes s's content again as a new version every proxy runs
// (a rollback: the proxies that applied a candidate move forward to the
// stable content; versions never go back). s.Meta.Hash must be set.
func (p *Publisher) Republish(ctx context.Context, lead *Leadership, s *snapshot.Snapshot, reason string,
	extra func(cur, next snapshot.Pointer) []clientv3.Op) (Result, error) {
	w := plainPublish
	w.unchanged = func(snapshot.Pointer, string, string) bool { return false }
	w.extra = extra
	return p.count(p.publish(ctx, lead, s.Meta.ProxyCluster, s.Meta.Hash,
		func() (*snapshot.Snapshot, string) { return s, reason }, w))
}

// MovePointer writes next as pc's pointer if the pointer key still has mod
// revision rev, with extra, fenced on lead. It returns ErrConflict when the
// pointer moved, ErrFenced when the leadership ended.
func (p *Publisher) MovePointer(ctx context.Context, lead *Leadership, pc string, rev int64, next snapshot.Pointer, extra ...clientv3.Op) error {
	k, err := p.layout.Current(pc)
	if err != nil {
		return err
	}
	if err := next.CheckCandidate(); err != nil {
		return fmt.Errorf("move pointer %s: %w: %w", pc, ErrInvalid, err)
	}
	raw, _ := json.Marshal(next)
	r, err := p.cli.Txn(ctx).If(lead.Fence(), clientv3.Compare(clientv3.ModRevision(k), "=", rev)).
		Then(append([]clientv3.Op{clientv3.OpPut(k, string(raw))}, extra...)...).
		Else(clientv3.OpGet(lead.Key, clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return fmt.Errorf("move pointer %s: %w", pc, err)
	}
	if r.Succeeded {
		return nil
	}
	if !leaderKeyHolds(r.Responses[0].GetResponseRange().Kvs, lead.Rev) {
		return fmt.Errorf("move pointer %s: %w", pc, ErrFenced)
	}
	return fmt.Errorf("move pointer %s: %w", pc, ErrConflict)
}

// Fenced commits ops fenced on lead (the rollout record alone).
func (p *Publisher) Fenced(ctx context.Context, lead *Leadership, ops ...clientv3.Op) error {
	r, err := p.cli.Txn(ctx).If(lead.Fence()).Then(ops...).Commit()
	if err != nil {
		return err
	}
	if !r.Succeeded {
		return ErrFenced
	}
	return nil
}

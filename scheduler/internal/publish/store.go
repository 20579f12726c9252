package publish

import (
	"context"
	"fmt"
	"sort"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/snapio"
	"github.com/sluicelb/sluice/api/snapshot"
)

// maxOpsPerTxn stays below etcd's default limit of 128 operations.
const maxOpsPerTxn = 100

// Manifest reads the manifest of one version.
func (p *Publisher) Manifest(ctx context.Context, pc string, version uint64) (snapshot.Manifest, error) {
	m, found, err := snapio.Manifest(ctx, p.cli, p.layout, pc, version)
	if err == nil && !found {
		k, _ := p.layout.Snapshot(pc, version)
		err = fmt.Errorf("read %s: not found", k)
	}
	return m, err
}

// Load reads and decodes one version (parts fetched and checked).
func (p *Publisher) Load(ctx context.Context, pc string, version uint64) (*snapshot.Snapshot, error) {
	m, err := p.Manifest(ctx, pc, version)
	if err != nil {
		return nil, err
	}
	return snapshot.DecodeBatch(m, snapio.PartsBatch(ctx, p.cli, p.layout))
}

// History returns the metadata of the kept versions of pc, oldest first.
func (p *Publisher) History(ctx context.Context, pc string) ([]snapshot.Meta, error) {
	pfx, err := p.layout.SnapshotPrefix(pc)
	if err != nil {
		return nil, err
	}
	r, err := p.cli.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", pc, err)
	}
	out := make([]snapshot.Meta, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		var m snapshot.Manifest
		if err := codec.UnmarshalJSON(kv.Value, &m); err != nil {
			return nil, fmt.Errorf("history %s: %s: %w", pc, kv.Key, err)
		}
		out = append(out, m.Meta)
	}
	return out, nil
}

// LoadCurrent returns the live snapshot of every proxy cluster that has one.
// cache holds previously loaded snapshots; entries whose hash still matches
// the pointer are reused instead of fetched again. A pointer whose snapshot
// cannot be read is left out (the planner then works without a previous row)
// and reported in the error, which does not stop the others.
func (p *Publisher) LoadCurrent(ctx context.Context, cache map[string]*snapshot.Snapshot) (map[string]*snapshot.Snapshot, error) {
	r, err := p.cli.Get(ctx, p.layout.CurrentPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read current pointers: %w", err)
	}
	out := make(map[string]*snapshot.Snapshot, len(r.Kvs))
	var firstErr error
	for _, kv := range r.Kvs {
		pc, err := p.layout.ParseCurrent(string(kv.Key))
		if err != nil {
			continue
		}
		var ptr snapshot.Pointer
		if err := codec.UnmarshalJSON(kv.Value, &ptr); err != nil {
			firstErr = fmt.Errorf("pointer %s: %w", kv.Key, err)
			continue
		}
		if c := cache[pc]; c != nil && c.Meta.Hash == ptr.Hash && c.Meta.Version == ptr.Version {
			out[pc] = c
			continue
		}
		s, err := p.Load(ctx, pc, ptr.Version)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		out[pc] = s
	}
	return out, firstErr
}

// Prune deletes all but the newest keep manifests of pc (fenced on lead).
// Parts only they referenced become orphans for CollectParts.
func (p *Publisher) Prune(ctx context.Context, lead *Leadership, pc string, keep int) (int, error) {
	if keep < 1 {
		keep = 1
	}
	pfx, err := p.layout.SnapshotPrefix(pc)
	if err != nil {
		return 0, err
	}
	r, err := p.cli.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return 0, fmt.Errorf("prune %s: %w", pc, err)
	}
	if len(r.Kvs) <= keep {
		return 0, nil
	}
	var del []string
	for _, kv := range r.Kvs[:len(r.Kvs)-keep] {
		del = append(del, string(kv.Key))
	}
	return p.deleteFenced(ctx, lead, del, nil)
}

// CollectParts deletes parts that no manifest references and that were
// already unreferenced at least grace ago (as seen by earlier calls on this
// Publisher; grace 0 deletes at once). Parts are listed before manifests, so
// a part written by a publish that commits in between is never a candidate.
// It returns how many parts were deleted.
func (p *Publisher) CollectParts(ctx context.Context, lead *Leadership, grace time.Duration) (int, error) {
	pr, err := p.cli.Get(ctx, p.layout.PartsPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return 0, fmt.Errorf("collect parts: %w", err)
	}
	mr, err := p.cli.Get(ctx, p.layout.Root()+"snapshots/", clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("collect parts: %w", err)
	}
	used, err := p.usedParts(ctx, mr.Kvs)
	if err != nil {
		return 0, err
	}
	now := p.now()
	seen := map[string]bool{}
	var del []string
	revs := map[string]int64{}
	for _, kv := range pr.Kvs {
		k := string(kv.Key)
		d := k[len(p.layout.PartsPrefix()):]
		if used[d] {
			continue
		}
		seen[d] = true
		first, ok := p.orphans[d]
		if !ok {
			first = now
			p.orphans[d] = now
		}
		if now.Sub(first) >= grace {
			del = append(del, k)
			revs[k] = kv.ModRevision
		}
	}
	for d := range p.orphans {
		if !seen[d] {
			delete(p.orphans, d)
		}
	}
	sort.Strings(del)
	n, err := p.deleteFenced(ctx, lead, del, revs)
	for _, k := range del[:n] {
		delete(p.orphans, k[len(p.layout.PartsPrefix()):])
	}
	return n, err
}

// usedParts is the set of parts the manifests reference: their Parts, or
// for split manifests their head, buckets and every cluster part a bucket
// lists (buckets read from etcd; the answer is kept per manifest key and
// mod revision, manifests being immutable). An unreadable manifest or
// bucket might reference anything: it is an error, and nothing is collected.
func (p *Publisher) usedParts(ctx context.Context, manifests []*mvccpb.KeyValue) (map[string]bool, error) {
	used := map[string]bool{}
	live := map[string]bool{}
	for _, kv := range manifests {
		id := fmt.Sprintf("%s@%d", kv.Key, kv.ModRevision)
		live[id] = true
		refs, ok := p.refs[id]
		if !ok {
			var m snapshot.Manifest
			if err := codec.UnmarshalJSON(kv.Value, &m); err != nil {
				return nil, fmt.Errorf("collect parts: manifest %s: %w", kv.Key, err)
			}
			var err error
			if refs, err = snapshot.Refs(m, snapio.PartsBatch(ctx, p.cli, p.layout)); err != nil {
				return nil, fmt.Errorf("collect parts: manifest %s: %w", kv.Key, err)
			}
			p.refs[id] = refs
		}
		for _, d := range refs {
			used[d] = true
		}
	}
	for id := range p.refs {
		if !live[id] {
			delete(p.refs, id)
		}
	}
	return used, nil
}

// deleteFenced deletes keys in batches, each batch one transaction fenced on
// lead (and, when revs has the key, on its mod revision being unchanged).
func (p *Publisher) deleteFenced(ctx context.Context, lead *Leadership, del []string, revs map[string]int64) (int, error) {
	done := 0
	for len(del) > done {
		end := min(done+maxOpsPerTxn, len(del))
		batch := del[done:end]
		cmps := []clientv3.Cmp{lead.Fence()}
		ops := make([]clientv3.Op, 0, len(batch))
		for _, k := range batch {
			if rev, ok := revs[k]; ok && len(cmps) < maxOpsPerTxn {
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", rev))
			}
			ops = append(ops, clientv3.OpDelete(k))
		}
		r, err := p.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return done, fmt.Errorf("delete: %w", err)
		}
		if !r.Succeeded {
			return done, fmt.Errorf("delete: %w (or a key changed meanwhile)", ErrFenced)
		}
		done = end
	}
	return done, nil
}

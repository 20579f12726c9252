// Package snapio reads published snapshots back from etcd — a version's
// manifest and its content-addressed parts, decoded strictly — for the
// readers that are not the proxy's watcher (lbctl, the scheduler's
// publisher, the dev fleet). The watcher (proxy/internal/configwatch) reads the same
// keys with its own per-operation deadlines and error classes.
package snapio

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/snapshot"
)

// Manifest reads snapshots/<pc>/<version>. found is false (and err nil)
// when the key is not there, e.g. after history trimming.
func Manifest(ctx context.Context, kv clientv3.KV, layout keys.Layout, pc string, version uint64) (m snapshot.Manifest, found bool, err error) {
	k, err := layout.Snapshot(pc, version)
	if err != nil {
		return snapshot.Manifest{}, false, err
	}
	r, err := kv.Get(ctx, k)
	if err != nil {
		return snapshot.Manifest{}, false, fmt.Errorf("read %s: %w", k, err)
	}
	if len(r.Kvs) == 0 {
		return snapshot.Manifest{}, false, nil
	}
	if err := codec.UnmarshalJSON(r.Kvs[0].Value, &m); err != nil {
		return snapshot.Manifest{}, false, fmt.Errorf("manifest %s: %w", k, err)
	}
	return m, true, nil
}

// Parts is the part reader snapshot.Decode takes: parts/<digest> from kv, a
// missing part being snapshot.ErrMissingPart.
func Parts(ctx context.Context, kv clientv3.KV, layout keys.Layout) func(digest string) ([]byte, error) {
	return func(digest string) ([]byte, error) {
		k, err := layout.Part(digest)
		if err != nil {
			return nil, err
		}
		r, err := kv.Get(ctx, k)
		if err != nil {
			return nil, err
		}
		if len(r.Kvs) == 0 {
			return nil, snapshot.ErrMissingPart
		}
		return r.Kvs[0].Value, nil
	}
}

// MaxGetsPerTxn is how many parts PartsBatch reads in one transaction
// (etcd's default limit is 128 operations).
const MaxGetsPerTxn = 100

// PartsBatch is the batch part reader snapshot.DecodeBatch takes: the parts
// are read in transactions of up to MaxGetsPerTxn gets each (one round trip
// for most snapshots); a missing part is a nil entry.
func PartsBatch(ctx context.Context, kv clientv3.KV, layout keys.Layout) snapshot.GetMany {
	return func(digests []string) ([][]byte, error) {
		out := make([][]byte, 0, len(digests))
		for off := 0; off < len(digests); off += MaxGetsPerTxn {
			batch := digests[off:min(off+MaxGetsPerTxn, len(digests))]
			ops := make([]clientv3.Op, 0, len(batch))
			for _, d := range batch {
				k, err := layout.Part(d)
				if err != nil {
					return nil, err
				}
				ops = append(ops, clientv3.OpGet(k))
			}
			r, err := kv.Txn(ctx).Then(ops...).Commit()
			if err != nil {
				return nil, fmt.Errorf("read %d parts from %s: %w", len(batch), batch[0], err)
			}
			for _, resp := range r.Responses {
				var v []byte
				if kvs := resp.GetResponseRange().Kvs; len(kvs) > 0 {
					v = kvs[0].Value
				}
				out = append(out, v)
			}
		}
		return out, nil
	}
}

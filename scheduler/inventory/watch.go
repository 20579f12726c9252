package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// errStalled is returned by one watch round when no response (not even a
// progress notification) arrived for the stall timeout after a progress request.
var errStalled = errors.New("watch stalled")

// sink receives one prefix's content: a full listing (resync) or a batch of
// events, always in revision order.
type sink interface {
	reset(kvs []*mvccpb.KeyValue, rev int64)
	apply(evs []*clientv3.Event, rev int64)
	// heard records that the watch is alive at rev (progress notification).
	heard(rev int64)
}

// watchLoop lists prefix, then watches it from revision+1; it lists again on
// compaction, a closed channel or a stall, with capped exponential backoff
// between failed rounds. It returns when ctx is done.
func watchLoop(ctx context.Context, cli *clientv3.Client, prefix string, s sink, stall time.Duration, log *slog.Logger, resyncs func()) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		listed, err := watchRound(ctx, cli, prefix, s, stall)
		if ctx.Err() != nil {
			return
		}
		if listed {
			// The round worked for a while: start backing off from scratch.
			backoff = 100 * time.Millisecond
		} else if f, ok := s.(interface{ listFailed() }); ok {
			f.listFailed()
		}
		resyncs()
		log.Warn("inventory watch resync", "prefix", prefix, "err", err, "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// watchRound is one list-then-watch; it returns whether the listing worked
// and why the watch ended.
func watchRound(ctx context.Context, cli *clientv3.Client, prefix string, s sink, stall time.Duration) (listed bool, err error) {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	resp, err := cli.Get(lctx, prefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return false, fmt.Errorf("list %s: %w", prefix, err)
	}
	rev := resp.Header.Revision
	s.reset(resp.Kvs, rev)

	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer wcancel()
	wch := cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithProgressNotify())
	timer := time.NewTimer(stall)
	defer timer.Stop()
	asked := false
	for {
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case <-timer.C:
			if asked {
				// etcd does not answer a progress request while the watch's
				// start revision is still in the future (nothing at all was
				// written since our listing). Tell that quiet case from a
				// stuck watch by the store's revision.
				gctx, cancel := context.WithTimeout(ctx, max(stall, 5*time.Second))
				r, err := cli.Get(gctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
				cancel()
				if err != nil || r.Header.Revision > rev {
					return true, errStalled
				}
				s.heard(rev)
				asked = false
				timer.Reset(stall)
				continue
			}
			// Nothing for a while: ask for a progress notification; if even
			// that does not come, the watch is stuck and we list again.
			asked = true
			_ = cli.RequestProgress(wctx)
			timer.Reset(stall)
		case wr, ok := <-wch:
			if !ok {
				return true, errors.New("watch channel closed")
			}
			if wr.CompactRevision != 0 {
				return true, fmt.Errorf("watch compacted at %d", wr.CompactRevision)
			}
			if err := wr.Err(); err != nil {
				return true, fmt.Errorf("watch: %w", err)
			}
			asked = false
			timer.Reset(stall)
			rev = max(rev, wr.Header.Revision)
			if len(wr.Events) > 0 {
				s.apply(wr.Events, wr.Header.Revision)
			} else {
				s.heard(wr.Header.Revision)
			}
		}
	}
}

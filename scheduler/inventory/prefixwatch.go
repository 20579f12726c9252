package inventory

import (
	"context"
	"log/slog"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// PrefixSink receives one watched prefix's content from WatchPrefix: a full
// listing (Reset) or a batch of events (Apply), in revision order, and Heard
// when a quiet watch is confirmed alive.
type PrefixSink interface {
	Reset(kvs []*mvccpb.KeyValue, rev int64)
	Apply(evs []*clientv3.Event, rev int64)
	Heard(rev int64)
}

// WatchPrefix runs the inventory's list-then-watch loop (resync on
// compaction, closed channels and stalls, capped backoff) over one more
// prefix for another reader in the scheduler, such as the dashboard. It
// returns when ctx is done.
func WatchPrefix(ctx context.Context, cli *clientv3.Client, prefix string, s PrefixSink, stall time.Duration, log *slog.Logger) {
	if stall <= 0 {
		stall = 30 * time.Second
	}
	watchLoop(ctx, cli, prefix, sinkAdapter{s}, stall, log, func() {})
}

type sinkAdapter struct{ s PrefixSink }

func (a sinkAdapter) reset(kvs []*mvccpb.KeyValue, rev int64) { a.s.Reset(kvs, rev) }
func (a sinkAdapter) apply(evs []*clientv3.Event, rev int64)  { a.s.Apply(evs, rev) }
func (a sinkAdapter) heard(rev int64)                         { a.s.Heard(rev) }

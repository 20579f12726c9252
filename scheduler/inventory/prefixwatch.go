package inventory

import (
	"context"
	"log/slog"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/etcdwatch"
)

// PrefixSink receives one watched prefix's content from WatchPrefix: a full
// listing (Reset) or a batch of events (Apply), in revision order, and Heard
// when a quiet watch is confirmed alive.
type PrefixSink interface {
	Reset(kvs []*mvccpb.KeyValue, rev int64)
	Apply(evs []*clientv3.Event, rev int64)
	Heard(rev int64)
}

// WatchPrefix runs the list-then-watch loop of api/etcdwatch (resync on
// compaction, closed channels, stalls and a replaced store, with backoff)
// over one more prefix for another reader in the scheduler, such as the
// dashboard. It returns when ctx is done.
func WatchPrefix(ctx context.Context, cli *clientv3.Client, prefix string, s PrefixSink, stall time.Duration, log *slog.Logger) {
	_ = etcdwatch.Run(ctx, etcdwatch.Config{
		Client: cli, Key: prefix, Prefix: true, StallTimeout: stall, Logger: log,
	}, sinkAdapter{s})
}

type sinkAdapter struct{ s PrefixSink }

func (a sinkAdapter) Reset(kvs []*mvccpb.KeyValue, rev int64) error { a.s.Reset(kvs, rev); return nil }
func (a sinkAdapter) Apply(evs []*clientv3.Event, rev int64) error  { a.s.Apply(evs, rev); return nil }
func (a sinkAdapter) Heard(rev int64)                               { a.s.Heard(rev) }

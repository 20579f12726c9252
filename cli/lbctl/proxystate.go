package lbctl

import (
	"context"
	"fmt"
	"sort"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/rollout"
)

// lastSeen reads the last-seen records of pc's proxies (all if "").
func (e *env) lastSeen(ctx context.Context, pc string) ([]report.ProxyStatus, error) {
	prefix, err := e.layout.LastSeenPrefix(pc)
	if err != nil {
		return nil, err
	}
	seen, err := e.statusesUnder(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("read last-seen records: %w", err)
	}
	return seen, nil
}

// statusesUnder reads every proxy status under prefix (status keys or
// last-seen records), sorted by proxy cluster and id; undecodable values are
// skipped.
func (e *env) statusesUnder(ctx context.Context, prefix string) ([]report.ProxyStatus, error) {
	cli, err := e.etcd()
	if err != nil {
		return nil, err
	}
	r, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	var out []report.ProxyStatus
	for _, kv := range r.Kvs {
		var st report.ProxyStatus
		if codec.UnmarshalJSON(kv.Value, &st) == nil {
			out = append(out, st)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ProxyCluster != out[j].ProxyCluster {
			return out[i].ProxyCluster < out[j].ProxyCluster
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// schedulerStatus reads the leader's status (nil: no scheduler is leading).
func (e *env) schedulerStatus(ctx context.Context) (*report.SchedulerStatus, error) {
	cli, err := e.etcd()
	if err != nil {
		return nil, err
	}
	r, err := cli.Get(ctx, e.layout.SchedulerStatus())
	if err != nil {
		return nil, fmt.Errorf("read scheduler status: %w", err)
	}
	if len(r.Kvs) == 0 {
		return nil, nil
	}
	var st report.SchedulerStatus
	if err := codec.UnmarshalJSON(r.Kvs[0].Value, &st); err != nil {
		return nil, fmt.Errorf("scheduler status at %s: %w", e.layout.SchedulerStatus(), err)
	}
	return &st, nil
}

// noLeader is what lbctl prints when no scheduler holds leadership.
const noLeader = rollout.NoLeader

package lbctl

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/report"
)

// Liveness of a proxy, as rollout status and proxies show it.
const (
	// LiveStale: the status key lives (its lease is kept alive) but was not
	// rewritten for two report intervals, or the proxy lost etcd.
	LiveStale = "STALE"
	// LiveGone: the status lease expired (the proxy died or was cut off
	// for longer than the TTL); listed from its last-seen record for
	// report.GoneFor.
	LiveGone = "GONE"
)

// staleReason says why a live status is STALE ("" if it is not).
func staleReason(st report.ProxyStatus, now time.Time) string {
	switch {
	case !st.EtcdConnected:
		return "not connected to etcd"
	case !st.UpdatedAt.IsZero() && now.Sub(st.UpdatedAt) > st.StaleAfter():
		return "last seen " + seenAt(st.UpdatedAt, now)
	}
	return ""
}

// seenAt formats a last-seen time: "2026-12-01T09:30:00Z (12s ago)".
func seenAt(t, now time.Time) string {
	return fmt.Sprintf("%s (%s ago)", t.UTC().Format(time.RFC3339), now.Sub(t).Round(time.Second))
}

// goneProxies returns the last-seen records of proxies (of pc, or all) that
// have no live status and were seen within report.GoneFor, sorted.
func (e *env) goneProxies(ctx context.Context, pc string, live []report.ProxyStatus, now time.Time) ([]report.ProxyStatus, error) {
	prefix, err := e.layout.LastSeenPrefix(pc)
	if err != nil {
		return nil, err
	}
	seen, err := e.statusesUnder(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("read last-seen records: %w", err)
	}
	alive := map[string]bool{}
	for _, st := range live {
		alive[st.ProxyCluster+"/"+st.ID] = true
	}
	return slices.DeleteFunc(seen, func(st report.ProxyStatus) bool {
		return alive[st.ProxyCluster+"/"+st.ID] || now.Sub(st.UpdatedAt) >= report.GoneFor
	}), nil
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
		if json.Unmarshal(kv.Value, &st) == nil {
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
	if err := json.Unmarshal(r.Kvs[0].Value, &st); err != nil {
		return nil, fmt.Errorf("scheduler status at %s: %w", e.layout.SchedulerStatus(), err)
	}
	return &st, nil
}

// noLeader is what lbctl prints when no scheduler holds leadership.
const noLeader = "no scheduler is leading: nothing new will be published until one is (is lbscheduler running?)"

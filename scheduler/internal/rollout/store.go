package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/report"
	rs "github.com/sluicelb/sluice/api/rollout"
	"github.com/sluicelb/sluice/api/snapshot"
)

// record reads pc's rollout record (zero State if none).
func (c *Controller) record(ctx context.Context, pc string) (rs.Staged, error) {
	k, err := c.layout.Rollout(pc)
	if err != nil {
		return rs.Staged{}, err
	}
	r, err := c.cli.Get(ctx, k)
	if err != nil {
		return rs.Staged{}, fmt.Errorf("read %s: %w", k, err)
	}
	var rec rs.Staged
	if len(r.Kvs) == 0 {
		return rec, nil
	}
	if err := codec.UnmarshalJSON(r.Kvs[0].Value, &rec); err != nil {
		return rs.Staged{}, fmt.Errorf("read %s: %w", k, err)
	}
	return rec, nil
}

// put is the operation writing rec (UpdatedAt stamped).
func (c *Controller) put(rec rs.Staged) clientv3.Op {
	k, _ := c.layout.Rollout(rec.ProxyCluster)
	rec.UpdatedAt = c.now().UTC().Truncate(time.Millisecond)
	raw, _ := json.Marshal(rec)
	return clientv3.OpPut(k, string(raw))
}

// op reads and returns pc's pending operator request (zero Op if none) with
// the operation deleting it.
func (c *Controller) op(ctx context.Context, pc string) (rs.RolloutOp, []clientv3.Op, error) {
	k, err := c.layout.RolloutOp(pc)
	if err != nil {
		return rs.RolloutOp{}, nil, err
	}
	r, err := c.cli.Get(ctx, k)
	if err != nil {
		return rs.RolloutOp{}, nil, fmt.Errorf("read %s: %w", k, err)
	}
	if len(r.Kvs) == 0 {
		return rs.RolloutOp{}, nil, nil
	}
	del := []clientv3.Op{clientv3.OpDelete(k)}
	var op rs.RolloutOp
	if err := codec.UnmarshalJSON(r.Kvs[0].Value, &op); err != nil {
		c.log.Warn("unreadable rollout operation dropped", "key", k, "err", err)
		return rs.RolloutOp{}, del, nil
	}
	return op, del, nil
}

// absent names the proxies a stage selects that do not report now: a
// stale status (frozen, cut off, crash-looping) or, from the last-seen
// records, a status lease that expired since the rollout started. They
// count as not having applied the candidate.
func (c *Controller) absent(ctx context.Context, rec rs.Staged, cand *snapshot.Candidate, live []report.ProxyStatus) ([]string, error) {
	alive := map[string]bool{}
	for _, st := range live {
		alive[st.ID] = true
	}
	var out []string
	for _, prefix := range []func(string) (string, error){c.layout.StatusPrefix, c.layout.LastSeenPrefix} {
		p, err := prefix(rec.ProxyCluster)
		if err != nil {
			return nil, err
		}
		r, err := c.cli.Get(ctx, p, clientv3.WithPrefix())
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		for _, kv := range r.Kvs {
			var st report.ProxyStatus
			if json.Unmarshal(kv.Value, &st) != nil || alive[st.ID] || !cand.Selects(st.ID) || st.UpdatedAt.Before(rec.StartedAt) {
				continue
			}
			alive[st.ID] = true // once
			out = append(out, fmt.Sprintf("%s (no report since %s)", st.ID, st.UpdatedAt.UTC().Format(time.RFC3339)))
		}
	}
	for _, id := range cand.IDs { // a count stage's proxy that vanished entirely
		if !alive[id] {
			out = append(out, id+" (no status)")
		}
	}
	sort.Strings(out)
	return out, nil
}

// reports reads pc's live (not stale) proxy statuses and their demand
// reports by proxy id.
func (c *Controller) reports(ctx context.Context, pc string) ([]report.ProxyStatus, map[string]report.Demand, error) {
	sp, err := c.layout.StatusPrefix(pc)
	if err != nil {
		return nil, nil, err
	}
	r, err := c.cli.Get(ctx, sp, clientv3.WithPrefix())
	if err != nil {
		return nil, nil, fmt.Errorf("read proxy statuses: %w", err)
	}
	now := c.now()
	var live []report.ProxyStatus
	for _, kv := range r.Kvs {
		var st report.ProxyStatus
		if json.Unmarshal(kv.Value, &st) != nil || st.ProxyCluster != pc {
			continue
		}
		if !st.EtcdConnected || (!st.UpdatedAt.IsZero() && now.Sub(st.UpdatedAt) > st.StaleAfter()) {
			continue
		}
		live = append(live, st)
	}
	dr, err := c.cli.Get(ctx, c.layout.DemandPrefix()+pc+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, nil, fmt.Errorf("read demand reports: %w", err)
	}
	dm := map[string]report.Demand{}
	for _, kv := range dr.Kvs {
		var d report.Demand
		if json.Unmarshal(kv.Value, &d) == nil && d.ProxyCluster == pc {
			dm[d.ID] = d
		}
	}
	return live, dm, nil
}

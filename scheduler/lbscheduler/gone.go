package lbscheduler

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/scheduler/internal/publish"
)

// collectGone deletes the last-seen records of proxies whose status lease
// expired more than report.GoneFor ago (lbctl lists them as GONE until
// then). Each delete is fenced on leadership and on the record being
// unchanged, so a proxy that came back meanwhile keeps its record.
func (s *Scheduler) collectGone(ctx context.Context, lead *publish.Leadership) (int, error) {
	seenPfx, _ := s.layout.LastSeenPrefix("")
	statusPfx, _ := s.layout.StatusPrefix("")
	r, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(seenPfx, clientv3.WithPrefix()),
		clientv3.OpGet(statusPfx, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return 0, fmt.Errorf("collect gone proxies: %w", err)
	}
	live := map[string]bool{}
	for _, kv := range r.Responses[1].GetResponseRange().Kvs {
		if pk, err := s.layout.ParseStatus(string(kv.Key)); err == nil {
			live[pk.ProxyCluster+"/"+pk.ProxyID] = true
		}
	}
	now := s.cfg.Now()
	n := 0
	for _, kv := range r.Responses[0].GetResponseRange().Kvs {
		pk, err := s.layout.ParseLastSeen(string(kv.Key))
		if err != nil || live[pk.ProxyCluster+"/"+pk.ProxyID] {
			continue
		}
		var st report.ProxyStatus
		if codec.UnmarshalJSON(kv.Value, &st) == nil && now.Sub(st.UpdatedAt) < report.GoneFor {
			continue
		}
		k := string(kv.Key)
		tr, err := s.cli.Txn(ctx).If(lead.Fence(), clientv3.Compare(clientv3.ModRevision(k), "=", kv.ModRevision)).
			Then(clientv3.OpDelete(k)).Commit()
		if err != nil {
			return n, fmt.Errorf("collect gone proxies: delete %s: %w", k, err)
		}
		if tr.Succeeded {
			n++
			s.log.Info("forgot a gone proxy", "proxy_cluster", pk.ProxyCluster, "proxy", pk.ProxyID, "last_seen", st.UpdatedAt)
		}
	}
	return n, nil
}

package lbscheduler

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

func TestCollectGoneForgetsOnlyLongGoneProxies(t *testing.T) {
	srv, cli := etcdtest.New(t)
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	s := startScheduler(t, srv, "S1", func() time.Time { return now })
	poll.EventuallyTrue(t, 20*time.Second, "leader", func() bool { return s.IsLeader() })
	l := keys.MustNew("")
	seen := func(id string, ago time.Duration, live bool) {
		b, _ := json.Marshal(report.ProxyStatus{ProxyCluster: "BFE1", ID: id, UpdatedAt: now.Add(-ago)})
		k, _ := l.LastSeen("BFE1", id)
		put(t, cli, k, string(b))
		if live {
			sk, _ := l.Status("BFE1", id)
			put(t, cli, sk, string(b))
		}
	}
	seen("long-gone", report.GoneFor+time.Second, false)
	seen("just-gone", report.GoneFor-time.Minute, false)
	seen("hung-but-leased", report.GoneFor+time.Hour, true)
	n, err := s.collectGone(context.Background(), s.lead.Load())
	if err != nil || n != 1 {
		t.Fatalf("collectGone = %d, %v; want 1", n, err)
	}
	pfx, _ := l.LastSeenPrefix("BFE1")
	r, err := cli.Get(context.Background(), pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, kv := range r.Kvs {
		left = append(left, string(kv.Key))
	}
	if len(left) != 2 || left[0] != "/sluice/last-seen/BFE1/hung-but-leased" || left[1] != "/sluice/last-seen/BFE1/just-gone" {
		t.Fatalf("left %v", left)
	}
}

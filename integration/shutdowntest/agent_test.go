package shutdowntest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/agent/lbagent"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/testkit/faultproxy"
	"github.com/sluicelb/sluice/testkit/poll"
)

// TestAgentStopsWithEtcdBlackholed: an lbagent whose etcd stops answering
// stops within stopBound of its context ending, although publishing its
// drain and revoking its registration lease cannot reach etcd. Its lease
// TTL (10 s) is far above the bound.
func TestAgentStopsWithEtcdBlackholed(t *testing.T) {
	fp, cli := blackholedEtcdClient(t)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	defer backend.Close()
	a, err := lbagent.New(lbagent.Config{
		Endpoints: []string{fp.URL()}, Cluster: "demo-main", SubCluster: "SC1", IDC: "IDC1",
		Addr: netip.MustParseAddrPort(strings.TrimPrefix(backend.URL, "http://")), Weight: 10, Probe: config.Probe{Body: "ok"},
		ProbeInterval: 50 * time.Millisecond, ProbeTimeout: 50 * time.Millisecond, Rise: 1, Fall: 3,
		LeaseTTL: 10 * time.Second, ReportInterval: time.Second, MinWriteGap: 50 * time.Millisecond,
		DrainMin: 100 * time.Millisecond, DrainTimeout: 20 * time.Second, DrainPoll: 20 * time.Millisecond,
		Admin: "127.0.0.1:0", Logger: quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	poll.Eventually(t, 30*time.Second, "the agent registers under a lease", func() error {
		r, err := cli.Get(context.Background(), "/sluice/", clientv3.WithPrefix())
		if err != nil {
			return err
		}
		for _, kv := range r.Kvs {
			if kv.Lease != 0 {
				return nil
			}
		}
		return errNoStatus
	})
	fp.SetMode(faultproxy.Blackhole)

	stopsInTime(t, "lbagent", cancel, done)
}

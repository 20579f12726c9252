package shutdowntest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/proxy/lbproxy"
	"github.com/sluicelb/sluice/testkit/faultproxy"
	"github.com/sluicelb/sluice/testkit/poll"
)

// TestProxyStopsWithEtcdBlackholed: an lbproxy whose etcd stops answering
// stops within stopBound of its context ending (no request in flight),
// although deleting its last-seen record, revoking its status lease and
// closing its watch cannot reach etcd.
func TestProxyStopsWithEtcdBlackholed(t *testing.T) {
	fp, cli := blackholedEtcdClient(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	al, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- lbproxy.Run(ctx, lbproxy.Config{
			ProxyCluster: "BFE1", ID: "p-cut", Prefix: "/sluice",
			Etcd: lbproxy.Etcd{Endpoints: []string{fp.URL()}}, CacheDir: t.TempDir(),
			Listener: l, AdminListener: al, TraceExporter: "none",
			ReportInterval: 200 * time.Millisecond, Logger: quiet(),
		})
	}()
	statusKey, err := keys.MustNew("/sluice").Status("BFE1", "p-cut")
	if err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 30*time.Second, "p-cut reports its status", func() error {
		r, err := cli.Get(context.Background(), statusKey)
		if err != nil {
			return err
		}
		if len(r.Kvs) == 0 || r.Kvs[0].Lease == 0 {
			return errNoStatus
		}
		return nil
	})
	fp.SetMode(faultproxy.Blackhole)

	stopsInTime(t, "lbproxy", cancel, done)
}

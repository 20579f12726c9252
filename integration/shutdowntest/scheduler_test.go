package shutdowntest

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/proxy/faultproxy"
	"github.com/sluicelb/sluice/scheduler/lbscheduler"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// stopBound is how long a stop may take with etcd blackholed: the shutdown
// budget for etcd calls (2 s) plus slack for a loaded 2-core CI machine.
const stopBound = 4 * time.Second

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// blackholedEtcd starts etcd behind a fault proxy (pass-through for now).
func blackholedEtcd(t *testing.T) *faultproxy.Proxy {
	t.Helper()
	srv, _ := etcdtest.New(t)
	fp, err := faultproxy.New(strings.TrimPrefix(srv.Endpoints[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fp.Close() })
	return fp
}

// TestSchedulerStopsWithEtcdBlackholed: a leading scheduler whose etcd
// stops answering (every byte dropped, connections kept open) stops within
// stopBound of its context ending, although resigning, revoking its session
// and closing its watches cannot reach etcd. Its session TTL (10 s) is far
// above the bound, so waiting for the lease to run out would fail the test.
func TestSchedulerStopsWithEtcdBlackholed(t *testing.T) {
	fp := blackholedEtcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := lbscheduler.Start(ctx, lbscheduler.Config{
		ID: "sched-cut", Endpoints: []string{fp.URL()}, APIAddr: "127.0.0.1:0",
		SessionTTL: 10 * time.Second, Logger: quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	poll.EventuallyTrue(t, 30*time.Second, "sched-cut leads", s.IsLeader)
	fp.SetMode(faultproxy.Blackhole)

	start := time.Now()
	cancel()
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	select {
	case err := <-done:
		took := time.Since(start)
		t.Logf("scheduler stopped %v after cancel with etcd blackholed", took.Round(time.Millisecond))
		if err != nil {
			t.Errorf("Wait: %v, want nil after a stop", err)
		}
		if took > stopBound {
			t.Errorf("scheduler took %v to stop with etcd blackholed, want at most %v", took, stopBound)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("scheduler did not stop within 30 s of cancel with etcd blackholed (bound %v)", stopBound)
	}
}

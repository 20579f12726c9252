package shutdowntest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/scheduler/lbscheduler"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/faultproxy"
	"github.com/sluicelb/sluice/testkit/poll"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// fasthttp's process-wide date updater and idle worker sweeper (lbproxy's front).
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"))
}

// stopBound is how long a stop may take with etcd blackholed: the shutdown
// budget for etcd calls (2 s) plus slack for a loaded 2-core CI machine.
const stopBound = 4 * time.Second

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

var errNoStatus = errors.New("no status key under a lease yet")

// blackholedEtcd starts etcd behind a fault proxy (pass-through until the
// test switches it to Blackhole).
func blackholedEtcd(t *testing.T) *faultproxy.Proxy {
	fp, _ := blackholedEtcdClient(t)
	return fp
}

// blackholedEtcdClient is blackholedEtcd with a direct client of etcd.
func blackholedEtcdClient(t *testing.T) (*faultproxy.Proxy, *clientv3.Client) {
	t.Helper()
	srv, cli := etcdtest.New(t)
	fp, err := faultproxy.New(strings.TrimPrefix(srv.Endpoints[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fp.Close() })
	return fp, cli
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

	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	stopsInTime(t, "lbscheduler", cancel, done)
}

// stopsInTime cancels a daemon's context (its etcd already blackholed)
// and checks that it ends, with a nil error, within stopBound.
func stopsInTime(t *testing.T, what string, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		took := time.Since(start)
		t.Logf("%s stopped %v after cancel with etcd blackholed", what, took.Round(time.Millisecond))
		if err != nil {
			t.Errorf("%s: %v, want nil after a stop", what, err)
		}
		if took > stopBound {
			t.Errorf("%s took %v to stop with etcd blackholed, want at most %v", what, took, stopBound)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not stop within 30 s of cancel with etcd blackholed (bound %v)", what, stopBound)
	}
}

package statusreport

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var layout = keys.MustNew("/sluicetest")

type fakeProxy struct{ version atomic.Uint64 }

func (p *fakeProxy) status() report.ProxyStatus {
	return report.ProxyStatus{AppliedVersion: p.version.Load(), AppliedHash: "h", EtcdConnected: true, Source: "etcd"}
}

func (p *fakeProxy) demand() report.Demand {
	return report.Demand{WindowSeconds: 10, Clusters: map[string]report.ClusterDemand{"demo-main": {RPS: 12.5, ErrorRPS: 0.5}}}
}

type running struct {
	r      *Reporter
	cancel context.CancelFunc
	done   chan error
}

func startReporter(t *testing.T, cli *clientv3.Client, p *fakeProxy, ttl, interval time.Duration) *running {
	t.Helper()
	r, err := New(Config{
		Client: cli, Layout: layout, ProxyCluster: "BFE1", ID: "proxy-1",
		Status: p.status, Demand: p.demand, Interval: interval, TTL: ttl,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := &running{r: r, cancel: cancel, done: make(chan error, 1)}
	go func() { run.done <- r.Run(ctx) }()
	t.Cleanup(func() { run.stop(t) })
	return run
}

func (run *running) stop(t *testing.T) {
	t.Helper()
	run.cancel()
	select {
	case err := <-run.done:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
		run.done <- nil // let a second stop return too
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of cancel")
	}
}

func getStatus(t *testing.T, cli *clientv3.Client) (*report.ProxyStatus, *report.Demand) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sk, _ := layout.Status("BFE1", "proxy-1")
	dk, _ := layout.Demand("BFE1", "proxy-1")
	sr, err := cli.Get(ctx, sk)
	if err != nil {
		return nil, nil
	}
	dr, err := cli.Get(ctx, dk)
	if err != nil {
		return nil, nil
	}
	var st *report.ProxyStatus
	var dm *report.Demand
	if len(sr.Kvs) == 1 {
		st = new(report.ProxyStatus)
		if err := codec.UnmarshalJSON(sr.Kvs[0].Value, st); err != nil {
			t.Fatalf("status value: %v", err)
		}
	}
	if len(dr.Kvs) == 1 {
		dm = new(report.Demand)
		if err := codec.UnmarshalJSON(dr.Kvs[0].Value, dm); err != nil {
			t.Fatalf("demand value: %v", err)
		}
	}
	return st, dm
}

func TestKeysAppearAndVanishOnCancel(t *testing.T) {
	_, cli := etcdtest.New(t)
	p := &fakeProxy{}
	p.version.Store(3)
	run := startReporter(t, cli, p, 15*time.Second, time.Hour)
	poll.EventuallyTrue(t, 10*time.Second, "keys written", func() bool {
		st, dm := getStatus(t, cli)
		return st != nil && dm != nil
	})
	st, dm := getStatus(t, cli)
	if st.ProxyCluster != "BFE1" || st.ID != "proxy-1" || st.AppliedVersion != 3 || st.UpdatedAt.IsZero() {
		t.Fatalf("status = %+v", st)
	}
	if dm.ProxyCluster != "BFE1" || dm.ID != "proxy-1" || dm.Clusters["demo-main"].RPS != 12.5 {
		b, _ := json.Marshal(dm)
		t.Fatalf("demand = %s", b)
	}
	// Notify writes promptly (the interval is an hour).
	p.version.Store(4)
	run.r.Notify()
	poll.EventuallyTrue(t, 10*time.Second, "status v4 after Notify", func() bool {
		st, _ := getStatus(t, cli)
		return st != nil && st.AppliedVersion == 4
	})
	lease := run.r.Lease()
	if lease == 0 {
		t.Fatal("no lease while running")
	}
	if seen := getSeen(t, cli); seen == nil || seen.AppliedVersion != 4 || seen.ReportIntervalSeconds != 3600 || seen.StaleAfter() != 2*time.Hour {
		t.Fatalf("last-seen record %+v; want a copy of the v4 status with its report interval", seen)
	}
	stopped := time.Now()
	run.stop(t)
	if st, dm := getStatus(t, cli); st != nil || dm != nil {
		t.Fatalf("keys still there right after Run returned: %+v %+v", st, dm)
	}
	if seen := getSeen(t, cli); seen != nil {
		t.Fatalf("a proxy stopped on purpose left its last-seen record: %+v", seen)
	}
	if took := time.Since(stopped); took > 5*time.Second {
		t.Fatalf("graceful stop took %v", took)
	}
	ttl, err := cli.TimeToLive(context.Background(), lease)
	if err != nil || ttl.TTL != -1 {
		t.Fatalf("lease after stop: ttl %v err %v; want revoked (-1)", ttl.TTL, err)
	}
}

func TestKeysExpireWhenProcessDies(t *testing.T) {
	srv, cli := etcdtest.New(t)
	own, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	p := &fakeProxy{}
	run := startReporter(t, own, p, 2*time.Second, time.Hour)
	poll.EventuallyTrue(t, 10*time.Second, "keys written", func() bool { st, _ := getStatus(t, cli); return st != nil })
	// The process dies: its connection goes away, nothing is revoked.
	own.Close()
	poll.EventuallyTrue(t, 20*time.Second, "keys gone after the TTL", func() bool {
		st, dm := getStatus(t, cli)
		return st == nil && dm == nil
	})
	// The lease-less copy stays: lbctl lists the proxy as GONE.
	if seen := getSeen(t, cli); seen == nil || seen.ID != "proxy-1" || seen.UpdatedAt.IsZero() {
		t.Fatalf("last-seen record after the lease expired: %+v", seen)
	}
	run.stop(t)
}

// getSeen reads the last-seen record (nil if absent).
func getSeen(t *testing.T, cli *clientv3.Client) *report.ProxyStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	k, _ := layout.LastSeen("BFE1", "proxy-1")
	r, err := cli.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) == 0 {
		return nil
	}
	if r.Kvs[0].Lease != 0 {
		t.Fatalf("last-seen record is bound to lease %x", r.Kvs[0].Lease)
	}
	var st report.ProxyStatus
	if err := codec.UnmarshalJSON(r.Kvs[0].Value, &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

func TestReRegistersAfterLeaseLossAndEtcdRestart(t *testing.T) {
	srv, cli := etcdtest.New(t)
	own, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { own.Close() })
	p := &fakeProxy{}
	p.version.Store(1)
	run := startReporter(t, own, p, 3*time.Second, 200*time.Millisecond)
	poll.EventuallyTrue(t, 10*time.Second, "keys written", func() bool { st, _ := getStatus(t, cli); return st != nil })

	// The lease is lost (as after an outage longer than the TTL).
	first := run.r.Lease()
	if _, err := cli.Revoke(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	poll.EventuallyTrue(t, 15*time.Second, "new lease and keys back", func() bool {
		st, _ := getStatus(t, cli)
		return st != nil && run.r.Lease() != 0 && run.r.Lease() != first
	})

	// etcd restarts; the reporter keeps (or re-grants) its keys.
	srv.Stop()
	p.version.Store(2)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	poll.EventuallyTrue(t, 30*time.Second, "status v2 after etcd restart", func() bool {
		st, _ := getStatus(t, cli)
		return st != nil && st.AppliedVersion == 2
	})
	run.stop(t)
	if st, _ := getStatus(t, cli); st != nil {
		t.Fatalf("status still there after stop: %+v", st)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	_, cli := etcdtest.New(t)
	p := &fakeProxy{}
	bad := []Config{
		{Client: cli, ProxyCluster: "BFE1", ID: "a/b", Status: p.status, Demand: p.demand},
		{Client: cli, ProxyCluster: "", ID: "x", Status: p.status, Demand: p.demand},
		{Client: cli, ProxyCluster: "BFE1", ID: "x", Demand: p.demand},
		{Client: cli, ProxyCluster: "BFE1", ID: "x", Status: p.status, Demand: p.demand, TTL: 500 * time.Millisecond},
	}
	for i, c := range bad {
		if _, err := New(c); err == nil {
			t.Errorf("config %d accepted", i)
		}
	}
}

// testWriter sends the reporter's log to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

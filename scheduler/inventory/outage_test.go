package inventory

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/etcdclient"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

// An instance gone before an etcd outage is not removed during the first
// instance_grace after the outage ends: its agent is still registering.
func TestNoRemovalDuringGraceAfterOutage(t *testing.T) {
	srv, root := etcdtest.NewWithAuth(t, etcdtest.Options{}, "sched", "pw", "/sluice/")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := etcdclient.New(etcdclient.Config{Endpoints: srv.Endpoints, Username: "sched", Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	clk := &clock{t: time.Unix(1000, 0)}
	reg := prometheus.NewRegistry()
	inv := New(cli.Client, layout, Options{Now: clk.Now, Registerer: reg})
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { inv.Run(rctx); close(done) }()
	defer func() { stop(); <-done }()

	put(t, root, layout.Desired(), desired) // instance_grace 30s
	k := instKey(t, "demo-main", "SC1", "127.0.0.1:8001")
	put(t, root, k, instJSON(t, config.StateHealthy, 2))
	poll.EventuallyTrue(t, 10*time.Second, "agent instance listed", func() bool { return len(inv.View().Members["demo-main"]["SC1"]) == 2 })
	if _, err := root.Delete(ctx, k); err != nil {
		t.Fatal(err)
	}
	poll.EventuallyTrue(t, 10*time.Second, "grace started", func() bool { return inv.View().Debounced == 1 })
	clk.Add(25 * time.Second) // 5s of grace left

	// The outage: etcd restarts and refuses the scheduler's user until the
	// permission is granted again, so listings fail meanwhile.
	if err := srv.Revoke(ctx, "sched", "/sluice/"); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	resyncs := func() float64 {
		return testutil.ToFloat64(inv.m.resyncs.WithLabelValues(inInstances))
	}
	poll.EventuallyTrue(t, 10*time.Second, "a failed listing of the instances", func() bool { return resyncs() >= 2 })
	if err := srv.Grant(ctx, "sched", "/sluice/"); err != nil {
		t.Fatal(err)
	}
	root2, err := srv.ClientAs("root", etcdtest.RootPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer root2.Close()
	// The outage ends: the next write is seen through a fresh listing.
	put(t, root2, instKey(t, "demo-main", "SC2", "127.0.0.1:8002"), instJSON(t, config.StateHealthy, 1))
	poll.EventuallyTrue(t, 10*time.Second, "listed again", func() bool { return len(inv.View().Members["demo-main"]["SC2"]) == 1 })

	clk.Add(10 * time.Second) // past the instance's own grace, within the one after the outage
	if v := inv.View(); v.Debounced != 1 || len(v.Members["demo-main"]["SC1"]) != 2 {
		t.Fatalf("instance removed %s after the outage ended: debounced %d, SC1 %v", 10*time.Second, v.Debounced, addrs(v, "demo-main", "SC1"))
	}
	clk.Add(20 * time.Second) // the grace after the outage is over
	if v := inv.View(); v.Debounced != 0 || len(v.Members["demo-main"]["SC1"]) != 1 {
		t.Fatalf("instance kept past the grace after the outage: debounced %d", v.Debounced)
	}
}

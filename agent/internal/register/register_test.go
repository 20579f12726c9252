package register

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const key = "/sluice/instances/demo/SC1/127.0.0.1:8080"

func get(t *testing.T, cli *clientv3.Client) (report.Instance, int64, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := cli.Get(ctx, key)
	if err != nil || len(r.Kvs) == 0 {
		return report.Instance{}, 0, false
	}
	var rec report.Instance
	if err := json.Unmarshal(r.Kvs[0].Value, &rec); err != nil {
		t.Fatal(err)
	}
	return rec, r.Kvs[0].Lease, true
}

func start(t *testing.T, o Options) (*Registrar, func()) {
	t.Helper()
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return r, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

func rec(state string) report.Instance {
	return report.Instance{Cluster: "demo", SubCluster: "SC1", Addr: "127.0.0.1", Port: 8080, Weight: 10, State: state}
}

func TestRegisterWriteAndRevoke(t *testing.T) {
	_, cli := etcdtest.New(t)
	r, stop := start(t, Options{Client: cli, Key: key, TTL: 5 * time.Second})
	r.Set(rec(config.StateHealthy))
	poll.EventuallyTrue(t, 10*time.Second, "registration", func() bool { _, _, ok := get(t, cli); return ok })
	got, lease, _ := get(t, cli)
	if got.State != "healthy" || got.Weight != 10 || got.UpdatedAt.IsZero() || lease == 0 || clientv3.LeaseID(lease) != r.Lease() {
		t.Fatalf("record %+v lease %d (registrar %d)", got, lease, r.Lease())
	}
	ttl, err := cli.TimeToLive(context.Background(), clientv3.LeaseID(lease))
	if err != nil || ttl.GrantedTTL != 5 {
		t.Fatalf("ttl %+v %v", ttl, err)
	}
	stop()
	if _, _, ok := get(t, cli); ok {
		t.Fatal("key still present after a clean stop (lease not revoked)")
	}
}

func TestAbandonLeavesKeyUntilTTL(t *testing.T) {
	_, cli := etcdtest.New(t)
	r, stop := start(t, Options{Client: cli, Key: key, TTL: 2 * time.Second})
	r.Set(rec(config.StateHealthy))
	poll.EventuallyTrue(t, 10*time.Second, "registration", func() bool { _, _, ok := get(t, cli); return ok })
	r.Abandon()
	stop()
	stopped := time.Now()
	if _, _, ok := get(t, cli); !ok {
		t.Fatal("abandoned registration vanished at once; want it to live until the TTL")
	}
	poll.EventuallyTrue(t, 15*time.Second, "key expires after TTL", func() bool { _, _, ok := get(t, cli); return !ok })
	if time.Since(stopped) < time.Second {
		t.Fatalf("key vanished after %s, before the 2s TTL could expire", time.Since(stopped))
	}
}

func TestReRegisterAfterLeaseLoss(t *testing.T) {
	_, cli := etcdtest.New(t)
	granted := make(chan clientv3.LeaseID, 10)
	r, stop := start(t, Options{Client: cli, Key: key, TTL: 5 * time.Second, Hooks: Hooks{Granted: func(id clientv3.LeaseID) { granted <- id }}})
	defer stop()
	r.Set(rec(config.StateUnhealthy))
	first := <-granted
	poll.EventuallyTrue(t, 10*time.Second, "registration", func() bool { _, _, ok := get(t, cli); return ok })
	// Someone revokes our lease: the key goes, the registrar must notice
	// and register again with the last known record.
	if _, err := cli.Revoke(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	var second clientv3.LeaseID
	select {
	case second = <-granted:
	case <-time.After(15 * time.Second):
		t.Fatal("no new lease after revocation")
	}
	if second == first {
		t.Fatal("same lease granted twice")
	}
	poll.EventuallyTrue(t, 10*time.Second, "re-registration with new lease", func() bool {
		got, lease, ok := get(t, cli)
		return ok && clientv3.LeaseID(lease) == second && got.State == "unhealthy"
	})
}

func TestFlappingStateWritesAreBounded(t *testing.T) {
	_, cli := etcdtest.New(t)
	const gap = 200 * time.Millisecond
	r, stop := start(t, Options{Client: cli, Key: key, TTL: 5 * time.Second, MinGap: gap, ReportInterval: time.Hour})
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	head, err := cli.Get(wctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	// Watch from a known revision so no write is missed.
	watch := cli.Watch(wctx, key, clientv3.WithRev(head.Header.Revision+1))
	start := time.Now()
	flips := 0
	// At least 2 s and at least 100 flips: on a loaded machine a 2 ms
	// pause can take far longer, and the bound below is from the elapsed
	// time, so flapping longer keeps the claim.
	for time.Since(start) < 2*time.Second || flips < 100 {
		st := config.StateHealthy
		if flips%2 == 1 {
			st = config.StateUnhealthy
		}
		r.Set(rec(st))
		flips++
		time.Sleep(2 * time.Millisecond) // the flapping source's pace
	}
	r.Set(rec(config.StateHealthy))
	elapsed := time.Since(start)
	poll.EventuallyTrue(t, 10*time.Second, "final state written", func() bool {
		got, _, ok := get(t, cli)
		w, _ := r.Written()
		return ok && got.State == "healthy" && w.State == "healthy"
	})
	stop() // revokes the lease: the DELETE event ends the count
	puts := 0
	timeout := time.After(15 * time.Second)
count:
	for {
		select {
		case resp := <-watch:
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					break count
				}
				puts++
			}
		case <-timeout:
			t.Fatal("no DELETE event after stop")
		}
	}
	bound := int(elapsed/gap) + 3
	t.Logf("%d state flips in %s → %d writes (registrar counted %d), bound %d", flips, elapsed.Round(time.Millisecond), puts, r.Writes(), bound)
	if flips < 100 {
		t.Fatalf("only %d flips; test did not flap enough", flips)
	}
	// The final state was confirmed written before stop, so the counts agree.
	if int64(puts) != r.Writes() {
		t.Fatalf("etcd saw %d puts, registrar counted %d", puts, r.Writes())
	}
	if puts > bound || puts < 2 {
		t.Fatalf("%d writes for %d flips; want 2..%d", puts, flips, bound)
	}
}

func TestLoadOnlyChangesWaitForInterval(t *testing.T) {
	_, cli := etcdtest.New(t)
	r, stop := start(t, Options{Client: cli, Key: key, TTL: 5 * time.Second, ReportInterval: time.Hour})
	defer stop()
	base := rec(config.StateHealthy)
	r.Set(base)
	poll.EventuallyTrue(t, 10*time.Second, "registration", func() bool { return r.Writes() == 1 })
	for i := 0; i < 50; i++ {
		next := base
		next.InFlight = 100 + i
		r.Set(next)
	}
	// A state change still goes through at once (after MinGap) with the
	// latest load.
	d := base
	d.State = config.StateDraining
	d.InFlight = 149
	r.Set(d)
	poll.EventuallyTrue(t, 10*time.Second, "draining written", func() bool { got, _, _ := get(t, cli); return got.State == "draining" })
	got, _, _ := get(t, cli)
	if r.Writes() != 2 || got.InFlight != 149 {
		t.Fatalf("writes=%d in_flight=%d; want 2 writes, latest load", r.Writes(), got.InFlight)
	}
}

func TestMeaningful(t *testing.T) {
	a := rec(config.StateHealthy)
	a.InFlight, a.RPS, a.CPUPercent, a.MemPercent = 10, 100, 50, 50
	mod := func(f func(*report.Instance)) report.Instance { b := a; f(&b); return b }
	cases := []struct {
		name string
		b    report.Instance
		want bool
	}{
		{"same", a, false},
		{"updated_at only", mod(func(b *report.Instance) { b.UpdatedAt = time.Now() }), false},
		{"in-flight +1", mod(func(b *report.Instance) { b.InFlight = 11 }), false},
		{"in-flight +2", mod(func(b *report.Instance) { b.InFlight = 12 }), true},
		{"rps +5%", mod(func(b *report.Instance) { b.RPS = 105 }), false},
		{"rps +20%", mod(func(b *report.Instance) { b.RPS = 120 }), true},
		{"cpu +4", mod(func(b *report.Instance) { b.CPUPercent = 54 }), false},
		{"cpu +5", mod(func(b *report.Instance) { b.CPUPercent = 55 }), true},
		{"mem -6", mod(func(b *report.Instance) { b.MemPercent = 44 }), true},
		{"weight", mod(func(b *report.Instance) { b.Weight = 3 }), true},
		{"label", mod(func(b *report.Instance) { b.Labels = map[string]string{"a": "b"} }), true},
		{"reason", mod(func(b *report.Instance) { b.Reason = "x" }), true},
	}
	for _, c := range cases {
		if got := Meaningful(a, c.b); got != c.want {
			t.Errorf("%s: Meaningful=%v, want %v", c.name, got, c.want)
		}
	}
}

package publish

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
	"github.com/sluicelb/sluice/testkit/etcdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var layout = keys.MustNew("/sluice")

// snap builds a valid one-cluster snapshot for BFE1; w is SC1's weight out
// of 100; extra adds that many instances with incompressible labels (to force
// the content into parts).
func snap(w, extra int) *snapshot.Snapshot {
	insts := []config.Instance{{Addr: "127.0.0.1", Port: 8001, Weight: 1}}
	for i := range extra {
		b := make([]byte, 16384)
		rand.Read(b)
		insts = append(insts, config.Instance{Addr: "10.0.0.1", Port: 1 + i, Weight: 1, Labels: map[string]string{"x": hex.EncodeToString(b)}})
	}
	s := &snapshot.Snapshot{
		Meta:     snapshot.Meta{ProxyCluster: "BFE1"},
		Settings: snapshot.Settings{IDC: "IDC1"},
		Products: map[string]config.Product{"demo": {Hosts: []string{"demo.example"}, Rules: []config.Rule{{Cond: "default_t()", Cluster: "demo-main"}}}},
		Clusters: map[string]snapshot.Cluster{"demo-main": {
			SubClusters: map[string]config.SubCluster{
				"SC1": {IDC: "IDC1", Instances: insts},
				"SC2": {IDC: "IDC2", Instances: []config.Instance{{Addr: "127.0.0.1", Port: 8002, Weight: 1}}},
			},
			Policy: config.DefaultPolicy(),
			Row:    snapshot.Row{Denominator: 100, Weights: map[string]int{"SC1": w, "SC2": 100 - w, config.Blackhole: 0}},
		}},
	}
	s.Meta.Hash = snapshot.ContentHash(s)
	return s
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func lead(t *testing.T, cli *clientv3.Client, id string) *Leadership {
	t.Helper()
	l, err := NewElector(cli, layout, id, 5*time.Second).Campaign(ctxT(t), "127.0.0.1:9400")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Resign(context.Background()) })
	return l
}

func count(t *testing.T, cli *clientv3.Client, prefix string) int64 {
	t.Helper()
	r, err := cli.Get(ctxT(t), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return r.Count
}

func TestPublishVersionsMetaAndUnchanged(t *testing.T) {
	_, cli := etcdtest.New(t)
	ctx := ctxT(t)
	l := lead(t, cli, "S1")
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	p := New(cli, layout, Options{Author: "lbscheduler/S1", Now: func() time.Time { return now }})
	in := snap(60, 0)
	r1, err := p.Publish(ctx, l, in, "capacity change demo-main/SC1")
	if err != nil || r1.Outcome != Published || r1.Version != 1 {
		t.Fatalf("first publish: %+v %v", r1, err)
	}
	if in.Meta.Version != 0 {
		t.Fatalf("Publish modified its input")
	}
	r2, err := p.Publish(ctx, l, snap(70, 0), "shift s-1 step 1/3")
	if err != nil || r2.Outcome != Published || r2.Version != 2 {
		t.Fatalf("second publish: %+v %v", r2, err)
	}
	got, err := p.Load(ctx, "BFE1", 2)
	if err != nil {
		t.Fatal(err)
	}
	lin, err := p.Lineage(ctx)
	if err != nil || lin.ID == "" || lin.CreatedBy != "lbscheduler/S1" || !lin.CreatedAt.Equal(now) {
		t.Fatalf("lineage record %+v, %v", lin, err)
	}
	want := snapshot.Meta{ProxyCluster: "BFE1", Lineage: lin.ID, Version: 2, Parent: 1, Author: "lbscheduler/S1",
		Reason: "shift s-1 step 1/3", CreatedAt: now, Hash: snap(70, 0).Meta.Hash}
	if !reflect.DeepEqual(got.Meta, want) {
		t.Fatalf("meta %+v\nwant %+v", got.Meta, want)
	}
	if err := validate.Snapshot(got); err != nil {
		t.Fatal(err)
	}
	// Same content again (e.g. the retry of a publish whose answer was lost):
	// no new version.
	r3, err := p.Publish(ctx, l, snap(70, 0), "retry")
	if err != nil || r3.Outcome != Unchanged || r3.Version != 2 {
		t.Fatalf("republish: %+v %v", r3, err)
	}
	if n := count(t, cli, layout.Root()+"snapshots/"); n != 2 {
		t.Fatalf("%d manifests, want 2", n)
	}
	if p.Count("published") != 2 || p.Count("unchanged") != 1 {
		t.Fatalf("counts published=%v unchanged=%v", p.Count("published"), p.Count("unchanged"))
	}
}

func TestLostResponseIsNotPublishedTwice(t *testing.T) {
	_, cli := etcdtest.New(t)
	ctx := ctxT(t)
	l := lead(t, cli, "S1")
	p := New(cli, layout, Options{Author: "lbscheduler/S1"})
	r1, err := p.Publish(ctx, l, snap(50, 0), "a")
	if err != nil {
		t.Fatal(err)
	}
	// Commit v2 by hand exactly as Publish would, and "lose" the answer.
	s := snap(40, 0)
	s.Meta.Version, s.Meta.Parent, s.Meta.Lineage = 2, 1, r1.Lineage
	m, _, err := snapshot.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	mk, _ := layout.Snapshot("BFE1", 2)
	ck, _ := layout.Current("BFE1")
	if _, err := cli.Txn(ctx).If(l.Fence()).Then(
		clientv3.OpPut(mk, string(mustJSON(t, m))),
		clientv3.OpPut(ck, string(mustJSON(t, snapshot.Pointer{Lineage: r1.Lineage, Version: 2, Hash: s.Meta.Hash}))),
	).Commit(); err != nil {
		t.Fatal(err)
	}
	r, err := p.Publish(ctx, l, snap(40, 0), "retry after lost response")
	if err != nil || r.Outcome != Unchanged || r.Version != 2 {
		t.Fatalf("retry: %+v %v", r, err)
	}
	h, err := p.History(ctx, "BFE1")
	if err != nil || len(h) != 2 {
		t.Fatalf("history %v %v", h, err)
	}
}

func TestPausedLeaderIsFenced(t *testing.T) {
	_, cli := etcdtest.New(t)
	ctx := ctxT(t)
	old := lead(t, cli, "S1")
	p := New(cli, layout, Options{Author: "lbscheduler/S1"})
	if _, err := p.Publish(ctx, old, snap(50, 0), "a"); err != nil {
		t.Fatal(err)
	}
	// S1 "pauses": its lease expires (revoked here) and S2 is elected.
	stale := NewLeadership(old.Key, old.Rev)
	if _, err := cli.Revoke(ctx, old.Lease()); err != nil {
		t.Fatal(err)
	}
	l2 := lead(t, cli, "S2")
	if l2.Rev == old.Rev {
		t.Fatalf("new term has the old revision")
	}
	before, _ := cli.Get(ctx, layout.Root(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	// S1 resumes with its stale view and tries to publish, big and small.
	for _, s := range []*snapshot.Snapshot{snap(10, 0), snap(20, 40)} {
		_, err := p.Publish(ctx, stale, s, "stale")
		if !errors.Is(err, ErrFenced) {
			t.Fatalf("stale leader publish: %v, want ErrFenced", err)
		}
	}
	if p.Count("fenced") != 2 {
		t.Fatalf("fenced count %v, want 2", p.Count("fenced"))
	}
	after, _ := cli.Get(ctx, layout.Root(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if after.Header.Revision != before.Header.Revision {
		t.Fatalf("stale leader committed something: revision %d → %d", before.Header.Revision, after.Header.Revision)
	}
	// Its GC is fenced too.
	if _, err := p.CollectParts(ctx, stale, 0); err != nil && !errors.Is(err, ErrFenced) {
		t.Fatal(err)
	}
	p2 := New(cli, layout, Options{Author: "lbscheduler/S2"})
	r, err := p2.Publish(ctx, l2, snap(10, 0), "b")
	if err != nil || r.Version != 2 {
		t.Fatalf("new leader: %+v %v", r, err)
	}
}

func TestCrashBetweenPartsAndPointerThenCollect(t *testing.T) {
	_, cli := etcdtest.New(t)
	ctx := ctxT(t)
	l := lead(t, cli, "S1")
	p := New(cli, layout, Options{Author: "lbscheduler/S1"})
	if _, err := p.Publish(ctx, l, snap(50, 0), "small"); err != nil {
		t.Fatal(err)
	}
	big := snap(30, 90)
	_, parts, err := snapshot.Encode(big)
	if err != nil || len(parts) < 2 {
		t.Fatalf("want a snapshot in ≥2 parts, have %d (%v)", len(parts), err)
	}
	if err := p.WriteParts(ctx, l, parts); err != nil {
		t.Fatal(err)
	}
	// "Crash" here: nothing a proxy follows changed.
	ptr, _, err := p.Current(ctx, "BFE1")
	if err != nil || ptr.Version != 1 {
		t.Fatalf("pointer %+v %v", ptr, err)
	}
	if n := count(t, cli, layout.PartsPrefix()); n != int64(len(parts)) {
		t.Fatalf("%d parts stored, want %d", n, len(parts))
	}
	// A grace period protects them on the first pass, not on a later one.
	now := time.Unix(1000, 0)
	p.now = func() time.Time { return now }
	if n, err := p.CollectParts(ctx, l, time.Minute); err != nil || n != 0 {
		t.Fatalf("collected %d (%v) within grace", n, err)
	}
	now = now.Add(time.Minute)
	if n, err := p.CollectParts(ctx, l, time.Minute); err != nil || n != len(parts) {
		t.Fatalf("collected %d (%v), want %d", n, err, len(parts))
	}
	// A published big snapshot keeps its parts.
	r, err := p.Publish(ctx, l, big, "big")
	if err != nil || r.Version != 2 {
		t.Fatalf("%+v %v", r, err)
	}
	if n, err := p.CollectParts(ctx, l, 0); err != nil || n != 0 {
		t.Fatalf("collected %d referenced parts (%v)", n, err)
	}
	got, err := p.Load(ctx, "BFE1", 2)
	if err != nil || got.Meta.Hash != big.Meta.Hash {
		t.Fatalf("load big: %v", err)
	}
}

func TestHistoryBounded(t *testing.T) {
	_, cli := etcdtest.New(t)
	ctx := ctxT(t)
	l := lead(t, cli, "S1")
	p := New(cli, layout, Options{Author: "lbscheduler/S1"})
	for i := range 8 {
		extra := 0
		if i == 0 {
			extra = 40 // v1 lives in parts, which must go with it
		}
		if _, err := p.Publish(ctx, l, snap(10+i, extra), fmt.Sprint("step ", i)); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Prune(ctx, l, "BFE1", 3); err != nil {
			t.Fatal(err)
		}
	}
	h, err := p.History(ctx, "BFE1")
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 3 || h[0].Version != 6 || h[2].Version != 8 {
		t.Fatalf("history %+v, want versions 6..8", h)
	}
	if n, err := p.CollectParts(ctx, l, 0); err != nil || n < 1 {
		t.Fatalf("collected %d parts of pruned v1 (%v)", n, err)
	}
	if n := count(t, cli, layout.PartsPrefix()); n != 0 {
		t.Fatalf("%d parts left", n)
	}
}

func TestOneLeaderAndFailover(t *testing.T) {
	_, cli := etcdtest.New(t)
	ctx := ctxT(t)
	a := lead(t, cli, "S1")
	won := make(chan *Leadership, 1)
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	go func() {
		l, err := NewElector(cli, layout, "S2", 5*time.Second).Campaign(bctx, "b")
		if err == nil {
			won <- l
		}
		close(won)
	}()
	select {
	case <-won:
		t.Fatal("S2 became leader while S1 holds the term")
	case <-time.After(300 * time.Millisecond): // a negative check: S2 must still be waiting
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	b := <-won
	if b == nil {
		t.Fatal("S2 did not become leader")
	}
	defer b.Resign(context.Background())
	r, err := cli.Get(ctx, layout.Leader())
	if err != nil || len(r.Kvs) != 1 || !contains(string(r.Kvs[0].Value), `"id":"S2"`) {
		t.Fatalf("leader info %v %v", r.Kvs, err)
	}
}

func contains(s, sub string) bool { return len(s) >= len(sub) && (s == sub || indexOf(s, sub) >= 0) }

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

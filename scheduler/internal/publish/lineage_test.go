package publish

import (
	"encoding/json"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/testkit/etcdtest"
)

func pointer(t *testing.T, cli *clientv3.Client, pc string) snapshot.Pointer {
	t.Helper()
	k, _ := layout.Current(pc)
	r, err := cli.Get(ctxT(t), k)
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("read %s: %v", k, err)
	}
	var p snapshot.Pointer
	if err := json.Unmarshal(r.Kvs[0].Value, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLineageMintedOnceAndCarried(t *testing.T) {
	_, cli := etcdtest.New(t)
	ctx := ctxT(t)
	l := lead(t, cli, "S1")
	p := New(cli, layout, Options{Author: "lbscheduler/S1"})
	if rec, err := p.Lineage(ctx); err != nil || rec.ID != "" {
		t.Fatalf("fresh prefix has lineage %+v, %v", rec, err)
	}
	r1, err := p.Publish(ctx, l, snap(60, 0), "one")
	if err != nil || r1.Version != 1 || r1.Lineage == "" {
		t.Fatalf("first publish: %+v %v", r1, err)
	}
	// A second publisher (another term, another scheduler) keeps the lineage.
	q := New(cli, layout, Options{Author: "lbscheduler/S2"})
	r2, err := q.Publish(ctx, l, snap(70, 0), "two")
	if err != nil || r2.Version != 2 || r2.Lineage != r1.Lineage {
		t.Fatalf("second publish: %+v %v, want v2 in lineage %s", r2, err, r1.Lineage)
	}
	if ptr := pointer(t, cli, "BFE1"); ptr.Lineage != r1.Lineage || ptr.Version != 2 {
		t.Fatalf("pointer %+v", ptr)
	}
	m, err := q.Manifest(ctx, "BFE1", 2)
	if err != nil || m.Meta.Lineage != r1.Lineage || m.Meta.Parent != 1 {
		t.Fatalf("manifest meta %+v, %v", m.Meta, err)
	}
	if n := count(t, cli, layout.Lineage()); n != 1 {
		t.Fatalf("%d lineage keys", n)
	}

	// The prefix is wiped (every key, as a fresh etcd would be): a new
	// lineage, and its history starts again at 1.
	if _, err := cli.Delete(ctx, layout.Root(), clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	l2 := lead(t, cli, "S1")
	r3, err := q.Publish(ctx, l2, snap(70, 0), "after wipe")
	if err != nil || r3.Outcome != Published || r3.Version != 1 || r3.Lineage == "" || r3.Lineage == r1.Lineage {
		t.Fatalf("publish after wipe: %+v %v; want v1 of a new lineage (old %s)", r3, err, r1.Lineage)
	}
	if m, err := q.Manifest(ctx, "BFE1", 1); err != nil || m.Meta.Parent != 0 || m.Meta.Lineage != r3.Lineage {
		t.Fatalf("manifest after wipe %+v, %v", m.Meta, err)
	}
}

// The bug of issue 15: a leftover snapshot key above the pointer made every
// publish fail with "current pointer moved concurrently after 3 attempts".
func TestLeftoverSnapshotKeyAbovePointer(t *testing.T) {
	_, cli := etcdtest.New(t)
	ctx := ctxT(t)
	l := lead(t, cli, "S1")
	p := New(cli, layout, Options{Author: "lbscheduler/S1"})
	if _, err := p.Publish(ctx, l, snap(60, 0), "one"); err != nil {
		t.Fatal(err)
	}
	for _, v := range []uint64{2, 7} { // right above the pointer, and further
		k, _ := layout.Snapshot("BFE1", v)
		if _, err := cli.Put(ctx, k, `{"leftover":true}`); err != nil {
			t.Fatal(err)
		}
	}
	r, err := p.Publish(ctx, l, snap(70, 0), "two")
	if err != nil || r.Version != 8 {
		t.Fatalf("publish with v2 and v7 left over above v1: %+v %v; want v8", r, err)
	}
	if p.Count("conflict") != 0 {
		t.Fatalf("%v conflicts", p.Count("conflict"))
	}
	if m, err := p.Manifest(ctx, "BFE1", 8); err != nil || m.Meta.Parent != 1 {
		t.Fatalf("v8 manifest %+v, %v; want parent 1 (the pointer)", m.Meta, err)
	}
}

// A pointer moved back by hand: proxies of the lineage hold a newer version
// and refuse anything at or below it. The next publish goes above it; the
// versions of proxies in another lineage do not count.
func TestPublishesAboveProxiesAhead(t *testing.T) {
	_, cli := etcdtest.New(t)
	ctx := ctxT(t)
	l := lead(t, cli, "S1")
	p := New(cli, layout, Options{Author: "lbscheduler/S1"})
	r1, err := p.Publish(ctx, l, snap(60, 0), "one")
	if err != nil {
		t.Fatal(err)
	}
	status := func(id, lineage string, applied uint64) {
		k, _ := layout.Status("BFE1", id)
		b, _ := json.Marshal(report.ProxyStatus{ProxyCluster: "BFE1", ID: id, AppliedLineage: lineage, AppliedVersion: applied, EtcdConnected: true})
		if _, err := cli.Put(ctx, k, string(b)); err != nil {
			t.Fatal(err)
		}
	}
	status("p1", r1.Lineage, 15)
	status("p2", "some-old-lineage", 90)
	status("p3", "", 50)
	r2, err := p.Publish(ctx, l, snap(70, 0), "two")
	if err != nil || r2.Version != 16 {
		t.Fatalf("publish with p1 at v15: %+v %v; want v16", r2, err)
	}
}

// A pointer written before lineages (no lineage) with the same content is
// republished once in the lineage, so that every pointer carries one.
func TestPointerWithoutLineageIsRepublished(t *testing.T) {
	_, cli := etcdtest.New(t)
	ctx := ctxT(t)
	l := lead(t, cli, "S1")
	s := snap(60, 0)
	k, _ := layout.Current("BFE1")
	b, _ := json.Marshal(snapshot.Pointer{Version: 4, Hash: s.Meta.Hash})
	if _, err := cli.Put(ctx, k, string(b)); err != nil {
		t.Fatal(err)
	}
	p := New(cli, layout, Options{Author: "lbscheduler/S1"})
	r, err := p.Publish(ctx, l, s, "same content")
	if err != nil || r.Outcome != Published || r.Version != 5 || r.Lineage == "" {
		t.Fatalf("%+v %v; want v5 published in a lineage", r, err)
	}
	r, err = p.Publish(ctx, l, s, "same content")
	if err != nil || r.Outcome != Unchanged || r.Version != 5 {
		t.Fatalf("%+v %v; want unchanged", r, err)
	}
}

package publish

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapio"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/testkit/etcdtest"
)

// multi is a valid snapshot of BFE1 with n clusters (stored split); cluster
// i's SC1 weight is w[i] if set, 50 otherwise.
func multi(n int, w map[int]int) *snapshot.Snapshot {
	s := &snapshot.Snapshot{
		Meta:     snapshot.Meta{ProxyCluster: "BFE1"},
		Settings: snapshot.Settings{IDC: "IDC1"},
		Products: map[string]config.Product{"demo": {Hosts: []string{"demo.example"}, Rules: []config.Rule{{Cond: "default_t()", Cluster: "c0"}}}},
		Clusters: map[string]snapshot.Cluster{},
	}
	for i := range n {
		sc1 := 50
		if v, ok := w[i]; ok {
			sc1 = v
		}
		s.Clusters[fmt.Sprintf("c%d", i)] = snapshot.Cluster{
			SubClusters: map[string]config.SubCluster{
				"SC1": {IDC: "IDC1", Instances: []config.Instance{{Addr: "127.0.0.1", Port: 8001 + i, Weight: 1}}},
				"SC2": {IDC: "IDC2", Instances: []config.Instance{{Addr: "127.0.0.2", Port: 8001 + i, Weight: 1}}},
			},
			Policy: config.DefaultPolicy(),
			Row:    snapshot.Row{Denominator: 100, Weights: map[string]int{"SC1": sc1, "SC2": 100 - sc1, config.Blackhole: 0}},
		}
	}
	s.Meta.Hash = snapshot.ContentHash(s)
	return s
}

// partRevs maps each stored part's digest to its mod revision.
func partRevs(t *testing.T, cli *clientv3.Client) map[string]int64 {
	t.Helper()
	r, err := cli.Get(ctxT(t), layout.PartsPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, kv := range r.Kvs {
		out[string(kv.Key)[len(layout.PartsPrefix()):]] = kv.ModRevision
	}
	return out
}

// refsOf is the set of parts version v of BFE1 references.
func refsOf(t *testing.T, p *Publisher, v uint64) map[string]bool {
	t.Helper()
	m, err := p.Manifest(ctxT(t), "BFE1", v)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := snapshot.Refs(m, snapio.PartsBatch(ctxT(t), p.cli, p.layout))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, d := range refs {
		out[d] = true
	}
	return out
}

// publishOneClusterChange publishes 40 clusters, then a change of c7, as
// leader S1 (l); before is the stored parts between the two publishes.
func publishOneClusterChange(t *testing.T) (*clientv3.Client, *Leadership, *Publisher, map[string]int64, Result) {
	t.Helper()
	_, cli := etcdtest.New(t)
	ctx := ctxT(t)
	l := lead(t, cli, "S1")
	p := New(cli, layout, Options{Author: "lbscheduler/S1"})
	if _, err := p.Publish(ctx, l, multi(40, nil), "first"); err != nil {
		t.Fatal(err)
	}
	before := partRevs(t, cli)
	r, err := p.Publish(ctx, l, multi(40, map[int]int{7: 60}), "one cluster")
	if err != nil || r.Version != 2 {
		t.Fatalf("%+v %v", r, err)
	}
	return cli, l, p, before, r
}

// A one-cluster change writes two parts (the cluster and its bucket) and
// rewrites none of the others.
func TestSplitPublishWritesOnlyNewParts(t *testing.T) {
	cli, _, p, before, r := publishOneClusterChange(t)
	if want := 1 + snapshot.BucketCount(40) + 40; len(before) != want {
		t.Fatalf("%d parts after the first publish, want %d (head, buckets, clusters)", len(before), want)
	}
	ctx := ctxT(t)
	after := partRevs(t, cli)
	if len(after) != len(before)+2 {
		t.Fatalf("%d parts after a one-cluster change, want %d", len(after), len(before)+2)
	}
	for d, rev := range before {
		if after[d] != rev {
			t.Errorf("part %s rewritten (mod revision %d → %d)", d, rev, after[d])
		}
	}
	got, err := p.Load(ctx, "BFE1", 2)
	if err != nil || got.Clusters["c7"].Row.Weights["SC1"] != 60 || got.Meta.Hash != r.Hash {
		t.Fatalf("Load v2: %v", err)
	}
}

// History trimming and part collection keep every part a retained version
// references, shared ones included, and delete exactly the others.
func TestCollectKeepsSharedSplitParts(t *testing.T) {
	_, cli := etcdtest.New(t)
	ctx := ctxT(t)
	l := lead(t, cli, "S1")
	p := New(cli, layout, Options{Author: "lbscheduler/S1"})
	for v := range 4 {
		if _, err := p.Publish(ctx, l, multi(40, map[int]int{v: 10 + v}), fmt.Sprint("v", v+1)); err != nil {
			t.Fatal(err)
		}
	}
	old := refsOf(t, p, 1)
	for d := range refsOf(t, p, 2) {
		old[d] = true
	}
	kept := refsOf(t, p, 3)
	for d := range refsOf(t, p, 4) {
		kept[d] = true
	}
	gone := 0
	for d := range old {
		if !kept[d] {
			gone++
		}
	}
	if gone == 0 || gone == len(old) {
		t.Fatalf("%d of v1+v2's %d parts are not shared with v3+v4: the test needs some of each", gone, len(old))
	}
	if n, err := p.Prune(ctx, l, "BFE1", 2); err != nil || n != 2 {
		t.Fatalf("pruned %d (%v), want 2", n, err)
	}
	before := len(partRevs(t, cli))
	if n, err := p.CollectParts(ctx, l, 0); err != nil || n != gone {
		t.Fatalf("collected %d (%v), want %d", n, err, gone)
	}
	left := partRevs(t, cli)
	if len(left) != before-gone || len(left) != len(kept) {
		t.Fatalf("%d parts left, want %d (those of v3 and v4)", len(left), len(kept))
	}
	for d := range kept {
		if _, ok := left[d]; !ok {
			t.Errorf("part %s of a retained version was collected", d)
		}
	}
	for _, v := range []uint64{3, 4} {
		if _, err := p.Load(ctx, "BFE1", v); err != nil {
			t.Fatalf("Load v%d after collection: %v", v, err)
		}
	}

	// A bucket that cannot be read might list anything: nothing is collected.
	m, err := p.Manifest(ctx, "BFE1", 4)
	if err != nil {
		t.Fatal(err)
	}
	bk, _ := layout.Part(m.Buckets[0])
	if _, err := cli.Delete(ctx, bk); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("orphan"))
	orphan, _ := layout.Part(hex.EncodeToString(sum[:]))
	if _, err := cli.Put(ctx, orphan, "orphan"); err != nil {
		t.Fatal(err)
	}
	// (A fresh publisher, as after a failover: p keeps v4's references.)
	p2 := New(cli, layout, Options{Author: "lbscheduler/S1"})
	if n, err := p2.CollectParts(ctx, l, 0); err == nil || n != 0 || !strings.Contains(err.Error(), "bucket 0") {
		t.Fatalf("collected %d (%v) with a bucket missing, want an error and nothing deleted", n, err)
	}
	if n := count(t, cli, orphan); n != 1 {
		t.Fatal("the orphan part was deleted although a bucket was unreadable")
	}
}

// rawPointer reads current/BFE1 strictly.
func rawPointer(t *testing.T, cli *clientv3.Client) snapshot.Pointer {
	t.Helper()
	k, _ := layout.Current("BFE1")
	r, err := cli.Get(ctxT(t), k)
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("read %s: %v", k, err)
	}
	var p snapshot.Pointer
	if err := codec.UnmarshalJSON(r.Kvs[0].Value, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// The pointer a publish writes carries the new version's manifest — the
// very one stored under snapshots/ — and the parts the publish wrote (the
// cluster and its bucket for a one-cluster change), each under its digest;
// with NoPush it carries none (what proxies of the previous release read).
func TestPublishPushesManifestAndNewParts(t *testing.T) {
	cli, l, p, before, r := publishOneClusterChange(t)
	ctx := ctxT(t)
	ptr := rawPointer(t, cli)
	if ptr.Push == nil || ptr.Version != 2 || ptr.Hash != r.Hash {
		t.Fatalf("pointer %+v: want v2 %s with a push", ptr, r.Hash)
	}
	stored, err := p.Manifest(ctx, "BFE1", 2)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := mustJSON(t, ptr.Push.Manifest), mustJSON(t, stored); string(got) != string(want) {
		t.Fatalf("pushed manifest\n%s\nis not the stored one\n%s", got, want)
	}
	after := partRevs(t, cli)
	if len(ptr.Push.Parts) != 2 {
		t.Fatalf("%d parts pushed, want 2 (c7 and its bucket)", len(ptr.Push.Parts))
	}
	for d, b := range ptr.Push.Parts {
		sum := sha256.Sum256(b)
		if hex.EncodeToString(sum[:]) != d || before[d] != 0 || after[d] == 0 {
			t.Fatalf("pushed part %s: digest %x, stored before %v, stored now %v; want its digest, written by this publish", d, sum, before[d] != 0, after[d] != 0)
		}
	}

	q := New(cli, layout, Options{Author: "lbscheduler/S1", NoPush: true})
	if r, err := q.Publish(ctx, l, multi(40, map[int]int{8: 61}), "no push"); err != nil || r.Version != 3 {
		t.Fatalf("%+v %v", r, err)
	}
	if ptr := rawPointer(t, cli); ptr.Push != nil || ptr.Version != 3 {
		t.Fatalf("NoPush: pointer %+v, want v3 without a push", ptr)
	}
}

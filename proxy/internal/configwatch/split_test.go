package configwatch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapio"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

// manyClusters is a valid snapshot of n distinct clusters whose content
// does not depend on version; cluster i's SC1 weight is w[i] if set, 45
// otherwise.
func manyClusters(version uint64, n int, w map[int]int) *snapshot.Snapshot {
	s := testSnapshot(1)
	s.Meta.Version, s.Meta.Parent = version, version-1
	for i := range n {
		sc1 := 45
		if v, ok := w[i]; ok {
			sc1 = v
		}
		s.Clusters[fmt.Sprintf("c%d", i)] = snapshot.Cluster{
			SubClusters: map[string]config.SubCluster{
				"SC1": {IDC: "IDC1", Instances: []config.Instance{{Addr: "127.0.0.1", Port: 9000 + i, Weight: 1}}},
				"SC2": {IDC: "IDC2", Instances: []config.Instance{{Addr: "127.0.0.2", Port: 9000 + i, Weight: 1}}},
			},
			Policy: config.DefaultPolicy(),
			Row:    snapshot.Row{Denominator: 100, Weights: map[string]int{"SC1": sc1, "SC2": 90 - sc1, config.Blackhole: 10}},
		}
	}
	s.Meta.Hash = snapshot.ContentHash(s)
	return s
}

// publishSplit publishes s in the layout the scheduler stores.
func publishSplit(t testing.TB, cli *clientv3.Client, s *snapshot.Snapshot) (snapshot.Manifest, []snapshot.Part) {
	t.Helper()
	m, parts, err := snapshot.EncodeStore(s)
	if err != nil || m.Encoding != snapshot.EncodingSplit {
		t.Fatalf("EncodeStore: %q, %v", m.Encoding, err)
	}
	raw, _ := json.Marshal(m)
	publishPtr(t, cli, pointerOf(s), raw, parts)
	return m, parts
}

// countingKV counts transactions (the watcher reads parts in them).
type countingKV struct {
	clientv3.KV
	txns atomic.Int64
}

func (c *countingKV) Txn(ctx context.Context) clientv3.Txn {
	c.txns.Add(1)
	return c.KV.Txn(ctx)
}

// A one-cluster change reads two parts (its bucket and its cluster) in two
// transactions; everything else comes from the applied snapshot's parts.
func TestSplitFetchesOnlyMissingParts(t *testing.T) {
	_, cli := etcdtest.New(t)
	_, parts := publishSplit(t, cli, manyClusters(1, 40, nil))
	wcli := newClient(t, cli.Endpoints()...)
	kv := &countingKV{KV: wcli.KV}
	wcli.KV = kv
	rec := newRecorder()
	w := start(t, Config{Client: wcli, Apply: rec.apply, StoreCheckInterval: time.Hour})
	waitApplied(t, w, rec, 1, 20*time.Second, "v1 applied")
	if got := w.Status().PartsRead; got != uint64(len(parts)) {
		t.Fatalf("first sync read %d parts, want all %d", got, len(parts))
	}
	txns := kv.txns.Load()
	v2 := manyClusters(2, 40, map[int]int{5: 30})
	publishSplit(t, cli, v2)
	waitApplied(t, w, rec, 2, 20*time.Second, "v2 applied")
	if st := w.Status(); st.PartsRead != uint64(len(parts))+2 || st.AppliedHash != v2.Meta.Hash {
		t.Fatalf("after a one-cluster change: %d parts read in all (want %d), hash %s (want %s)", st.PartsRead, len(parts)+2, st.AppliedHash, v2.Meta.Hash)
	}
	if n := kv.txns.Load() - txns; n != 2 {
		t.Fatalf("%d transactions for a one-cluster change, want 2 (bucket, then cluster)", n)
	}
}

// I5 with held parts: a tampered or missing cluster part rejects the whole
// snapshot, naming the part; the last good one stays, and the next good one
// still reads only what it lacks.
func TestSplitBadPartRejected(t *testing.T) {
	_, cli := etcdtest.New(t)
	_, parts := publishSplit(t, cli, manyClusters(1, 40, nil))
	rec := newRecorder()
	w := start(t, Config{Client: cli, Apply: rec.apply})
	waitApplied(t, w, rec, 1, 20*time.Second, "v1 applied")
	ctx := context.Background()
	held := map[string]bool{}
	for _, p := range parts {
		held[p.Digest] = true
	}

	for i, tc := range []struct {
		name string
		harm func(k string, data []byte)
		want string
	}{
		{"tampered", func(k string, data []byte) {
			bad := bytes.Clone(data)
			bad[len(bad)/2] ^= 0xff
			if _, err := cli.Put(ctx, k, string(bad)); err != nil {
				t.Fatal(err)
			}
		}, `cluster "c9" part digest is`},
		{"missing", func(k string, _ []byte) {
			if _, err := cli.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
		}, `cluster "c9" part (`},
	} {
		v := uint64(2 + i)
		bad := manyClusters(v, 40, map[int]int{9: 20 + i})
		m, bparts, err := snapshot.EncodeStore(bad)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(m)
		// Write the parts, harm c9's new one, then move the pointer.
		publishPtr(t, cli, pointerOf(testSnapshot(1)), []byte(`{}`), bparts)
		var target snapshot.Part
		for _, p := range bparts {
			if !held[p.Digest] && !slices.Contains(m.Buckets, p.Digest) {
				target = p
			}
		}
		if target.Digest == "" {
			t.Fatal("c9's new part not found")
		}
		k, _ := layout.Part(target.Digest)
		tc.harm(k, target.Data)
		publishPtr(t, cli, pointerOf(bad), raw, nil)
		poll.EventuallyTrue(t, 20*time.Second, tc.name+" part rejected", func() bool { return w.Status().RejectedVersion == v })
		st := w.Status()
		if st.AppliedVersion != 1 || !strings.Contains(st.RejectedReason, tc.want) || rec.last() != 1 {
			t.Fatalf("%s: applied v%d (rec %d), rejected %q; want v1 kept and a reason containing %q", tc.name, st.AppliedVersion, rec.last(), st.RejectedReason, tc.want)
		}
	}
	read := w.Status().PartsRead
	publishSplit(t, cli, manyClusters(4, 40, map[int]int{11: 25}))
	waitApplied(t, w, rec, 4, 20*time.Second, "v4 applied")
	if got := w.Status().PartsRead - read; got != 2 {
		t.Fatalf("v4 read %d parts, want 2", got)
	}
}

// A proxy whose disk cache holds a snapshot published in the old layout
// starts from it and applies a split one, reading only the parts that
// changed (the cache seeds the part set).
// The cache seeds the parts from snapshot.SplitMinClusters clusters on
// (the smallest split snapshot: manyClusters adds n to testSnapshot's) as
// well as from more.
func TestOldLayoutCacheThenSplit(t *testing.T) {
	for _, n := range []int{40, snapshot.SplitMinClusters - len(testSnapshot(1).Clusters)} {
		t.Run(fmt.Sprint(n, " clusters added"), func(t *testing.T) { oldLayoutCacheThenSplit(t, n) })
	}
}

func oldLayoutCacheThenSplit(t *testing.T, n int) {
	_, cli := etcdtest.New(t)
	v1 := manyClusters(1, n, nil)
	publish(t, cli, v1) // the old layout
	dir := t.TempDir()
	func() {
		rec := newRecorder()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cache := openCache(t, dir)
		w, err := New(Config{Client: cli, Layout: layout, ProxyCluster: pc, Apply: rec.apply, Cache: cache, Logger: discard()})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		waitApplied(t, w, rec, 1, 20*time.Second, "v1 (old layout) applied")
		poll.EventuallyTrue(t, 10*time.Second, "v1 cached", func() bool {
			s, err := cache.Load()
			return err == nil && s.Snapshot().Meta.Version == 1
		})
		cancel()
		<-done
	}()
	// The split publication of v1's content (as the upgraded scheduler
	// would store it) is in etcd; v2 changes one cluster.
	if _, parts, err := snapshot.EncodeStore(manyClusters(1, n, nil)); err != nil {
		t.Fatal(err)
	} else {
		for _, p := range parts {
			k, _ := layout.Part(p.Digest)
			if _, err := cli.Put(context.Background(), k, string(p.Data)); err != nil {
				t.Fatal(err)
			}
		}
	}
	rec := newRecorder()
	w := start(t, Config{Client: cli, Apply: rec.apply, Cache: openCache(t, dir)})
	poll.EventuallyTrue(t, 20*time.Second, "cached v1 applied", func() bool { return len(rec.versions()) >= 1 })
	v2 := manyClusters(2, n, map[int]int{3: 33})
	publishSplit(t, cli, v2)
	waitApplied(t, w, rec, 2, 20*time.Second, "v2 (split) applied")
	st := w.Status()
	if got := rec.versions(); !equal(got, []uint64{1, 2}) || st.AppliedHash != v2.Meta.Hash {
		t.Fatalf("applied %v hash %s; want [1 2] and %s", got, st.AppliedHash, v2.Meta.Hash)
	}
	// The restarted watcher listed the old-layout v1 pointer first only if
	// v2 was not yet there; either way v2 read just its bucket and cluster.
	if st.PartsRead != 2 {
		t.Fatalf("v2 read %d parts, want 2 (the cache seeded the rest)", st.PartsRead)
	}
}

// Status.SnapshotReads counts one request per transaction of up to
// snapio.MaxGetsPerTxn part reads: 99, 100 and 101 parts read are 1, 1
// and 2 requests. (Parts absent from etcd read as nil: the count is the
// same.)
func TestSnapshotReadsCountsPartTransactions(t *testing.T) {
	_, cli := etcdtest.New(t)
	w := idleWatcher(t, cli)
	for _, c := range []struct{ parts, reads uint64 }{{snapio.MaxGetsPerTxn - 1, 1}, {snapio.MaxGetsPerTxn, 1}, {snapio.MaxGetsPerTxn + 1, 2}} {
		ds := make([]string, c.parts)
		for i := range ds {
			ds[i] = fmt.Sprintf("%064x", uint64(i)+c.parts<<32)
		}
		before := w.Status()
		out, err := w.partsGetter(context.Background(), nil, map[string][]byte{})(ds)
		if err != nil || uint64(len(out)) != c.parts {
			t.Fatalf("%d parts: %d answers, %v", c.parts, len(out), err)
		}
		st := w.Status()
		if n := st.SnapshotReads - before.SnapshotReads; n != c.reads {
			t.Errorf("%d parts read: %d snapshot reads counted, want %d", c.parts, n, c.reads)
		}
		if n := st.PartsRead - before.PartsRead; n != c.parts {
			t.Errorf("%d parts read: %d counted", c.parts, n)
		}
	}
}

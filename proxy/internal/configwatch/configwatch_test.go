package configwatch

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/faultproxy"
	"github.com/sluicelb/sluice/testkit/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStaleSeconds(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		s    Status
		want float64
	}{
		{"connected", Status{Connected: true, LastSync: t0}, 90}, // connected says nothing of the watch's health
		{"connected, synced later than applied", Status{Connected: true, LastSync: t0.Add(80 * time.Second), AppliedAt: t0}, 10},
		{"disconnected after sync", Status{LastSync: t0, AppliedAt: t0.Add(-time.Hour)}, 90},
		{"never synced, from cache", Status{AppliedAt: t0.Add(30 * time.Second)}, 60},
		{"nothing at all", Status{}, 0},
	}
	for _, c := range cases {
		if got := c.s.StaleSeconds(t0.Add(90 * time.Second)); got != c.want {
			t.Errorf("%s: StaleSeconds = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	_, cli := etcdtest.New(t)
	rec := newRecorder()
	if _, err := New(Config{Client: cli, ProxyCluster: "../x", Apply: rec.apply}); err == nil || !strings.Contains(err.Error(), "proxy cluster") {
		t.Fatalf("bad proxy cluster name: err = %v", err)
	}
	if _, err := New(Config{Client: cli, ProxyCluster: pc}); err == nil || !strings.Contains(err.Error(), "Apply") {
		t.Fatalf("nil Apply: err = %v", err)
	}
	reg := prometheus.NewRegistry()
	if _, err := New(Config{Client: cli, ProxyCluster: pc, Apply: rec.apply, Metrics: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Client: cli, ProxyCluster: pc, Apply: rec.apply, Metrics: reg}); err == nil {
		t.Fatal("second watcher on the same registry: want an error")
	}
}

func TestAppliesCurrentAndEveryNewer(t *testing.T) {
	_, cli := etcdtest.New(t)
	publish(t, cli, testSnapshot(1))
	rec := newRecorder()
	reg := prometheus.NewRegistry()
	cache := openCache(t, t.TempDir())
	w := start(t, Config{Client: newClient(t, cli.Endpoints()...), Apply: rec.apply, Cache: cache, Metrics: reg})
	poll.EventuallyTrue(t, 20*time.Second, "v1 applied at start", func() bool { return rec.last() == 1 })
	for v := uint64(2); v <= 5; v++ {
		publish(t, cli, testSnapshot(v))
		poll.EventuallyTrue(t, 20*time.Second, "next version applied", func() bool { return rec.last() == v })
	}
	if got := rec.versions(); !equal(got, []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("applied %v, want [1 2 3 4 5]", got)
	}
	// A fast burst may be coalesced, but never out of order.
	for v := uint64(6); v <= 30; v++ {
		publish(t, cli, testSnapshot(v))
	}
	waitApplied(t, w, rec, 30, 20*time.Second, "v30 applied")
	got := rec.versions()
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("applied out of order: %v", got)
		}
	}
	st := w.Status()
	want := testSnapshot(30)
	if st.AppliedVersion != 30 || st.AppliedHash != want.Meta.Hash || st.Source != SourceEtcd || st.LatestVersion != 30 ||
		!st.Connected || st.RejectedVersion != 0 || st.StaleSeconds(st.LastSync) != 0 {
		t.Fatalf("status = %+v", st)
	}
	poll.EventuallyTrue(t, 10*time.Second, "disk cache holds v30", func() bool {
		s, err := cache.Load()
		return err == nil && s.Snapshot().Meta.Version == 30 && s.Snapshot().Meta.Hash == want.Meta.Hash
	})
	if v := testutil.ToFloat64(w.m.Version); v != 30 {
		t.Fatalf("version gauge = %v, want 30", v)
	}
	if n := testutil.ToFloat64(w.m.Applies.WithLabelValues("applied")); n != float64(len(got)) {
		t.Fatalf("applied counter = %v, want %d", n, len(got))
	}
	if n, err := testutil.GatherAndCount(reg, "sluice_proxy_snapshot_staleness_seconds", "sluice_proxy_snapshot_apply_duration_seconds"); err != nil || n != 2 {
		t.Fatalf("gathered %d series (%v), want staleness and apply duration", n, err)
	}
}

func TestLargeSnapshotInParts(t *testing.T) {
	_, cli := etcdtest.New(t)
	s := testSnapshot(1)
	m, _, err := snapshot.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	m, part := splitManifest(m)
	raw, _ := json.Marshal(m)
	publishRaw(t, cli, 1, s.Meta.Hash, raw, []snapshot.Part{part})
	rec := newRecorder()
	start(t, Config{Client: cli, Apply: rec.apply})
	poll.EventuallyTrue(t, 20*time.Second, "v1 (in parts) applied", func() bool { return rec.last() == 1 })
}

// I1: an older version pointed to later is never applied, also across a
// restart from the disk cache.
func TestNeverAppliesOlder(t *testing.T) {
	_, cli := etcdtest.New(t)
	cacheDir := t.TempDir()
	rec := newRecorder()
	snaps := map[uint64]*snapshot.Snapshot{}
	for v := uint64(1); v <= 6; v++ {
		snaps[v] = testSnapshot(v)
	}
	for v := uint64(1); v <= 5; v++ {
		publish(t, cli, snaps[v])
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := New(Config{Client: cli, Layout: layout, ProxyCluster: pc, Apply: rec.apply, Cache: openCache(t, cacheDir), Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	poll.EventuallyTrue(t, 20*time.Second, "v5 applied", func() bool { return rec.last() == 5 })
	movePointer(t, cli, snaps[3]) // someone rolls the pointer back
	poll.EventuallyTrue(t, 20*time.Second, "rollback seen and ignored", func() bool {
		return testutil.ToFloat64(w.m.Applies.WithLabelValues("older")) == 1
	})
	publish(t, cli, snaps[6])
	poll.EventuallyTrue(t, 20*time.Second, "v6 applied", func() bool { return rec.last() == 6 })
	if got := rec.versions(); !equal(got, []uint64{5, 6}) {
		t.Fatalf("applied %v, want [5 6] (v3 never)", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Restart: the cache holds v6, etcd points at v4.
	movePointer(t, cli, snaps[4])
	rec2 := newRecorder()
	w2 := start(t, Config{Client: cli, Apply: rec2.apply, Cache: openCache(t, cacheDir)})
	poll.EventuallyTrue(t, 20*time.Second, "v4 pointer seen after restart", func() bool {
		return testutil.ToFloat64(w2.m.Applies.WithLabelValues("older")) >= 1
	})
	if got := rec2.versions(); !equal(got, []uint64{6}) {
		t.Fatalf("after restart applied %v, want [6] from the disk cache only", got)
	}
	if st := w2.Status(); st.AppliedVersion != 6 || st.Source != SourceDiskCache {
		t.Fatalf("status after restart = %+v", st)
	}
}

// I5: invalid snapshots are rejected with a reason; Apply is not called and
// the previous one stays; a valid newer one applies afterwards.
func TestRejectsInvalidAndKeepsLastGood(t *testing.T) {
	_, cli := etcdtest.New(t)
	rec := newRecorder()
	rec.refuse[6] = errRefused
	publish(t, cli, testSnapshot(1))
	var changes atomic.Int64
	w := start(t, Config{Client: cli, Apply: rec.apply, OnChange: func() { changes.Add(1) }})
	poll.EventuallyTrue(t, 20*time.Second, "v1 applied", func() bool { return rec.last() == 1 })

	encode := func(s *snapshot.Snapshot) (snapshot.Manifest, []byte) {
		m, _, err := snapshot.Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(m)
		return m, raw
	}
	cases := []struct {
		name    string
		version uint64
		publish func()
		reason  string
	}{
		{"content hash mismatch", 2, func() {
			s := testSnapshot(2)
			s.Meta.Hash = testSnapshot(4).Meta.Hash // hash of other content
			publish(t, cli, s)
		}, "content hash"},
		{"missing part", 3, func() {
			s := testSnapshot(3)
			m, _ := encode(s)
			m, _ = splitManifest(m)
			raw, _ := json.Marshal(m)
			publishRaw(t, cli, 3, s.Meta.Hash, raw, nil) // part never written
		}, "snapshot part missing"},
		{"garbage manifest JSON", 4, func() {
			publishRaw(t, cli, 4, testSnapshot(4).Meta.Hash, []byte(`{"meta": {"version": 4,`), nil)
		}, "manifest"},
		{"manifest for another version", 5, func() {
			_, raw := encode(testSnapshot(8))
			publishRaw(t, cli, 5, testSnapshot(5).Meta.Hash, raw, nil)
		}, "pointer says"},
		{"apply refuses", 6, func() { publish(t, cli, testSnapshot(6)) }, "apply: table build refused"},
	}
	for _, c := range cases {
		c.publish()
		poll.EventuallyTrue(t, 20*time.Second, c.name+": rejected", func() bool { return w.Status().RejectedVersion == c.version })
		st := w.Status()
		if !strings.Contains(st.RejectedReason, c.reason) {
			t.Errorf("%s: reason %q does not mention %q", c.name, st.RejectedReason, c.reason)
		}
		if st.AppliedVersion != 1 || st.LatestVersion != c.version {
			t.Errorf("%s: applied v%d latest v%d, want applied v1 latest v%d", c.name, st.AppliedVersion, st.LatestVersion, c.version)
		}
		if got := rec.versions(); !equal(got, []uint64{1}) {
			t.Fatalf("%s: Apply got %v, want only [1]", c.name, got)
		}
	}
	publish(t, cli, testSnapshot(9))
	waitApplied(t, w, rec, 9, 20*time.Second, "valid v9 applied")
	// OnChange follows the recorded apply: wait for it, then count exactly.
	poll.EventuallyTrue(t, 10*time.Second, "v9's OnChange", func() bool { return changes.Load() >= int64(len(cases))+3 })
	if n := changes.Load(); n != int64(len(cases))+3 {
		t.Fatalf("OnChange called %d times, want %d (the connection + 2 applies + %d rejections)", n, len(cases)+3, len(cases))
	}
	if st := w.Status(); st.AppliedVersion != 9 || st.RejectedVersion != 0 || st.RejectedReason != "" {
		t.Fatalf("after a good apply: %+v", st)
	}
}

// A watcher cut off from etcd while 50 versions are published and etcd
// compacts resyncs after reconnecting and applies the latest.
func TestResyncsAfterCompaction(t *testing.T) {
	srv, cli := etcdtest.New(t)
	fp, err := faultproxy.New(strings.TrimPrefix(srv.Endpoints[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fp.Close() })
	wcli := newClient(t, fp.URL())
	rec := newRecorder()
	publish(t, cli, testSnapshot(1))
	w := start(t, Config{Client: wcli, Apply: rec.apply, StallTimeout: time.Minute})
	poll.EventuallyTrue(t, 20*time.Second, "v1 applied", func() bool { return rec.last() == 1 })

	fp.SetMode(faultproxy.Reject) // resets every connection, refuses new ones
	for v := uint64(2); v <= 51; v++ {
		publish(t, cli, testSnapshot(v))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "compact-marker")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if got := rec.last(); got != 1 {
		t.Fatalf("applied v%d while disconnected", got)
	}
	fp.SetMode(faultproxy.PassThrough)
	poll.EventuallyTrue(t, 30*time.Second, "v51 applied after reconnect", func() bool { return rec.last() == 51 })
	st := w.Status()
	if st.WatchRestarts[ReasonCompacted] < 1 {
		t.Fatalf("watch restarts %v, want a compaction restart", st.WatchRestarts)
	}
	got := rec.versions()
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("applied out of order: %v", got)
		}
	}
}

// behindFaultProxy starts etcd and returns a client of it, a fault proxy in
// front of it and a client through that proxy (the watcher's).
func behindFaultProxy(t *testing.T) (*clientv3.Client, *faultproxy.Proxy, *clientv3.Client) {
	t.Helper()
	srv, cli := etcdtest.New(t)
	fp, err := faultproxy.New(strings.TrimPrefix(srv.Endpoints[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fp.Close() })
	return cli, fp, newClient(t, fp.URL())
}

// A watch that silently stopped (its connection blackholed: open, silent)
// is still "connected" until the stall timeout ends its round; its
// staleness is the truth all the while — the time since etcd was last
// heard from — not 0 because the connection state has not flipped yet.
func TestStaleWhileConnectedButSilent(t *testing.T) {
	cli, fp, wcli := behindFaultProxy(t)
	rec := newRecorder()
	publish(t, cli, testSnapshot(1))
	// A stall timeout far beyond the test: the round never ends by itself.
	w := start(t, Config{Client: wcli, Apply: rec.apply, StallTimeout: 10 * time.Minute, OpTimeout: time.Second, Metrics: prometheus.NewRegistry()})
	t.Cleanup(func() { fp.SetMode(faultproxy.PassThrough) }) // before start's cleanup: Run ends over a working link
	poll.EventuallyTrue(t, 20*time.Second, "v1 applied, connected", func() bool { return rec.last() == 1 && w.Status().Connected })

	fp.SetMode(faultproxy.Blackhole)
	silentFrom := time.Now()
	var st Status
	poll.EventuallyTrue(t, 20*time.Second, "staleness grows while connected", func() bool {
		st = w.Status()
		return st.Connected && st.StaleSeconds(time.Now()) >= 1
	})
	if !st.LastSync.Before(silentFrom) {
		t.Fatalf("last sync %v is after the link went silent at %v", st.LastSync, silentFrom)
	}
	if g := testutil.ToFloat64(w.m.staleness); g < 1 {
		t.Fatalf("staleness gauge = %v while silent for %v, want >= 1", g, time.Since(silentFrom))
	}
}

// A blackholed connection (open, silent) is detected as a stall and the
// watch restarts; once traffic flows again the watcher converges.
func TestDetectsStall(t *testing.T) {
	cli, fp, wcli := behindFaultProxy(t)
	rec := newRecorder()
	publish(t, cli, testSnapshot(1))
	stall := 1500 * time.Millisecond
	reg := prometheus.NewRegistry()
	w := start(t, Config{Client: wcli, Apply: rec.apply, StallTimeout: stall, OpTimeout: time.Second, Metrics: reg})
	poll.EventuallyTrue(t, 20*time.Second, "v1 applied", func() bool { return rec.last() == 1 })
	// Healthy but idle for two stall timeouts: progress keeps it alive.
	idleUntil := time.Now().Add(2 * stall)
	poll.EventuallyTrue(t, 10*time.Second, "idle period passes", func() bool { return time.Now().After(idleUntil) })
	if st := w.Status(); st.WatchRestarts[ReasonStall] != 0 || !st.Connected {
		t.Fatalf("idle healthy watch restarted: %+v", st)
	}

	blackholedAt := time.Now()
	fp.SetMode(faultproxy.Blackhole)
	poll.EventuallyTrue(t, 10*stall, "stall detected", func() bool { return w.Status().WatchRestarts[ReasonStall] >= 1 })
	t.Logf("stall detected %v after the blackhole began", time.Since(blackholedAt))
	st := w.Status()
	if st.Connected || st.StaleSeconds(time.Now()) <= 0 {
		t.Fatalf("while blackholed: %+v", st)
	}
	if n := testutil.ToFloat64(w.m.restarts.WithLabelValues(ReasonStall)); n < 1 {
		t.Fatalf("stall restart metric = %v", n)
	}
	publish(t, cli, testSnapshot(2)) // published during the outage
	fp.SetMode(faultproxy.PassThrough)
	poll.EventuallyTrue(t, 30*time.Second, "v2 applied after heal", func() bool { return rec.last() == 2 })
	publish(t, cli, testSnapshot(3))
	poll.EventuallyTrue(t, 30*time.Second, "v3 applied", func() bool { return rec.last() == 3 })
	poll.EventuallyTrue(t, 10*time.Second, "connected again", func() bool { return w.Status().Connected })
}

// I3: a proxy restarted while etcd is down serves its disk cache, then
// converges once etcd is back.
func TestRestartWithEtcdDownUsesDiskCache(t *testing.T) {
	srv, cli := etcdtest.New(t)
	cacheDir := t.TempDir()
	for v := uint64(1); v <= 3; v++ {
		publish(t, cli, testSnapshot(v))
	}
	rec := newRecorder()
	func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cache := openCache(t, cacheDir)
		w, err := New(Config{Client: cli, Layout: layout, ProxyCluster: pc, Apply: rec.apply, Cache: cache, Logger: discard()})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		poll.EventuallyTrue(t, 20*time.Second, "v3 applied", func() bool { return rec.last() == 3 })
		poll.EventuallyTrue(t, 10*time.Second, "v3 cached", func() bool {
			s, err := cache.Load()
			return err == nil && s.Snapshot().Meta.Version == 3
		})
		cancel()
		<-done
	}()

	srv.Stop()
	wcli := newClient(t, srv.Endpoints...)
	rec2 := newRecorder()
	w2 := start(t, Config{Client: wcli, Apply: rec2.apply, Cache: openCache(t, cacheDir), OpTimeout: time.Second, StallTimeout: 3 * time.Second})
	poll.EventuallyTrue(t, 10*time.Second, "cached v3 applied without etcd", func() bool { return rec2.last() == 3 })
	poll.EventuallyTrue(t, 10*time.Second, "sync failure recorded", func() bool { return w2.Status().WatchRestarts[ReasonSyncError] >= 1 })
	if st := w2.Status(); st.Source != SourceDiskCache || st.Connected || st.AppliedVersion != 3 {
		t.Fatalf("while etcd is down: %+v", st)
	}

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	publish(t, cli, testSnapshot(4))
	waitApplied(t, w2, rec2, 4, 30*time.Second, "v4 applied after etcd is back")
	if got := rec2.versions(); !equal(got, []uint64{3, 4}) {
		t.Fatalf("applied %v, want [3 4]", got)
	}
	if st := w2.Status(); st.Source != SourceEtcd || !st.Connected {
		t.Fatalf("after etcd is back: %+v", st)
	}
}

// A corrupt cache is not applied; the watcher waits for etcd.
func TestCorruptCacheNotApplied(t *testing.T) {
	_, cli := etcdtest.New(t)
	dir := t.TempDir()
	cache := openCache(t, dir)
	if err := cache.Save(testSnapshot(9)); err != nil {
		t.Fatal(err)
	}
	corrupt(t, cache.Path())
	publish(t, cli, testSnapshot(2))
	rec := newRecorder()
	w := start(t, Config{Client: cli, Apply: rec.apply, Cache: openCache(t, dir)})
	poll.EventuallyTrue(t, 20*time.Second, "v2 from etcd applied", func() bool { return rec.last() == 2 })
	if got := rec.versions(); !equal(got, []uint64{2}) {
		t.Fatalf("applied %v, want only [2] (corrupt cache ignored)", got)
	}
	if n := testutil.ToFloat64(w.m.Applies.WithLabelValues("cache_corrupt")); n != 1 {
		t.Fatalf("cache_corrupt = %v, want 1", n)
	}
}

// A deleted pointer never empties the table.
func TestPointerDeletedKeepsLastGood(t *testing.T) {
	_, cli := etcdtest.New(t)
	rec := newRecorder()
	publish(t, cli, testSnapshot(1))
	w := start(t, Config{Client: cli, Apply: rec.apply})
	poll.EventuallyTrue(t, 20*time.Second, "v1 applied", func() bool { return rec.last() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cli.Delete(ctx, layout.Root(), clientv3PrefixOpt()); err != nil {
		t.Fatal(err)
	}
	// The status keeps what is applied and no longer names the pointer.
	poll.EventuallyTrue(t, 20*time.Second, "the deleted pointer noticed", func() bool { return w.Status().PointerVersion == 0 })
	if st := w.Status(); st.AppliedVersion != 1 || st.PointerLineage != "" || st.Ahead || st.RejectedVersion != 0 {
		t.Fatalf("after the delete: applied v%d, pointer lineage %q, ahead %v, rejected v%d; want v1, \"\", false, none",
			st.AppliedVersion, st.PointerLineage, st.Ahead, st.RejectedVersion)
	}
	publish(t, cli, testSnapshot(2))
	waitApplied(t, w, rec, 2, 20*time.Second, "v2 applied after the prefix was wiped")
	if got := rec.versions(); !equal(got, []uint64{1, 2}) || w.Status().AppliedVersion != 2 {
		t.Fatalf("applied %v", got)
	}
}

// I5 for semantic errors: a snapshot that decodes but breaks a rule of
// api/validate (a row not summing to its denominator) is never applied.
func TestRejectsSemanticallyInvalid(t *testing.T) {
	_, cli := etcdtest.New(t)
	rec := newRecorder()
	publish(t, cli, testSnapshot(1))
	w := start(t, Config{Client: cli, Apply: rec.apply})
	poll.EventuallyTrue(t, 20*time.Second, "v1 applied", func() bool { return rec.last() == 1 })
	s := testSnapshot(2)
	c := s.Clusters["demo-main"]
	c.Row = snapshot.Row{Denominator: 100, Weights: map[string]int{"SC1": 50, "SC2": 45, config.Blackhole: 10}}
	s.Clusters["demo-main"] = c
	s.Meta.Hash = snapshot.ContentHash(s)
	publish(t, cli, s)
	poll.EventuallyTrue(t, 20*time.Second, "v2 rejected", func() bool { return w.Status().RejectedVersion == 2 })
	if st := w.Status(); !strings.Contains(st.RejectedReason, "invalid snapshot") || !strings.Contains(st.RejectedReason, "105") || st.AppliedVersion != 1 {
		t.Fatalf("status = %+v; want v2 rejected naming the sum 105", st)
	}
	if got := rec.versions(); !equal(got, []uint64{1}) {
		t.Fatalf("Apply got %v, want [1]", got)
	}
}

package configwatch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

// syncBuffer is a log sink safe for the watcher's goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Within a lineage nothing older is applied and a moved-back pointer is
// reported as Ahead; a pointer of another lineage is applied whatever its
// version, logged once at warn level and counted.
func TestLineageChangeAppliedAndMovedBackPointerAhead(t *testing.T) {
	_, cli := etcdtest.New(t)
	var logs syncBuffer
	reg := prometheus.NewRegistry()
	rec := newRecorder()
	w := start(t, Config{Client: cli, Apply: rec.apply, Metrics: reg,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	l1 := lineageSnapshot("L1", 5)
	publish(t, cli, l1)
	poll.EventuallyTrue(t, 10*time.Second, "L1 v5 applied", func() bool { return rec.last() == 5 })
	publish(t, cli, lineageSnapshot("L1", 6))
	poll.EventuallyTrue(t, 10*time.Second, "L1 v6 applied", func() bool { return rec.last() == 6 })

	// The pointer is moved back within L1: refused, reported ahead.
	movePointer(t, cli, l1)
	poll.EventuallyTrue(t, 10*time.Second, "ahead of the moved-back pointer", func() bool { return w.Status().Ahead })
	st := w.Status()
	if st.AppliedLineage != "L1" || st.AppliedVersion != 6 || st.PointerLineage != "L1" || st.PointerVersion != 5 {
		t.Fatalf("after the pointer moved back: %+v", st)
	}
	// The same pointer again (a resync) is not logged twice.
	movePointer(t, cli, lineageSnapshot("L1", 6))
	poll.EventuallyTrue(t, 10*time.Second, "not ahead at v6", func() bool { return !w.Status().Ahead })
	movePointer(t, cli, l1)
	poll.EventuallyTrue(t, 10*time.Second, "ahead again", func() bool { return w.Status().Ahead })

	// A new lineage: its v1 is applied, although 1 < 6.
	publish(t, cli, lineageSnapshot("L2", 1))
	poll.EventuallyTrue(t, 10*time.Second, "L2 v1 applied", func() bool { return w.Status().AppliedLineage == "L2" })
	st = w.Status()
	if st.AppliedVersion != 1 || st.Ahead || st.LineageChanges != 1 || st.PreviousLineage != "L1" || st.LatestVersion != 1 {
		t.Fatalf("after the lineage change: %+v", st)
	}
	if got := rec.versions(); !equal(got, []uint64{5, 6, 1}) {
		t.Fatalf("applied %v, want [5 6 1]", got)
	}
	// The counter follows the recorded apply: wait for it, then count exactly.
	poll.EventuallyTrue(t, 10*time.Second, "the lineage change counted", func() bool { return testutil.ToFloat64(w.m.lineageChanges) >= 1 })
	if n := testutil.ToFloat64(w.m.lineageChanges); n != 1 {
		t.Fatalf("sluice_proxy_lineage_changes_total = %v, want 1", n)
	}
	if n, err := testutil.GatherAndCount(reg, "sluice_proxy_lineage_changes_total"); err != nil || n != 1 {
		t.Fatalf("metric not registered: %d %v", n, err)
	}
	// Within L2, I1 holds again.
	publish(t, cli, lineageSnapshot("L2", 2))
	poll.EventuallyTrue(t, 10*time.Second, "L2 v2", func() bool { return rec.last() == 2 })
	movePointer(t, cli, lineageSnapshot("L2", 1))
	poll.EventuallyTrue(t, 10*time.Second, "ahead in L2", func() bool { return w.Status().Ahead })
	if rec.last() != 2 {
		t.Fatalf("applied %v", rec.versions())
	}

	out := logs.String()
	if n := strings.Count(out, "following a new snapshot lineage"); n != 1 {
		t.Errorf("lineage change logged %d times, want once:\n%s", n, out)
	}
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "from_lineage=L1 from_version=6 to_lineage=L2 to_version=1") {
		t.Errorf("lineage change log lacks both ids:\n%s", out)
	}
	if n := strings.Count(out, "pointer_version=5 applied_version=6"); n != 2 {
		t.Errorf("moved-back pointer logged %d times, want 2 (once per move):\n%s", n, out)
	}
}

// A disk cache written before lineages (unknown lineage) holds v18; a fresh
// etcd publishes v1 of a lineage: the proxy follows etcd (the second
// `make run` on one work dir). With no lineage on either side, I1 holds
// as before.
func TestOldCacheYieldsToNewLineage(t *testing.T) {
	for _, tc := range []struct {
		name, lineage string
		want          uint64
	}{
		{"new lineage", "20261201T090312Z-3fa9c2d1", 1},
		{"unknown lineage on both sides", "", 18},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, cli := etcdtest.New(t)
			dir := t.TempDir()
			cache := openCache(t, dir)
			if err := cache.Save(testSnapshot(18)); err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(cache.Path())
			if err != nil || bytes.Contains(raw, []byte(`"lineage"`)) {
				t.Fatalf("cache file has a lineage field or is unreadable: %v", err)
			}
			publish(t, cli, lineageSnapshot(tc.lineage, 1))
			rec := newRecorder()
			w := start(t, Config{Client: cli, Apply: rec.apply, Cache: openCache(t, dir)})
			poll.EventuallyTrue(t, 10*time.Second, "pointer seen", func() bool { return w.Status().PointerVersion == 1 })
			waitApplied(t, w, rec, tc.want, 10*time.Second, "settled")
			st := w.Status()
			if st.AppliedVersion != tc.want || st.AppliedLineage != map[uint64]string{1: tc.lineage, 18: ""}[tc.want] {
				t.Fatalf("status %+v", st)
			}
			if tc.want == 18 && !st.Ahead {
				t.Fatalf("v18 over a v1 pointer of the same lineage is not reported ahead: %+v", st)
			}
			if tc.want == 1 && (st.LineageChanges != 1 || st.PreviousLineage != "") {
				t.Fatalf("status %+v", st)
			}
		})
	}
}

// A pointer and its manifest must agree on the lineage.
func TestManifestOfAnotherLineageRejected(t *testing.T) {
	_, cli := etcdtest.New(t)
	rec := newRecorder()
	w := start(t, Config{Client: cli, Apply: rec.apply})
	s := lineageSnapshot("L1", 1)
	m, parts, err := snapshot.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	publishPtr(t, cli, snapshot.Pointer{Lineage: "L2", Version: 1, Hash: s.Meta.Hash}, mustJSON(t, m), parts)
	poll.EventuallyTrue(t, 10*time.Second, "rejected", func() bool { return w.Status().RejectedVersion == 1 })
	want := "manifest /sluicetest/snapshots/BFE1/00000000000000000001 is BFE1 v1 (lineage L1) hash " + s.Meta.Hash +
		"; pointer says BFE1 v1 (lineage L2) hash " + s.Meta.Hash
	if got := w.Status().RejectedReason; got != want {
		t.Fatalf("reason %q\nwant %q", got, want)
	}
	if len(rec.versions()) != 0 {
		t.Fatal("applied")
	}
}

// etcd is wiped under a running watcher (a fresh store on the same
// address, far below the revision the watch waits for): the watcher notices
// and follows the new lineage within 10 s.
func TestWipedEtcdUnderRunningWatcher(t *testing.T) {
	dir := t.TempDir()
	srv, err := etcdtest.Start(etcdtest.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	cli := newClient(t, srv.Endpoints...)
	rec := newRecorder()
	putLineage(t, cli, "L1")
	publish(t, cli, lineageSnapshot("L1", 1))
	w := start(t, Config{Client: cli, Apply: rec.apply})
	poll.EventuallyTrue(t, 10*time.Second, "L1 v1 applied", func() bool { return rec.last() == 1 })
	for v := uint64(2); v <= 20; v++ { // a revision the fresh store is far from
		publish(t, cli, lineageSnapshot("L1", v))
	}
	poll.EventuallyTrue(t, 10*time.Second, "L1 v20 applied", func() bool { return rec.last() == 20 })

	srv.Stop()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	fresh, err := etcdtest.Start(etcdtest.Options{Dir: dir, ClientPort: port(t, srv.Endpoints[0]), PeerPort: port(t, srv.Etcd.Config().ListenPeerUrls[0].String())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fresh.Stop)
	fcli := newClient(t, fresh.Endpoints...)
	wiped := time.Now()
	// The new scheduler mints L2 and publishes at once, then the store
	// quickly passes the old revision (agents, statuses): a watch resumed
	// from the old revision never sees that pointer write, and the revision
	// no longer looks like it went back. Only the lineage key tells.
	putLineage(t, fcli, "L2")
	publish(t, fcli, lineageSnapshot("L2", 1))
	for i := range 60 {
		if _, err := fcli.Put(context.Background(), fmt.Sprintf("/sluicetest/status/BFE1/x%d", i), "{}"); err != nil {
			t.Fatal(err)
		}
	}
	poll.EventuallyTrue(t, 10*time.Second, "L2 v1 applied after the wipe", func() bool { return w.Status().AppliedLineage == "L2" })
	t.Logf("new lineage applied %v after the wipe", time.Since(wiped).Round(10*time.Millisecond))
	if st := w.Status(); st.AppliedVersion != 1 || st.WatchRestarts[ReasonStoreReplaced] < 1 || !st.Connected {
		t.Fatalf("status %+v", st)
	}
	publish(t, fcli, lineageSnapshot("L2", 2))
	poll.EventuallyTrue(t, 10*time.Second, "L2 v2 applied", func() bool { return rec.last() == 2 })
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// port is the port of a URL such as http://127.0.0.1:2379.
func port(t *testing.T, u string) int {
	t.Helper()
	_, p, ok := strings.Cut(strings.TrimPrefix(u, "http://"), ":")
	n, err := strconv.Atoi(p)
	if !ok || err != nil {
		t.Fatalf("no port in %q", u)
	}
	return n
}

// putLineage writes the lineage record as the scheduler mints it.
func putLineage(t *testing.T, cli *clientv3.Client, id string) {
	t.Helper()
	b := mustJSON(t, snapshot.LineageRecord{ID: id, CreatedAt: time.Now().UTC()})
	if _, err := cli.Put(context.Background(), layout.Lineage(), string(b)); err != nil {
		t.Fatal(err)
	}
}

// A pointer that is gone — deleted, or absent from a store listed again
// (wiped) — is not reported as still naming a version, nor the proxy as
// ahead of it; the applied snapshot stays (I3).
func TestPointerGoneIsNotReported(t *testing.T) {
	srv, cli := etcdtest.New(t)
	rec := newRecorder()
	putLineage(t, cli, "L1")
	v1 := lineageSnapshot("L1", 1)
	publish(t, cli, v1)
	publish(t, cli, lineageSnapshot("L1", 2))
	w := start(t, Config{Client: cli, Apply: rec.apply, StoreCheckInterval: 100 * time.Millisecond})
	waitApplied(t, w, rec, 2, 20*time.Second, "L1 v2 applied")
	movePointer(t, cli, v1)
	poll.EventuallyTrue(t, 20*time.Second, "ahead of the moved-back pointer", func() bool {
		st := w.Status()
		return st.Ahead && st.PointerVersion == 1
	})
	ck, _ := layout.Current(pc)
	if _, err := cli.Delete(context.Background(), ck); err != nil {
		t.Fatal(err)
	}
	poll.EventuallyTrue(t, 20*time.Second, "the deleted pointer noticed", func() bool { return w.Status().PointerVersion == 0 })
	if st := w.Status(); st.AppliedVersion != 2 || st.PointerLineage != "" || st.Ahead {
		t.Fatalf("after the delete: applied v%d, pointer lineage %q, ahead %v; want v2, \"\", false", st.AppliedVersion, st.PointerLineage, st.Ahead)
	}
	movePointer(t, cli, v1)
	poll.EventuallyTrue(t, 20*time.Second, "the pointer back", func() bool { st := w.Status(); return st.Ahead && st.PointerVersion == 1 })
	if err := srv.Wipe(); err != nil {
		t.Fatal(err)
	}
	poll.EventuallyTrue(t, 20*time.Second, "the empty store listed", func() bool {
		st := w.Status()
		return st.WatchRestarts[ReasonStoreReplaced] >= 1 && st.PointerVersion == 0 && st.Connected
	})
	if st := w.Status(); st.AppliedVersion != 2 || st.AppliedLineage != "L1" || st.PointerLineage != "" || st.Ahead {
		t.Fatalf("after the wipe: applied %s v%d, pointer lineage %q, ahead %v; want L1 v2, \"\", false", st.AppliedLineage, st.AppliedVersion, st.PointerLineage, st.Ahead)
	}
	if got := rec.versions(); !equal(got, []uint64{2}) {
		t.Fatalf("applied %v, want [2]", got)
	}
}

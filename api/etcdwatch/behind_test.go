package etcdwatch

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

// stuckSink blocks its first Apply until let is called.
type stuckSink struct {
	*recSink
	once, letOnce sync.Once
	entered       chan struct{}
	release       chan struct{}
}

func newStuckSink() *stuckSink {
	return &stuckSink{recSink: newRecSink(false), entered: make(chan struct{}), release: make(chan struct{})}
}

// let releases the blocked Apply (once; also at cleanup, so that a failed
// test does not leave Run blocked).
func (s *stuckSink) let() { s.letOnce.Do(func() { close(s.release) }) }

func (s *stuckSink) Apply(evs []*clientv3.Event, rev int64) error {
	s.once.Do(func() {
		close(s.entered)
		<-s.release
	})
	return s.recSink.Apply(evs, rev)
}

// wait receives from ch, or fails the test after 10 s.
func wait[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("not within 10s: %s", what)
	}
}

// A watch response made before a newer read of the same store arrives
// after it (the store check raised the revision seen while the loop was
// busy applying): its revision went back, but a quorum read shows the same
// store. Not store_replaced: the watch goes on, counted as behind, and
// nothing is relisted. The same rule covers a lagging member's answers
// (TestJudge): what the loop sees is the same header revision below the one
// seen.
func TestOlderResponseOfTheSameStoreIsNotAReplacement(t *testing.T) {
	srv, cli := etcdtest.New(t)
	var reads etcdtest.Reads
	wcli := reads.Client(t, srv)
	const lk = "/b/lineage"
	putLineage(t, cli, lk, "L1")
	s := newStuckSink()
	var rs restarts
	var behindN atomic.Int32
	run(t, Config{Client: wcli, Key: "/b/in/", Prefix: true, LineageKey: lk, StoreCheckInterval: 20 * time.Millisecond,
		StallTimeout: time.Minute, Logger: quiet, OnRestart: rs.on, OnBehind: func() { behindN.Add(1) }}, s)
	t.Cleanup(s.let) // before run's cleanup, which waits for Run
	wait(t, s.listed, "listed")
	put(t, cli, "/b/in/a", "1")
	wait(t, s.entered, "applying /b/in/a") // the loop is busy applying it
	older := put(t, cli, "/b/in/b", "1")
	newer := put(t, cli, "/b/elsewhere", "1")
	// Two store checks at or past newer: the first one's raise is done.
	poll.EventuallyTrue(t, 10*time.Second, "store checked past the queued response", func() bool { return reads.AtLeast(newer) >= 2 })
	s.let()
	poll.EventuallyTrue(t, 10*time.Second, "the queued response applied", func() bool {
		keys, _ := s.snapshot()
		return keys["/b/in/b"] == "1"
	})
	if n := behindN.Load(); n != 1 {
		t.Errorf("%d responses counted behind, want 1 (revision %d answered after %d was seen)", n, older, newer)
	}
	if n := rs.total(); n != 0 {
		t.Errorf("%d restarts: %v", n, rs.n)
	}
	if _, resets := s.snapshot(); resets != 1 {
		t.Errorf("%d listings, want 1", resets)
	}
	// And a wipe is still a wipe.
	if err := srv.Wipe(); err != nil {
		t.Fatal(err)
	}
	putLineage(t, cli, lk, "L2")
	poll.EventuallyTrue(t, 30*time.Second, "store_replaced after the wipe", func() bool { return rs.count(ReasonStoreReplaced) >= 1 })
}

// The same queued response, but the confirming read fails: nothing is
// known, so the response is not applied as if it were the listed store's,
// and it is not store_replaced either: the round ends (sync_error) and the
// next listing has it.
func TestOlderResponseUnconfirmedIsListedAgain(t *testing.T) {
	srv, cli := etcdtest.New(t)
	var reads etcdtest.Reads
	wcli := reads.Client(t, srv)
	const lk = "/u/lineage"
	putLineage(t, cli, lk, "L1")
	s := newStuckSink()
	var rs restarts
	var behindN atomic.Int32
	run(t, Config{Client: wcli, Key: "/u/in/", Prefix: true, LineageKey: lk, StoreCheckInterval: 20 * time.Millisecond,
		StallTimeout: time.Minute, Logger: quiet, OnRestart: rs.on, OnBehind: func() { behindN.Add(1) }}, s)
	t.Cleanup(s.let) // before run's cleanup, which waits for Run
	wait(t, s.listed, "listed")
	put(t, cli, "/u/in/a", "1")
	wait(t, s.entered, "applying /u/in/a")
	put(t, cli, "/u/in/b", "1")
	newer := put(t, cli, "/u/elsewhere", "1")
	poll.EventuallyTrue(t, 10*time.Second, "store checked past the queued response", func() bool { return reads.AtLeast(newer) >= 2 })
	reads.SetFailing(true) // Gets fail from now on; the listing (a Txn) still works
	s.let()
	poll.EventuallyTrue(t, 10*time.Second, "listed again with the queued write", func() bool {
		keys, resets := s.snapshot()
		return resets == 2 && keys["/u/in/b"] == "1"
	})
	if n := rs.count(ReasonSyncError); n != 1 || rs.total() != 1 {
		t.Errorf("restarts %v, want one sync_error", rs.n)
	}
	if n := behindN.Load(); n != 0 {
		t.Errorf("%d responses counted behind, want 0 (unconfirmed)", n)
	}
}

package etcdwatch

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// recSink records what Run delivers; its first Reset blocks until gate is
// closed, so a test can change etcd between the listing and the watch.
type recSink struct {
	mu     sync.Mutex
	keys   map[string]string
	resets int
	gate   chan struct{}
	listed chan int64
	heardN atomic.Int32
}

func newRecSink(gated bool) *recSink {
	s := &recSink{gate: make(chan struct{}), listed: make(chan int64, 1)}
	if !gated {
		close(s.gate)
	}
	return s
}

func (s *recSink) Reset(kvs []*mvccpb.KeyValue, rev int64) error {
	s.mu.Lock()
	s.resets++
	first := s.resets == 1
	s.keys = map[string]string{}
	for _, kv := range kvs {
		s.keys[string(kv.Key)] = string(kv.Value)
	}
	s.mu.Unlock()
	if first {
		s.listed <- rev
		<-s.gate
	}
	return nil
}

func (s *recSink) Apply(evs []*clientv3.Event, rev int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range evs {
		if ev.Type == clientv3.EventTypeDelete {
			delete(s.keys, string(ev.Kv.Key))
		} else {
			s.keys[string(ev.Kv.Key)] = string(ev.Kv.Value)
		}
	}
	return nil
}

func (s *recSink) Heard(int64) { s.heardN.Add(1) }

func (s *recSink) snapshot() (map[string]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for k, v := range s.keys {
		out[k] = v
	}
	return out, s.resets
}

// restarts counts OnRestart calls by reason.
type restarts struct {
	mu sync.Mutex
	n  map[Reason]int
}

func (r *restarts) on(reason Reason, _ bool, _ error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[Reason]int{}
	}
	r.n[reason]++
}

func (r *restarts) count(reason Reason) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[reason]
}

func (r *restarts) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := 0
	for _, n := range r.n {
		t += n
	}
	return t
}

func put(t *testing.T, cli *clientv3.Client, k, v string) int64 {
	t.Helper()
	r, err := cli.Put(context.Background(), k, v)
	if err != nil {
		t.Fatal(err)
	}
	return r.Header.Revision
}

// run starts Run and stops it at cleanup.
func run(t *testing.T, cfg Config, s Sink) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, s) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func TestRunRejectsBadConfig(t *testing.T) {
	if err := Run(context.Background(), Config{Key: "/p/"}, newRecSink(false)); err == nil || err.Error() != "etcdwatch: Client is nil" {
		t.Fatalf("err = %v", err)
	}
	_, cli := etcdtest.New(t)
	if err := Run(context.Background(), Config{Client: cli}, newRecSink(false)); err == nil || err.Error() != "etcdwatch: Key is empty" {
		t.Fatalf("err = %v", err)
	}
}

func TestResyncAfterCompaction(t *testing.T) {
	_, cli := etcdtest.New(t)
	s := newRecSink(true)
	var rs restarts
	run(t, Config{Client: cli, Key: "/p/", Prefix: true, StallTimeout: time.Minute, Logger: quiet, OnRestart: rs.on}, s)
	put(t, cli, "/p/a", "1")
	<-s.listed
	// While the loop sits between its listing and its watch, history moves
	// on and is compacted: the watch from listing+1 must fail and relist.
	put(t, cli, "/p/a", "2")
	put(t, cli, "/p/b", "1")
	r, err := cli.Delete(context.Background(), "/p/a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(context.Background(), r.Header.Revision); err != nil {
		t.Fatal(err)
	}
	close(s.gate)
	poll.EventuallyTrue(t, 10*time.Second, "relisted after compaction", func() bool {
		keys, resets := s.snapshot()
		return resets >= 2 && len(keys) == 1 && keys["/p/b"] == "1"
	})
	if n := rs.count(ReasonCompacted); n != 1 {
		t.Fatalf("%d compaction restarts, want 1 (all: %v)", n, rs.n)
	}
	// And it keeps watching afterwards.
	put(t, cli, "/p/c", "1")
	poll.EventuallyTrue(t, 10*time.Second, "event after resync", func() bool { keys, _ := s.snapshot(); return keys["/p/c"] == "1" })
}

// Nothing is skipped: every write after the listing's revision arrives,
// also those made before the watch was opened.
func TestNoWriteSkippedBetweenListAndWatch(t *testing.T) {
	_, cli := etcdtest.New(t)
	s := newRecSink(true)
	run(t, Config{Client: cli, Key: "/k", Logger: quiet}, s)
	<-s.listed
	put(t, cli, "/k", "between")
	close(s.gate)
	poll.EventuallyTrue(t, 10*time.Second, "write between list and watch delivered", func() bool {
		keys, _ := s.snapshot()
		return keys["/k"] == "between"
	})
	if _, resets := s.snapshot(); resets != 1 {
		t.Fatalf("%d listings, want 1", resets)
	}
}

// A quiet but healthy watch answers the progress request and is not
// restarted as stalled.
func TestQuietWatchIsNotAStall(t *testing.T) {
	_, cli := etcdtest.New(t)
	s := newRecSink(false)
	var rs restarts
	// 500ms, progress asked every 167ms: right after the write below only
	// etcd's answer to a progress request tells the watch is healthy, and a
	// loaded machine may take longer than a 150ms stall timeout for it.
	run(t, Config{Client: cli, Key: "/q/", Prefix: true, StallTimeout: 500 * time.Millisecond, Logger: quiet, OnRestart: rs.on}, s)
	poll.EventuallyTrue(t, 10*time.Second, "five confirmations of a quiet store", func() bool { return s.heardN.Load() >= 5 })
	// Writes elsewhere move the store's revision: now etcd answers the
	// progress requests, and the watch still counts as healthy.
	put(t, cli, "/other", "1")
	n := s.heardN.Load()
	poll.EventuallyTrue(t, 10*time.Second, "five progress notifications", func() bool { return s.heardN.Load() >= n+5 })
	if n := rs.total(); n != 0 {
		t.Fatalf("%d restarts of a healthy quiet watch: %v", n, rs.n)
	}
}

func putLineage(t *testing.T, cli *clientv3.Client, key, id string) {
	t.Helper()
	b, err := json.Marshal(snapshot.LineageRecord{ID: id, CreatedAt: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	put(t, cli, key, string(b))
}

// etcd wiped under a running watch and refilled past the listed revision:
// the lineage record tells, the prefix is listed again from the new store.
func TestWipedStoreIsRelisted(t *testing.T) {
	srv, cli := etcdtest.New(t)
	const lk = "/t/lineage"
	putLineage(t, cli, lk, "L1")
	for i := range 20 { // a revision the fresh store is far from
		put(t, cli, "/t/in/old", string(rune('a'+i)))
	}
	s := newRecSink(false)
	var rs restarts
	run(t, Config{Client: cli, Key: "/t/in/", Prefix: true, LineageKey: lk, StoreCheckInterval: 100 * time.Millisecond, Logger: quiet, OnRestart: rs.on}, s)
	poll.EventuallyTrue(t, 10*time.Second, "listed", func() bool { keys, _ := s.snapshot(); return keys["/t/in/old"] == "t" })

	if err := srv.Wipe(); err != nil {
		t.Fatal(err)
	}
	putLineage(t, cli, lk, "L2")
	for i := range 40 { // past the old revision: only the lineage tells
		put(t, cli, "/t/elsewhere", string(rune('a'+i)))
	}
	put(t, cli, "/t/in/new", "1")
	poll.EventuallyTrue(t, 10*time.Second, "relisted from the fresh store", func() bool {
		keys, _ := s.snapshot()
		return len(keys) == 1 && keys["/t/in/new"] == "1"
	})
	if rs.count(ReasonStoreReplaced) < 1 {
		t.Fatalf("no store_replaced restart: %v", rs.n)
	}
}

// Without a lineage key, a wiped store is told by its revision going back.
func TestWipedStoreRevisionBackwards(t *testing.T) {
	srv, cli := etcdtest.New(t)
	for i := range 20 {
		put(t, cli, "/r/old", string(rune('a'+i)))
	}
	s := newRecSink(false)
	var rs restarts
	run(t, Config{Client: cli, Key: "/r/", Prefix: true, StoreCheckInterval: 100 * time.Millisecond, Logger: quiet, OnRestart: rs.on}, s)
	poll.EventuallyTrue(t, 10*time.Second, "listed", func() bool { keys, _ := s.snapshot(); return keys["/r/old"] == "t" })
	if err := srv.Wipe(); err != nil {
		t.Fatal(err)
	}
	put(t, cli, "/r/new", "1")
	poll.EventuallyTrue(t, 10*time.Second, "relisted from the fresh store", func() bool {
		keys, _ := s.snapshot()
		return len(keys) == 1 && keys["/r/new"] == "1"
	})
	if rs.count(ReasonStoreReplaced) < 1 {
		t.Fatalf("no store_replaced restart: %v", rs.n)
	}
}

func TestStoreIdentity(t *testing.T) {
	id := newStore(7, 10, "")
	if err := id.replacedBy(7); err != nil {
		t.Fatalf("same store: %v", err)
	}
	if err := id.replacedBy(0); err != nil {
		t.Fatalf("no cluster id in header: %v", err)
	}
	if err := id.replacedBy(8); err == nil || err.Error() != "etcd answered with cluster id 8, the listing with 7: another store (wiped, replaced or restored)" {
		t.Fatalf("another cluster id: %v", err)
	}
	if err := id.lineageGone(""); err != nil {
		t.Fatalf("no lineage known yet: %v", err)
	}
	id.learnLineage("L1")
	id.learnLineage("L2") // the first one learnt stays
	if err := id.lineageGone("L1"); err != nil {
		t.Fatal(err)
	}
	if err := id.lineageGone(""); err == nil || err.Error() != "lineage record changed from L1 to unknown: another store (wiped, replaced or restored)" {
		t.Fatalf("lineage gone: %v", err)
	}
}

package inventory

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

// recSink records what watchLoop delivers; its first reset blocks until
// released, so the test can compact etcd past the listing's revision.
type recSink struct {
	mu     sync.Mutex
	keys   map[string]string
	resets int
	gate   chan struct{}
	listed chan int64
	heardN atomic.Int32
}

func (s *recSink) reset(kvs []*mvccpb.KeyValue, rev int64) {
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
}

func (s *recSink) apply(evs []*clientv3.Event, rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range evs {
		if ev.Type == clientv3.EventTypeDelete {
			delete(s.keys, string(ev.Kv.Key))
		} else {
			s.keys[string(ev.Kv.Key)] = string(ev.Kv.Value)
		}
	}
}

func (s *recSink) heard(int64) { s.heardN.Add(1) }

func (s *recSink) snapshot() (map[string]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for k, v := range s.keys {
		out[k] = v
	}
	return out, s.resets
}

func TestWatchResyncsAfterCompaction(t *testing.T) {
	_, cli := etcdtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	s := &recSink{gate: make(chan struct{}), listed: make(chan int64, 1)}
	var resyncs atomic.Int32
	done := make(chan struct{})
	go func() {
		watchLoop(ctx, cli, "/p/", s, time.Minute, slog.New(slog.NewTextHandler(io.Discard, nil)), func() { resyncs.Add(1) })
		close(done)
	}()
	defer func() { cancel(); <-done }()
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
	if resyncs.Load() < 1 {
		t.Fatal("resync not counted")
	}
	// And it keeps watching afterwards.
	put(t, cli, "/p/c", "1")
	poll.EventuallyTrue(t, 10*time.Second, "event after resync", func() bool { keys, _ := s.snapshot(); return keys["/p/c"] == "1" })
}

// A quiet but healthy watch answers the progress request and is not
// restarted as stalled.
func TestQuietWatchIsNotAStall(t *testing.T) {
	_, cli := etcdtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	s := &recSink{gate: make(chan struct{}), listed: make(chan int64, 1)}
	close(s.gate)
	var resyncs atomic.Int32
	done := make(chan struct{})
	go func() {
		watchLoop(ctx, cli, "/q/", s, 100*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)), func() { resyncs.Add(1) })
		close(done)
	}()
	defer func() { cancel(); <-done }()
	poll.EventuallyTrue(t, 10*time.Second, "five confirmations of a quiet store", func() bool { return s.heardN.Load() >= 5 })
	// Writes elsewhere move the store's revision: now etcd answers the
	// progress requests, and the watch still counts as healthy.
	put(t, cli, "/other", "1")
	n := s.heardN.Load()
	poll.EventuallyTrue(t, 10*time.Second, "five progress notifications", func() bool { return s.heardN.Load() >= n+5 })
	if n := resyncs.Load(); n != 0 {
		t.Fatalf("%d resyncs of a healthy quiet watch", n)
	}
}

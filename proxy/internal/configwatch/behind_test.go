package configwatch

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/validate"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

// A pointer event queued while the watcher was busy applying, answered
// after the store check read a newer revision: its revision went back, but
// it is the same store. It is applied and counted in WatchBehind, not a
// store_replaced restart (api/etcdwatch judge).
func TestQueuedPointerBehindANewerReadIsApplied(t *testing.T) {
	srv, cli := etcdtest.New(t)
	var reads etcdtest.Reads
	wcli := reads.Client(t, srv)
	putLineage(t, cli, "L1")
	publish(t, cli, lineageSnapshot("L1", 1))
	rec := newRecorder()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	apply := func(c validate.Checked) error {
		if c.Snapshot().Meta.Version == 2 {
			once.Do(func() {
				close(entered)
				<-release
			})
		}
		return rec.apply(c)
	}
	w := start(t, Config{Client: wcli, Apply: apply, StoreCheckInterval: 20 * time.Millisecond, StallTimeout: time.Minute})
	var letOnce sync.Once
	let := func() { letOnce.Do(func() { close(release) }) }
	t.Cleanup(let) // before start's cleanup, which waits for Run
	waitApplied(t, w, rec, 1, 10*time.Second, "v1 applied")
	publish(t, cli, lineageSnapshot("L1", 2))
	select { // the watcher is busy applying v2
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("v2 not being applied within 10s")
	}
	publish(t, cli, lineageSnapshot("L1", 3))
	r, err := cli.Put(context.Background(), "/elsewhere", "1")
	if err != nil {
		t.Fatal(err)
	}
	// Two store checks at or past the later write: the first one's raise is done.
	poll.EventuallyTrue(t, 10*time.Second, "store checked past v3's pointer", func() bool { return reads.AtLeast(r.Header.Revision) >= 2 })
	let()
	waitApplied(t, w, rec, 3, 10*time.Second, "v3 applied")
	st := w.Status()
	if st.WatchBehind != 1 || len(st.WatchRestarts) != 0 {
		t.Fatalf("%d responses behind, restarts %v; want 1 and none", st.WatchBehind, st.WatchRestarts)
	}
	if v := rec.versions(); !equal(v, []uint64{1, 2, 3}) {
		t.Fatalf("applied %v, want [1 2 3]", v)
	}
}

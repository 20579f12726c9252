// Package memrelease returns the Go heap's free memory to the OS once the
// proxy is quiet (issue 23).
//
// lbproxy collects at --gc-percent 400: the heap may grow to 5x the live
// heap before a collection, which saves CPU per request, and the runtime's
// scavenger keeps up to about that much mapped (it returns only what exceeds
// ~1.1x the heap goal). After a burst of accepts or TLS handshakes the
// garbage of the burst then stays resident as free heap for as long as the
// proxy is idle: with 10 000 idle TLS connections, 13.7 KiB per connection,
// more than the connections themselves hold.
//
// Every interval the releaser reads the runtime's counters (runtime/metrics,
// no stop-the-world) and calls debug.FreeOSMemory (one collection, then
// every free page returned) when both hold:
//
//   - the free heap not yet returned is at least MinFree, and
//   - the heap allocated less than a sixteenth of it during the last
//     interval: the proxy is quiet, so what is returned would not be faulted
//     back in soon.
//
// After a release the free heap is near zero and grows again only when a
// collection frees memory, so releases are never more frequent than the
// runtime's own collections, and a busy proxy (which allocates) never
// releases.
package memrelease

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Stats are the two runtime counters a decision reads.
type Stats struct {
	Free   uint64 // heap memory free and not yet returned to the OS
	Allocs uint64 // bytes allocated on the heap since the process started
}

// Releaser decides when to return free heap memory.
type Releaser struct {
	MinFree uint64       // release only at least this much
	Read    func() Stats // the runtime's counters (ReadRuntime)
	Release func()       // returns the free heap (debug.FreeOSMemory)

	last    Stats
	started bool
}

// New is a releaser of the runtime's own free heap.
func New(minFree uint64) *Releaser {
	return &Releaser{MinFree: minFree, Read: ReadRuntime, Release: debug.FreeOSMemory}
}

// Tick reads the counters and releases when the proxy has been quiet since
// the previous Tick with enough free heap; it reports whether it released.
// The first Tick only takes the counters.
func (r *Releaser) Tick() bool {
	s := r.Read()
	prev, started := r.last, r.started
	r.last, r.started = s, true
	if !started || s.Free < r.MinFree || s.Allocs-prev.Allocs >= s.Free/16 {
		return false
	}
	r.Release()
	r.last = r.Read() // the release's own collection is not activity
	return true
}

// Run ticks every interval until ctx is done.
func (r *Releaser) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	r.Tick()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Tick()
		}
	}
}

var names = []string{"/memory/classes/heap/free:bytes", "/gc/heap/allocs:bytes"}

// ReadRuntime reads Stats from runtime/metrics.
func ReadRuntime() Stats {
	s := make([]metrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	metrics.Read(s)
	var out Stats
	if s[0].Value.Kind() == metrics.KindUint64 {
		out.Free = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		out.Allocs = s[1].Value.Uint64()
	}
	return out
}

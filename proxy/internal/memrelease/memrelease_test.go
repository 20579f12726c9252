package memrelease

import (
	"context"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fake is a runtime whose counters the test sets; release empties the free
// heap and allocates (as debug.FreeOSMemory's collection does).
type fake struct {
	s        Stats
	releases int
}

func (f *fake) releaser(minFree uint64) *Releaser {
	return &Releaser{MinFree: minFree, Read: func() Stats { return f.s }, Release: func() {
		f.releases++
		f.s.Free = 0
		f.s.Allocs += 4 << 20 // the collection's own allocations (more than 1/16 of 32 MiB)
	}}
}

func TestTick(t *testing.T) {
	const min = 16 << 20
	cases := []struct {
		name    string
		free    uint64 // at the second Tick
		alloc   uint64 // allocated between the two Ticks
		release bool
	}{
		{"quiet with enough free heap", 64 << 20, 0, true},
		{"exactly the minimum", min, 0, true},
		{"below the minimum", min - 1, 0, false},
		{"allocating just under a sixteenth of the free heap", 64 << 20, 4<<20 - 1, true},
		{"allocating a sixteenth of the free heap: busy", 64 << 20, 4 << 20, false},
		{"allocating more: busy", 64 << 20, 512 << 20, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fake{s: Stats{Free: c.free, Allocs: 100 << 20}}
			r := f.releaser(min)
			if r.Tick() || f.releases != 0 {
				t.Fatalf("first Tick released (it only takes the counters)")
			}
			f.s.Allocs += c.alloc
			if got := r.Tick(); got != c.release || f.releases != map[bool]int{false: 0, true: 1}[c.release] {
				t.Fatalf("Tick = %v with %d releases, want %v", got, f.releases, c.release)
			}
		})
	}
}

// The release's own allocations are not activity: a quiet proxy whose free
// heap grows again (a later collection) releases again, and one that
// allocates in between does not.
func TestTickAfterRelease(t *testing.T) {
	f := &fake{s: Stats{Free: 64 << 20, Allocs: 100 << 20}}
	r := f.releaser(16 << 20)
	r.Tick()
	if !r.Tick() {
		t.Fatal("quiet, 64 MiB free: no release")
	}
	f.s.Free = 32 << 20 // a collection freed more
	if !r.Tick() {
		t.Fatal("quiet, 32 MiB free again: no release (the release's allocations counted as activity?)")
	}
	if r.Tick() {
		t.Fatal("released again with no free heap")
	}
	f.s.Free = 32 << 20
	f.s.Allocs += 8 << 20
	if r.Tick() || f.releases != 2 {
		t.Fatalf("released while allocating 8 MiB per tick against 32 MiB free (%d releases)", f.releases)
	}
}

var keep [][]byte

// The real runtime: garbage freed by a collection is free heap not returned;
// a quiet Tick returns it (debug.FreeOSMemory).
func TestReleasesTheRuntimesFreeHeap(t *testing.T) {
	// 64 MiB kept live keeps the heap goal above what is mapped, so the
	// background scavenger leaves the 64 MiB of garbage alone.
	keep = make([][]byte, 0, 128)
	for range 64 {
		keep = append(keep, make([]byte, 1<<20))
	}
	for range 64 {
		keep = append(keep, make([]byte, 1<<20))
	}
	clear(keep[64:])
	keep = keep[:64]
	runtime.GC()
	defer func() { keep = nil }()
	before := ReadRuntime()
	if before.Free < 32<<20 {
		t.Fatalf("%d bytes of free heap after dropping 64 MiB, want at least 32 MiB", before.Free)
	}
	r := New(16 << 20)
	r.Tick()
	if !r.Tick() {
		t.Fatalf("no release with %d bytes free and the test quiet (now %+v)", before.Free, ReadRuntime())
	}
	if after := ReadRuntime(); after.Free >= 16<<20 {
		t.Fatalf("%d bytes still free after the release, want under 16 MiB (before: %d)", after.Free, before.Free)
	}
}

func TestRunEndsWithItsContext(t *testing.T) {
	f := &fake{s: Stats{Free: 64 << 20}}
	r := f.releaser(16 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx, time.Millisecond); close(done) }()
	cancel()
	<-done // goleak checks nothing else is left
}

package probe

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// In a synctest bubble: the fourth Acquire's 50ms timeout passes on the fake clock.
func TestLimiterBoundsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(3)
		if l.Max() != 3 {
			t.Fatalf("Max = %d, want 3", l.Max())
		}
		var rel []func()
		for range 3 {
			r, err := l.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			rel = append(rel, r)
		}
		if l.InFlight() != 3 {
			t.Fatalf("InFlight = %d, want 3", l.InFlight())
		}
		// A fourth waits until ctx ends: the bound holds.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, err := l.Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("4th Acquire with 3 slots taken: err %v, want deadline exceeded", err)
		}
		if waited := time.Since(start); waited != 50*time.Millisecond {
			t.Fatalf("4th Acquire returned after %s, want its ctx's 50ms", waited)
		}
		rel[0]()
		rel[0]() // releasing twice gives back one slot only
		if l.InFlight() != 2 {
			t.Fatalf("InFlight after one release = %d, want 2", l.InFlight())
		}
		r, err := l.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		r()
		rel[1]()
		rel[2]()
		if l.InFlight() != 0 || l.Peak() != 3 {
			t.Fatalf("InFlight %d Peak %d, want 0 and 3", l.InFlight(), l.Peak())
		}
	})
}

// In a synctest bubble the fake clock moves only once all 500 goroutines
// are blocked — DefaultMaxInFlight holding a slot, the rest waiting for one —
// so the peak is exactly the bound, not just at most it.
func TestLimiterConcurrentPeakIsMax(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(0)
		if l.Max() != DefaultMaxInFlight {
			t.Fatalf("Max = %d, want %d", l.Max(), DefaultMaxInFlight)
		}
		var wg sync.WaitGroup
		for range 500 {
			wg.Go(func() {
				r, err := l.Acquire(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Millisecond) // holds the slot as a probe would
				r()
			})
		}
		wg.Wait()
		if p := l.Peak(); p != DefaultMaxInFlight {
			t.Fatalf("Peak = %d, want %d", p, DefaultMaxInFlight)
		}
		if l.InFlight() != 0 {
			t.Fatalf("InFlight = %d after all released, want 0", l.InFlight())
		}
	})
}

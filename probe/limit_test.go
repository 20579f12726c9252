package probe

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestLimiterBoundsInFlight(t *testing.T) {
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
	if _, err := l.Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("4th Acquire with 3 slots taken: err %v, want deadline exceeded", err)
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
}

func TestLimiterConcurrentPeakNeverAboveMax(t *testing.T) {
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
	if p := l.Peak(); p > DefaultMaxInFlight || p < 1 {
		t.Fatalf("Peak = %d, want 1..%d", p, DefaultMaxInFlight)
	}
	if l.InFlight() != 0 {
		t.Fatalf("InFlight = %d after all released, want 0", l.InFlight())
	}
}

package poll

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// recorder is a testing.TB that records Fatalf instead of stopping.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		r := &recorder{TB: t}
		calls := 0
		Eventually(r, 5*time.Second, "third call", func() error {
			calls++
			if calls < 3 {
				return fmt.Errorf("call %d", calls)
			}
			return nil
		})
		if r.failed != "" || calls != 3 {
			t.Fatalf("failed=%q calls=%d; want no failure after exactly 3 calls", r.failed, calls)
		}
		if took := time.Since(start); took != 2*Interval {
			t.Fatalf("held at the third call after %s, want %s (two intervals)", took, 2*Interval)
		}
	})
}

// In a synctest bubble the intervals and the deadline are exact: checks at
// 0, 10, …, 50 ms fail, the one at 60 ms finds the deadline passed.
func TestEventuallyFailsWithWhatAndTheLastError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{TB: t}
		start := time.Now()
		calls := 0
		Eventually(r, 50*time.Millisecond, "the key to appear", func() error {
			calls++
			return errors.New("key /k absent")
		})
		if took := time.Since(start); took != 60*time.Millisecond {
			t.Fatalf("gave up after %s, want 60ms (the first check after the 50ms deadline)", took)
		}
		want := "not within 50ms: the key to appear: key /k absent"
		if r.failed != want {
			t.Fatalf("failure %q, want %q", r.failed, want)
		}
		if calls != 7 {
			t.Fatalf("cond called %d times; want 7 (every %s from 0 to 60ms)", calls, Interval)
		}
	})
}

func TestEventuallyTrue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{TB: t}
		n := 0
		EventuallyTrue(r, 5*time.Second, "n reaches 2", func() bool { n++; return n == 2 })
		if r.failed != "" || n != 2 {
			t.Fatalf("failed=%q n=%d", r.failed, n)
		}
		start := time.Now()
		EventuallyTrue(r, 20*time.Millisecond, "never", func() bool { return false })
		if !strings.HasPrefix(r.failed, "not within 20ms: never") {
			t.Fatalf("failure %q", r.failed)
		}
		if took := time.Since(start); took != 30*time.Millisecond {
			t.Fatalf("gave up after %s, want 30ms (the first check after the 20ms deadline)", took)
		}
	})
}

func TestEveryReturnsTheTimeTaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{TB: t}
		calls := 0
		took := Every(r, 5*time.Second, 20*time.Millisecond, "third call", func() error {
			calls++
			if calls < 3 {
				return fmt.Errorf("call %d", calls)
			}
			return nil
		})
		if r.failed != "" || calls != 3 || took != 40*time.Millisecond {
			t.Fatalf("failed=%q calls=%d took=%s; want no failure after 3 calls, two 20ms intervals apart (40ms)", r.failed, calls, took)
		}
	})
}

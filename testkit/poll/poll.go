// Package poll waits in tests for state that arrives asynchronously: it
// checks a condition at a short interval until it holds or a deadline
// passes, then fails the test naming what was awaited and, for error
// conditions, the last reason it did not hold. Tests poll instead of
// sleeping for a guessed time; the interval is not a wait for state.
package poll

import (
	"testing"
	"time"
)

// Interval is the pause between two checks of a condition.
const Interval = 10 * time.Millisecond

// Eventually checks cond until it returns nil. If it has not by the time
// within has passed, Eventually fails t (Fatalf) with what and cond's last
// error. cond runs on the calling goroutine, so it may itself call t.Fatal.
func Eventually(t testing.TB, within time.Duration, what string, cond func() error) {
	t.Helper()
	Every(t, within, Interval, what, cond)
}

// Every is Eventually with its own interval between checks, for conditions
// that cost a request to a real fleet (e2e, chaos), and it returns how long
// cond took to hold, for scenarios that report a recovery time.
func Every(t testing.TB, within, every time.Duration, what string, cond func() error) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	for {
		err := cond()
		if err == nil {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s: %v", within, what, err)
			return time.Since(start)
		}
		time.Sleep(every) // polling interval, not a wait for state
	}
}

// EventuallyTrue is Eventually for a condition that has no reason to give:
// it checks cond until it returns true and fails t with what after within.
func EventuallyTrue(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
			return
		}
		time.Sleep(Interval) // polling interval, not a wait for state
	}
}

package report

import (
	"testing"
	"time"
)

// WatchLagAt adds the time since the status was written to the lag it
// reported; a status with no time says only what it reported.
func TestWatchLagAt(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		s    ProxyStatus
		now  time.Time
		want float64
	}{
		{"written 90 s ago", ProxyStatus{WatchLagSeconds: 2.5, UpdatedAt: t0}, t0.Add(90 * time.Second), 92.5},
		{"written just now", ProxyStatus{WatchLagSeconds: 2.5, UpdatedAt: t0}, t0, 2.5},
		{"written in the future (clock skew)", ProxyStatus{WatchLagSeconds: 2.5, UpdatedAt: t0.Add(time.Minute)}, t0, 2.5},
		{"no time", ProxyStatus{WatchLagSeconds: 2.5}, t0, 2.5},
	} {
		if got := c.s.WatchLagAt(c.now); got != c.want {
			t.Errorf("%s: WatchLagAt = %v, want %v", c.name, got, c.want)
		}
	}
}

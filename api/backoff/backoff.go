// Package backoff is the one retry delay of Sluice's control-plane loops:
// exponential from Min to Max, jittered into [d/2, d) so that a fleet of
// processes that lost etcd together does not come back in step.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Defaults of Policy.
const (
	DefaultMin = 100 * time.Millisecond
	DefaultMax = 5 * time.Second
)

// Delay is the wait before the attempt-th consecutive retry (attempt 0 is
// the first): min doubled attempt times, capped at max, then jittered into
// [d/2, d) by u in [0,1).
func Delay(attempt int, u float64, minD, maxD time.Duration) time.Duration {
	d := minD
	for i := 0; i < attempt && d < maxD; i++ {
		d *= 2
	}
	d = min(d, maxD)
	return d/2 + time.Duration(u*float64(d/2))
}

// Policy counts consecutive failures and hands out their delays. The zero
// value uses DefaultMin, DefaultMax and a random seed. A Policy is not safe
// for concurrent use: each loop owns its own.
type Policy struct {
	Min, Max time.Duration
	// Rand draws the jitter; nil means a randomly seeded source.
	Rand    *rand.Rand
	attempt int
}

// Next returns the delay before the next retry and counts the attempt.
func (p *Policy) Next() time.Duration {
	if p.Min <= 0 {
		p.Min = DefaultMin
	}
	if p.Max <= 0 {
		p.Max = DefaultMax
	}
	if p.Rand == nil {
		p.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	d := Delay(p.attempt, p.Rand.Float64(), p.Min, p.Max)
	p.attempt++
	return d
}

// Reset starts counting from scratch (after a success).
func (p *Policy) Reset() { p.attempt = 0 }

// Sleep waits d or until ctx is done; it reports whether the whole d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

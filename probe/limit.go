package probe

import (
	"context"
	"sync/atomic"
)

// DefaultMaxInFlight is the default bound on probes in flight per process:
// enough to probe thousands of instances every few seconds, few enough that
// probes of unreachable instances (each holding its slot until its timeout)
// cannot starve the process of sockets and CPU, or the healthy instances of
// their probes.
const DefaultMaxInFlight = 64

// Limiter bounds the number of probes in flight. A probe takes a slot with
// Acquire before its timeout starts (time spent waiting for a slot is not
// time the target had to answer) and gives it back with the returned
// release. Safe for concurrent use.
type Limiter struct {
	slots    chan struct{}
	inFlight atomic.Int64
	peak     atomic.Int64
}

// NewLimiter returns a limiter of max slots (DefaultMaxInFlight when max ≤ 0).
func NewLimiter(max int) *Limiter {
	if max <= 0 {
		max = DefaultMaxInFlight
	}
	return &Limiter{slots: make(chan struct{}, max)}
}

// Acquire waits for a slot or for ctx to end (then it returns ctx's error).
func (l *Limiter) Acquire(ctx context.Context) (release func(), err error) {
	select {
	case l.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	n := l.inFlight.Add(1)
	for {
		p := l.peak.Load()
		if n <= p || l.peak.CompareAndSwap(p, n) {
			break
		}
	}
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			l.inFlight.Add(-1)
			<-l.slots
		}
	}, nil
}

// Max is the number of slots.
func (l *Limiter) Max() int { return cap(l.slots) }

// InFlight is the number of probes holding a slot now.
func (l *Limiter) InFlight() int { return int(l.inFlight.Load()) }

// Peak is the highest InFlight seen since the limiter was made.
func (l *Limiter) Peak() int { return int(l.peak.Load()) }

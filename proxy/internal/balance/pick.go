package balance

import (
	"net/http"
	"time"
)

// FailureKind classifies an attempt's outcome for passive health.
type FailureKind int

const (
	// KindNone: the backend answered (Status is its status). With a non-nil
	// Err and KindNone the attempt is neutral (e.g. the client went away).
	KindNone FailureKind = iota
	// KindConnect: dialing or writing the request failed.
	KindConnect
	// KindTimeout: the backend did not answer in time.
	KindTimeout
	// KindStatus: the backend answered Status; it counts as a failure when
	// policy.health.outlier_status matches it.
	KindStatus
	// KindLocalLimit: the proxy's own connection cap was reached — back-pressure,
	// never a backend failure.
	KindLocalLimit
)

// Result is what happened to one attempt.
type Result struct {
	Err     error
	Kind    FailureKind
	Status  int
	Latency time.Duration
}

// Pick is one attempt's target. It must be reported exactly once with Done.
// It is returned by value and has at most four fields on purpose: the Go
// compiler keeps such a struct in registers, where a larger one is copied
// through memory on every return (measured: a third of the pick's cost).
type Pick struct {
	ep     *Endpoint
	g      *group
	cookie *http.Cookie // non-nil when a sticky cookie must be (re)issued
	meta   pickMeta
}

// pickMeta packs the attempt number (bits 0-31), the reason (32-39), the
// cross-retry (40) and retry-token (41) flags and the stripe (48-63).
type pickMeta uint64

func newMeta(attempt int, why reason, cross bool, stripe uint32) pickMeta {
	m := pickMeta(uint32(attempt)) | pickMeta(why)<<32 | pickMeta(uint16(stripe))<<48
	if cross {
		m |= 1 << 40
	}
	return m
}

const metaRetryToken pickMeta = 1 << 41

// reason says how a pick was made.
type reason uint8

const (
	reasonHash reason = iota
	reasonRequest
	reasonRandom
	reasonFallback
	reasonCookie
	reasonRetry
	reasonCross
)

var reasonNames = [...]string{"hash", "request", "random", "fallback", "cookie", "retry", "cross-retry"}

// Endpoint is the chosen backend.
func (p Pick) Endpoint() *Endpoint { return p.ep }

// SetCookie is the sticky cookie to (re)issue with the response, or nil.
// It is the instance's cookie, made once per table and shared by every
// pick of it: read it, do not modify it.
func (p Pick) SetCookie() *http.Cookie { return p.cookie }

// SubCluster is the chosen sub-cluster's name.
func (p Pick) SubCluster() string {
	if p.g == nil {
		return ""
	}
	return p.g.name
}

// Attempt is the attempt number (1-based).
func (p Pick) Attempt() int { return int(uint32(p.meta)) }

// Cross reports a cross-sub-cluster retry.
func (p Pick) Cross() bool { return p.meta&(1<<40) != 0 }

// Reason is "hash", "request", "random", "fallback" or "cookie" for the first
// attempt (how the sub-cluster was chosen), "retry" or "cross-retry" after.
func (p Pick) Reason() string { return reasonNames[reason(p.meta>>32)] }

// Algorithm is the instance algorithm used.
func (p Pick) Algorithm() string {
	if p.g == nil {
		return ""
	}
	return p.g.c.algoName
}

// Done reports the attempt's outcome: it updates in-flight, passive health,
// EWMA latency, effective weight and the retry budget. Call exactly once.
func (p Pick) Done(res Result) {
	e := p.ep
	if e == nil || p.g == nil {
		return
	}
	c := p.g.c
	r := c.reg
	if p.meta&metaRetryToken != 0 {
		r.retries.Add(-1)
	}
	failed := false
	switch res.Kind {
	case KindConnect, KindTimeout:
		failed = true
	case KindStatus:
		failed = c.hasOutlier && c.outlier.Match(res.Status)
	case KindLocalLimit:
	}
	if failed {
		if e.reportFailure(r.now()) {
			r.log.Info("balance: passive failure changed state", "addr", e.addr.String(), "state", e.Health().String())
			r.bump()
		}
	}
	k := uint32(p.meta>>48) & (inflightCells - 1)
	cl := &e.load[k]
	if !failed && res.Kind != KindLocalLimit && (res.Err == nil || res.Kind == KindStatus) {
		if e.reportSuccess(cl, r) {
			r.bump()
		}
	}
	if c.latency && res.Kind != KindLocalLimit {
		e.observeLatency(res.Latency)
	}
	if e.release(cl) {
		e.noteRelease(cl, k)
	}
	if cl.flags.Load()&cellReleased != 0 && e.InFlight() == 0 {
		r.maybeSweep(e)
	}
}

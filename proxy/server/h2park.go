package server

import (
	"errors"
	goruntime "runtime"
	"time"
)

// Parking idle HTTP/2 connections (issue 23 round 3).
//
// A connection's goroutine reads its frames through crypto/tls, whose Read
// path is deep: the goroutine's stack grows to 4 KiB at the first request
// and keeps that size (the runtime halves a stack only when less than a
// quarter of it, minus 800 bytes, is in use), and crypto/tls keeps its record
// buffer. An idle connection that waits in that read costs both.
//
// The server's park sweep (h2Server.sweep) ticks every ParkIdleAfter, as the
// fasthttp front's (idlepark.go). A connection with no open stream and no
// draining one since two ticks ago or more (idleSince, set by
// idleDeadlineLocked), whose goroutine waits for a frame header (kick is
// h2Waiting), is kicked: its read deadline moves into the past. Its read
// then fails with a timeout (crypto/tls keeps any part of a record it read:
// a timeout is not fatal to it). If nothing of a frame was read and crypto/tls
// holds no byte (releaseTLSBuffers lets go of its buffers then), the
// connection is parked: its read deadline goes back to the idle one, a
// fresh goroutine waits for the socket to become readable without a buffer
// (sockio's AwaitReadable, a shallow stack: the runtime's starting size, 2 KiB
// at most when the parked goroutines are the many) and goes on reading
// frames, and the old goroutine ends. Otherwise the read goes on under the
// restored deadline.
//
// A request costs nothing for the sweep but an atomic store and a
// compare-and-swap per frame header read; a connection parked costs, when
// its client comes back, a goroutine start and crypto/tls's record buffer
// allocated again. The idle timeout, a shutdown's GOAWAY (the deadline set to
// now) and Close (the socket closed) end a parked wait as they end a read.

// h2conn.kick:
const (
	h2Busy    int32 = iota // not waiting for a frame header
	h2Waiting              // reading a frame header: the sweep may kick
	h2Kicking              // the sweep is moving the read deadline
	h2Kicked               // the read deadline is in the past
)

// errParked ends h2conn.frames when the connection was parked.
var errParked = errors.New("http2: connection parked")

// sweep kicks the connections idle since two ticks ago or more, until
// stopSweep.
func (s *h2Server) sweep() {
	defer close(s.sweepDone)
	t := time.NewTicker(s.parkAfter)
	defer t.Stop()
	for {
		select {
		case <-s.sweepStop:
			return
		case <-t.C:
		}
		s.kickIdle(s.tick.Add(1))
	}
}

// kickIdle is the sweep's tick now: it kicks the connections idle since
// two ticks ago or more whose goroutine waits for a frame header.
func (s *h2Server) kickIdle(now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.kick.Load() != h2Waiting {
			continue // parked (or busy between two frames): not kicked, and c.mu not taken
		}
		c.mu.Lock()
		if c.rec != nil && c.idleSince > 0 && now-c.idleSince >= 2 && c.kick.CompareAndSwap(h2Waiting, h2Kicking) {
			_ = c.tc.SetReadDeadline(aLongTimeAgo)
			c.kick.Store(h2Kicked)
			s.kicks.Add(1)
		}
		c.mu.Unlock()
	}
}

// stopSweep stops the sweep and waits for it to end (at once if it never
// started: it will not).
func (s *h2Server) stopSweep() {
	s.stopOnce.Do(func() { close(s.sweepStop) })
	s.sweepOnce.Do(func() { close(s.sweepDone) })
	<-s.sweepDone
}

// kicked follows a frame header read the sweep kicked; err is the read's.
// It parks the connection (errParked) when the read timed out having read
// nothing of a frame and nothing is buffered; otherwise the read deadline
// is restored and err is what the read answers now (nil: read on).
func (c *h2conn) kicked(err error) error {
	for c.kick.Load() != h2Kicked {
		goruntime.Gosched() // the sweep is between its two steps
	}
	c.kick.Store(h2Busy)
	c.mu.Lock()
	_ = c.tc.SetReadDeadline(c.rdl)
	timeout := isTimeout(err)
	park := timeout && c.hdrN == 0 && len(c.streams) == 0 && len(c.drains) == 0 && !c.goAway && !c.dead &&
		releaseTLSBuffers(c.tc, 0) && !c.rec.pending()
	c.mu.Unlock()
	switch {
	case park:
		return errParked
	case timeout || err == nil:
		return nil // the kick's timeout, or bytes read: read on
	default:
		return c.readFailed(err)
	}
}

// parked waits, on a goroutine of its own, until the parked connection's
// socket is readable, then reads its frames.
func (c *h2conn) parked() {
	err := c.rec.wait.AwaitReadable()
	c.parkedNow.Store(false)
	if err != nil {
		c.end(c.readFailed(err))
		return
	}
	c.loop()
}

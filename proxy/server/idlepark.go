package server

import (
	"errors"
	"io"
	"net"
	goruntime "runtime"
	"time"

	"github.com/sluicelb/sluice/proxy/internal/sockio"

	"github.com/valyala/fasthttp"
)

// Parking idle keep-alive connections (issue 23).
//
// fasthttp keeps its read buffer (MaxHeaderBytes + 4 KiB), write buffer and
// RequestCtx for a connection's whole life when request bodies stream
// (StreamRequestBody: ReduceMemoryUsage cannot release the reader then), so
// an idle keep-alive client costs about 90 KiB of heap. The fasthttp front
// instead parks a connection that stays idle: when fasthttp, between two
// requests and with nothing buffered, has waited in addrConn.Read for the
// next one for ParkIdleAfter (the sweep below), that Read answers io.EOF,
// fasthttp ends its loop and returns every buffer to its pools, and a small
// goroutine waits for the socket to become readable (sockio.Conn.AwaitReadable:
// no buffer, under the idle timeout) before handing the connection back to
// fasthttp (Server.ServeConn). A parked connection costs that goroutine's
// stack and the socket.
//
// A connection that has served more than one request and whose next request
// comes sooner is not parked (after its first request, one is parked at
// once: Read). Parking at every answer (as before issue 20 round 4) cost each
// keep-alive request a fasthttp loop's end and start — its RequestCtx and
// buffers from and back to their pools, the idle-connection map entries, the
// state callbacks — and a MSG_PEEK: a few per cent of a request at most,
// inside this machine's noise (docs/BENCHMARKS.md, "TLS HTTP/1.1 CPU, issue
// 20 round 4").
//
// The sweep (FastFront.sweep) ticks every ParkIdleAfter. A Read waiting for
// the next request stores the tick it began at in addrConn.kick; the sweep
// kicks one that began two ticks ago or more (idle between ParkIdleAfter and
// twice that) by moving the socket's read deadline into the past: Read then
// fails with a timeout having read nothing, and answers io.EOF instead. The
// request costs one atomic store and one compare-and-swap; the sweep, a look
// at each connection per tick.
//
// Neither wait, in Read or parked, moves a timer per request: fasthttp's
// idle deadline is applied only if the header deadline left armed by the
// last request passes first (armIdle).
//
// The state of a connection (addrConn.park):
const (
	connServing int32 = iota // fasthttp serves it
	connParking              // Read answered io.EOF on the idle connection: fasthttp winds down
	connParked               // waiting for the next request, without buffers
	connClosed               // closed for good
)

// addrConn.kick: a positive value is the sweep tick at which Read began to
// wait for the next request; the sweep moves it to kickBusy, sets the
// deadline, then kickDone.
const (
	kickNone int64 = 0
	kickBusy int64 = -1 // the sweep is moving the read deadline
	kickDone int64 = -2 // the read deadline is in the past
)

// aLongTimeAgo is the read deadline that ends an idle Read at once.
var aLongTimeAgo = time.Unix(1, 0)

// Read waits for the next request in fasthttp's buffer like any Read; one
// that the sweep kicks while the connection is idle (parked, above) answers
// io.EOF instead. fasthttp reads while idle only with an empty buffer (a
// pipelined request already buffered is served without a read), so no byte
// is lost.
//
// A connection that ends before the first byte of its first request — a new
// one, or a parked one handed back to fasthttp, which takes it for a new
// one — reads io.EOF whatever the error (a reset, the read timeout):
// fasthttp then closes it without an answer, as it does a keep-alive
// connection that ends between two requests, and as the std front and nginx
// do; otherwise it answers and logs a generated 400 or 408 that no client
// asked for.
func (c *addrConn) Read(p []byte) (int, error) {
	if c.idleNext() {
		if c.served > 1 {
			return c.idleRead(p)
		}
		// After a connection's first request, at once: most clients that
		// open many connections (or one and leave it) do not come back within
		// ParkIdleAfter, and a burst of new ones would hold a buffer set each
		// (and a fasthttp worker goroutine) for that long.
		if c.park.CompareAndSwap(connServing, connParking) {
			return 0, io.EOF
		}
		// Closed meanwhile: the read below reports it (its deadline
		// does not matter).
	}
	n, err := c.Conn.Read(p)
	if !c.begun {
		if n > 0 {
			c.begun = true
		} else if err != nil {
			return 0, io.EOF
		}
	}
	return n, err
}

// idleNext reports whether c's next Read waits for the next request: it is
// idle between two requests with nothing buffered. That Read parks it
// (after its first request) or is an idleRead; fasthttp sets its idle
// deadline just before, which SetReadDeadline keeps for the wait
// (parkUntil, armIdle).
func (c *addrConn) idleNext() bool {
	return c.wait != nil && c.idle.Load() && c.park.Load() == connServing && !(c.buffers && buffered(c.wait))
}

// idleRead is Read between two requests, which the sweep may kick. It
// waits under the deadline armed (armIdle).
func (c *addrConn) idleRead(p []byte) (int, error) {
	if err := c.armIdle(); err != nil {
		return 0, err
	}
	armed := c.front.tick.Load()
	for {
		c.kick.Store(armed)
		if c.drain != nil {
			// The request's read left the socket empty: wait in the
			// poller first, instead of a read that finds nothing
			// (sockio.Conn.AwaitAfterDrain). The sweep's kick and the
			// deadlines end it as they end the Read below, which then
			// reads the request (or reports them).
			c.drain.AwaitAfterDrain()
		}
		n, err := c.Conn.Read(p)
		if !c.kick.CompareAndSwap(armed, kickNone) {
			return c.kicked(n, err)
		}
		if n > 0 || !c.idleLater(err) {
			return n, err
		}
		// The header deadline passed, not the idle one: wait on (from the
		// same tick: the sweep parks it as soon as it would have).
		if err := c.setReadDeadline(c.parkUntil); err != nil {
			return 0, err
		}
	}
}

// kicked ends an idleRead the sweep kicked: parked if it read nothing,
// else (the request, or another error, came first) under its deadline
// again.
func (c *addrConn) kicked(n int, err error) (int, error) {
	for c.kick.Load() != kickDone {
		goruntime.Gosched() // the sweep is between its two steps
	}
	c.kick.Store(kickNone)
	if n == 0 && isTimeout(err) && c.park.CompareAndSwap(connServing, connParking) {
		// The parked wait sets the idle deadline (armIdle); if that one
		// passed too, it ends at once and closes the connection.
		c.rdl = aLongTimeAgo
		return 0, io.EOF
	}
	_ = c.Conn.SetReadDeadline(c.rdl)
	return n, err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// sweep kicks the connections idle in Read since two ticks ago or more
// (idlepark's comment above); it ends when stop is closed.
func (f *FastFront) sweep(every time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := f.tick.Add(1)
		f.mu.Lock()
		for c := range f.conns {
			ac, ok := c.(*addrConn)
			if !ok {
				continue
			}
			if v := ac.kick.Load(); v > 0 && now-v >= 2 && ac.kick.CompareAndSwap(v, kickBusy) {
				_ = ac.Conn.SetReadDeadline(aLongTimeAgo)
				ac.kick.Store(kickDone)
			}
		}
		f.mu.Unlock()
	}
}

// Close closes the connection, except the one fasthttp lets go while it
// parks: that one stays open for the next request.
func (c *addrConn) Close() error {
	if c.park.Load() == connParking {
		return nil
	}
	c.park.Store(connClosed)
	return c.Conn.Close()
}

// parkState follows fasthttp's view of a connection; it reports whether the
// state is the end of a fasthttp loop for a parking connection (not a close
// to report).
func (f *FastFront) parkState(c *addrConn, st fasthttp.ConnState) (parked bool) {
	switch st {
	case fasthttp.StateIdle:
		c.idle.Store(true)
	case fasthttp.StateActive:
		c.idle.Store(false)
		c.served++
	case fasthttp.StateClosed:
		if c.park.CompareAndSwap(connParking, connParked) {
			if !c.looping {
				go f.parked(c) // ends when the connection closes (Shutdown and Close close parked ones)
			}
			return true
		}
	}
	return false
}

// parked waits for the next request of a parked connection and hands the
// connection back to fasthttp, as long as it parks again after each request.
func (f *FastFront) parked(c *addrConn) {
	c.looping = true
	for {
		err := f.closingErr()
		if err == nil {
			err = waitReadable(c)
		}
		if err == nil {
			err = f.enter()
		}
		if err != nil {
			c.park.Store(connClosed)
			_ = c.Conn.Close()
			f.connState(c, fasthttp.StateClosed)
			return
		}
		c.idle.Store(false)
		c.begun = false                                // fasthttp serves it as a new connection
		c.park.CompareAndSwap(connParked, connServing) // Close may have closed it meanwhile: fasthttp then reads an error
		_ = f.fs.ServeConn(c)
		f.leave()
		if c.park.Load() != connParked {
			return // closed: fasthttp reported it
		}
	}
}

// closingErr is net.ErrClosed once Shutdown or Close began.
func (f *FastFront) closingErr() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing {
		return net.ErrClosed
	}
	return nil
}

// enter counts a parked connection going back to fasthttp, unless the front
// is closing.
func (f *FastFront) enter() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing {
		return net.ErrClosed
	}
	f.serving++
	return nil
}

func (f *FastFront) leave() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.serving--
	if f.closing && f.serving == 0 {
		f.drainOnce.Do(func() { close(f.drained) })
	}
}

// beginClose closes Serve's listeners, stops parked connections from going
// back to fasthttp and closes the parked ones (their goroutines end).
func (f *FastFront) beginClose() {
	f.stopOnce.Do(func() { close(f.stop) })
	f.sweepOnce.Do(func() { close(f.swept) }) // no Serve yet: no sweep to wait for, and none starts
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closing = true
	for _, l := range f.lns {
		_ = l.Close() // fasthttp's Shutdown closes it too, if its Serve registered it already
	}
	if f.serving == 0 {
		f.drainOnce.Do(func() { close(f.drained) })
	}
	for c := range f.conns {
		if ac, ok := c.(*addrConn); ok && ac.park.Load() == connParked {
			_ = ac.Conn.Close()
		}
	}
}

// readableWaiter is a connection that can wait for its next byte without a
// buffer (sockio.Conn: TCP on Linux; tlsIdleConn); others are never parked.
type readableWaiter interface{ AwaitReadable() error }

// drainWaiter waits, reading nothing, for the next bytes after a read that
// left the socket empty (sockio.Conn.AwaitAfterDrain).
type drainWaiter interface{ AwaitAfterDrain() bool }

// drainWaiterOf is the plain TCP socket under c when nothing between reads
// ahead of fasthttp: c itself, or connlimit's wrapper over it (which
// reads straight through). Over TLS (crypto/tls keeps bytes read from the
// socket, so a wait on the socket could miss a request already read) and
// under any other wrapper it is nil: idleRead reads as before.
func drainWaiterOf(c net.Conn) drainWaiter {
	if lc, ok := c.(limitedConn); ok {
		c = lc.NetConn()
	}
	if sc, ok := c.(*sockio.Conn); ok {
		return sc
	}
	return nil
}

// limitedConn is connlimit's wrapper (*connlimit.Conn, or the one that
// also has AwaitReadable).
type limitedConn interface {
	NetConn() net.Conn
	Idle()
	Busy()
}

// bufferedConn holds bytes already read from its socket (a TLS connection's
// records, tlsidle.go).
type bufferedConn interface{ Buffered() bool }

// buffered reports whether w holds bytes already read from its socket: it
// is not parked then, fasthttp reads.
func buffered(w readableWaiter) bool {
	b, ok := w.(bufferedConn)
	return ok && b.Buffered()
}

// waitReadable waits until c has something to read (a byte, its end, an
// error) or the idle deadline passes (armIdle).
func waitReadable(c *addrConn) error {
	if err := c.armIdle(); err != nil {
		return err
	}
	for {
		err := c.wait.AwaitReadable()
		if err == nil || !c.idleLater(err) {
			return err
		}
		if err := c.setReadDeadline(c.parkUntil); err != nil {
			return err
		}
	}
}

// armIdle readies c's read deadline for the wait for the next request
// (idleRead, or the parked one: waitReadable). The deadline armed stays if
// it ends no later than fasthttp's idle one (addrConn.parkUntil, which
// SetReadDeadline does not apply); otherwise (none, a later one, the
// sweep's kick) the idle one is set. The wait moves to the idle one only if
// the one armed passes first (idleLater). On a busy keep-alive connection
// the deadline armed is the last request's header timeout
// (ReadHeaderTimeout, which fasthttp sets at each request and the next one
// moves only a little, deadline.Skip): a request and the wait after it arm
// no timer. Moving it to the idle deadline and back to the header timeout
// at the next request were two runtime timer updates per request.
func (c *addrConn) armIdle() error {
	keep := !c.rdl.IsZero() && !c.rdl.Equal(aLongTimeAgo) && (c.parkUntil.IsZero() || !c.rdl.After(c.parkUntil))
	if keep {
		return nil
	}
	return c.setReadDeadline(c.parkUntil)
}

// idleLater reports whether err is the deadline armed passing before the
// idle one: the wait goes on, until that.
func (c *addrConn) idleLater(err error) bool {
	return isTimeout(err) && c.rdl.Before(c.parkUntil)
}

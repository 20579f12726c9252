package server

import (
	"errors"
	"io"
	"net"
	"os"
	"time"

	"github.com/valyala/fasthttp"
)

// Parking idle keep-alive connections (issue 23).
//
// fasthttp keeps its read buffer (MaxHeaderBytes + 4 KiB), write buffer and
// RequestCtx for a connection's whole life when request bodies stream
// (StreamRequestBody: ReduceMemoryUsage cannot release the reader then), so
// an idle keep-alive client costs about 90 KiB of heap. The fasthttp front
// instead parks a connection that goes idle: when fasthttp, between two
// requests and with nothing buffered, reads the first byte of the next one,
// addrConn.Read answers io.EOF instead of blocking, fasthttp ends its loop and
// returns every buffer to its pools, and a small goroutine waits for the
// socket to become readable (sockio.Conn.AwaitReadable: no buffer, the idle
// timeout as deadline) before
// handing the connection back to fasthttp (Server.ServeConn). A parked
// connection costs that goroutine's stack and the socket.
//
// The state of a connection (addrConn.park):
const (
	connServing int32 = iota // fasthttp serves it
	connParking              // Read answered io.EOF on the idle connection: fasthttp winds down
	connParked               // waiting for the next request, without buffers
	connClosed               // closed for good
)

// Read parks an idle connection instead of waiting in fasthttp's buffers.
// fasthttp reads while idle only with an empty buffer (a pipelined request
// already buffered is served without a read), so no byte is lost.
//
// A connection that ends before the first byte of its first request — a new
// one, or a parked one handed back to fasthttp, which takes it for a new
// one — reads io.EOF whatever the error (a reset, the read timeout):
// fasthttp then closes it without an answer, as it does a keep-alive
// connection that ends between two requests, and as the std front and nginx
// do; otherwise it answers and logs a generated 400 or 408 that no client
// asked for.
func (c *addrConn) Read(p []byte) (int, error) {
	if c.willPark() {
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

// willPark reports whether c's next Read parks it: it is idle between two
// requests with nothing buffered. fasthttp sets the idle deadline just
// before that Read; SetReadDeadline leaves it to the parked wait.
func (c *addrConn) willPark() bool {
	return c.wait != nil && c.idle.Load() && c.park.Load() == connServing && !buffered(c.wait)
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
			err = waitReadable(c, f.idleTimeout())
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

func (f *FastFront) idleTimeout() time.Duration {
	if f.fs.IdleTimeout > 0 {
		return f.fs.IdleTimeout
	}
	return f.fs.ReadTimeout
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

// beginClose stops parked connections from going back to fasthttp and
// closes the parked ones (their goroutines end).
func (f *FastFront) beginClose() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closing = true
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

// buffered reports whether w holds bytes already read from its socket (a TLS
// connection's records, tlsidle.go): it is not parked then, fasthttp reads.
func buffered(w readableWaiter) bool {
	b, ok := w.(interface{ Buffered() bool })
	return ok && b.Buffered()
}

// waitReadable waits until c has something to read (a byte, its end, an
// error) or idle passes.
//
// A read deadline already armed that ends sooner than the idle one is left
// where it is, and the idle deadline set only if that one passes first: on
// a busy keep-alive connection it is the last request's header timeout
// (ReadHeaderTimeout, armed by fasthttp when it took the connection; the
// idle deadline fasthttp sets before the Read that parks is not applied,
// addrConn.SetReadDeadline), which the next request's own then moves only a
// little (deadline.Skip): a request and the wait after it arm no timer.
// Moving it to the idle deadline and back to the header timeout at the next
// request were two runtime timer updates per request.
func waitReadable(c *addrConn, idle time.Duration) error {
	if idle <= 0 {
		return c.wait.AwaitReadable()
	}
	end := time.Now().Add(idle)
	if c.rdl.IsZero() || c.rdl.After(end) {
		if err := c.SetReadDeadline(end); err != nil {
			return err
		}
	}
	for {
		err := c.wait.AwaitReadable()
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) || !c.rdl.Before(end) {
			return err
		}
		// The earlier deadline passed: wait on until the idle one.
		if err := c.SetReadDeadline(end); err != nil {
			return err
		}
	}
}

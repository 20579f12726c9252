// Package sockio reads and writes TCP sockets without the runtime's
// system-call bookkeeping.
//
// Go's net package reads a non-blocking socket through syscall.Read, which
// tells the scheduler that a system call starts and ends (entersyscall /
// exitsyscall). A call made while every P was idle also wakes sysmon from
// its deep sleep, and sysmon then polls every 20 µs until the process is
// idle again: at a few thousand requests per second that is one futex wake
// and a few context switches per request on the proxy's core. A read or
// write of a non-blocking socket never blocks, so the bookkeeping buys
// nothing: Conn makes the same calls as raw system calls, inside
// syscall.RawConn's Read and Write, which keep the poller's readiness
// waits, deadlines and the fd's reference counting (a concurrent Close is
// as safe as with net.TCPConn).
package sockio

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// Conn is a *net.TCPConn whose Read and Write make raw system calls. Every
// other method (deadlines, CloseWrite, addresses) is the TCPConn's.
type Conn struct {
	*net.TCPConn
	rc   syscall.RawConn
	r, w half

	awaitFn func(uintptr) bool // Conn.writeThenAwait, made once
	written bool               // WriteAwait: the write is done, the wait goes on

	peekFn    func(uintptr) // Conn.peek, made once
	pk        sync.Mutex    // one peek at a time uses the fields below
	peekN     int
	peekErrno syscall.Errno
	peekByte  byte

	awaitReadFn func(uintptr) bool // Conn.awaitRead, made on first use (await.go)
	woken       bool               // AwaitReadable: the poller woke it

	// drained: the last RawConn.Read was a Read whose last read system
	// call was short, so the socket held nothing more (AwaitAfterDrain,
	// drain.go). Every other RawConn.Read clears it.
	drained    atomic.Bool
	pollWaitFn func(uintptr) // Conn.pollWait, made on first use (drain.go)
}

// half is the state of one direction's call, kept in the Conn so the
// RawConn callback is a method value made once, not a closure per call.
type half struct {
	mu    sync.Mutex // one call at a time uses the fields below
	p     []byte
	n     int
	errno syscall.Errno
	fn    func(uintptr) bool // Conn.read or Conn.write
}

// Wrap returns c as a *Conn when it is a TCP connection and raw system
// calls are available here, else c itself.
func Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok || !supported {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	sc := &Conn{TCPConn: tc, rc: rc}
	sc.r.fn = sc.read
	sc.w.fn = sc.write
	sc.awaitFn = sc.writeThenAwait
	sc.peekFn = sc.peek
	return sc
}

// Read reads like net.TCPConn.Read: io.EOF once the peer closed its side,
// timeouts as net.Error values with Timeout() true.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, err := c.call(&c.r, p, "read")
	if err == nil && n == 0 {
		return 0, io.EOF
	}
	return n, err
}

// Write writes all of p, waiting for socket buffer space as needed, like
// net.TCPConn.Write.
func (c *Conn) Write(p []byte) (int, error) { return c.call(&c.w, p, "write") }

// call runs h's callback on p through RawConn.Read or RawConn.Write.
func (c *Conn) call(h *half, p []byte, op string) (int, error) {
	h.mu.Lock()
	h.p = p
	var err error
	if h == &c.w {
		err = c.rc.Write(h.fn)
	} else {
		c.drained.Store(false) // set again by a short read
		err = c.rc.Read(h.fn)
	}
	n, errno := h.n, h.errno
	h.p, h.n, h.errno = nil, 0, 0
	h.mu.Unlock()
	if err != nil || errno != 0 {
		return n, c.fail(op, err, errno)
	}
	return n, nil
}

// WriteAwait writes all of p, like Write, and then waits until the socket
// is readable: for a request whose answer the caller reads next. The write
// is made inside RawConn.Read, after the poller's readiness was reset, so
// the answer cannot be missed, and the caller's first Read finds it instead
// of failing with EAGAIN first — one system call less per exchange. A wait
// that ends in a deadline or a close is left for that Read to report.
func (c *Conn) WriteAwait(p []byte) (int, error) {
	h := &c.w
	h.mu.Lock()
	h.p, c.written = p, false
	c.drained.Store(false) // a RawConn.Read: readiness is cleared
	_ = c.rc.Read(c.awaitFn)
	n, errno := h.n, h.errno
	h.p, h.n, h.errno = nil, 0, 0
	h.mu.Unlock()
	if errno != 0 {
		return n, c.fail("write", nil, errno)
	}
	if n < len(p) { // the socket buffer was full: wait for room as Write does
		m, err := c.Write(p[n:])
		return n + m, err
	}
	return n, nil
}

// writeThenAwait is WriteAwait's RawConn.Read callback: the first call
// writes, a later one (the socket is readable) ends the wait. Only a whole
// write is followed by a wait.
func (c *Conn) writeThenAwait(fd uintptr) bool {
	if c.written {
		return true
	}
	c.written = true
	c.w.n, c.w.errno = writeAll(fd, c.w.p)
	return c.w.errno != 0 || c.w.n < len(c.w.p)
}

// ErrUnsolicited is Idle's answer when bytes arrived on a connection that
// expected none: whatever the peer sent belongs to no request.
var ErrUnsolicited = errors.New("sockio: unsolicited bytes on an idle connection")

// Idle checks, without waiting, that an idle connection can carry a new
// request: nothing arrived on it since its last exchange. It returns io.EOF
// when the peer closed or half-closed it (a FIN is waiting), ErrUnsolicited
// when bytes are waiting, the socket's error (a reset) when one is pending,
// and nil otherwise. It is one non-blocking MSG_PEEK system call made
// through RawConn.Control, so an expired read deadline does not matter and
// nothing is consumed.
func (c *Conn) Idle() error {
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	return c.peekState()
}

// Gone is Idle for a connection whose reader may be waiting in Read at the
// same time (http.Transport keeps a read pending on every idle connection):
// the same non-blocking peek, without waiting for that Read. io.EOF (or
// the pending error) means the peer closed the connection, and no Read
// consumes the FIN before every later peek sees it too.
func (c *Conn) Gone() error { return c.peekState() }

func (c *Conn) peekState() error {
	c.pk.Lock()
	err := c.rc.Control(c.peekFn)
	n, errno := c.peekN, c.peekErrno
	c.pk.Unlock()
	switch {
	case err != nil:
		return err
	case errno == syscall.EAGAIN:
		return nil
	case errno != 0:
		return c.fail("read", nil, errno)
	case n == 0:
		return io.EOF
	default:
		return ErrUnsolicited
	}
}

// peek is Idle's RawConn.Control callback.
func (c *Conn) peek(fd uintptr) {
	for {
		n, errno := rawPeek(fd, &c.peekByte)
		if errno == syscall.EINTR {
			continue
		}
		c.peekN, c.peekErrno = n, errno
		return
	}
}

// read is the RawConn.Read callback: false asks the poller to wait.
func (c *Conn) read(fd uintptr) bool {
	for {
		n, errno := rawRead(fd, c.r.p)
		switch errno {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		c.r.n, c.r.errno = n, errno
		if errno == 0 && n > 0 && n < len(c.r.p) {
			c.drained.Store(true) // nothing left: AwaitAfterDrain may wait
		}
		return true
	}
}

// write is the RawConn.Write callback: false asks the poller to wait for
// buffer space.
func (c *Conn) write(fd uintptr) bool {
	n, errno := writeAll(fd, c.w.p[c.w.n:])
	c.w.n += n
	if errno != 0 {
		c.w.errno = errno
		return true
	}
	return c.w.n == len(c.w.p)
}

// writeAll writes p to the non-blocking socket fd until all of it is
// written, the socket buffer is full (n < len(p), errno 0) or a write fails.
func writeAll(fd uintptr, p []byte) (int, syscall.Errno) {
	n := 0
	for n < len(p) {
		k, errno := rawWrite(fd, p[n:])
		switch errno {
		case 0:
			n += k
		case syscall.EINTR:
		case syscall.EAGAIN:
			return n, 0
		default:
			return n, errno
		}
	}
	return n, 0
}

// fail is the error of a failed op: RawConn's err (a deadline, a closed
// connection) or the system call's errno, named the way net.TCPConn names
// it ("read", not RawConn's "raw-read"), keeping the cause (and so
// Timeout()).
func (c *Conn) fail(op string, err error, errno syscall.Errno) error {
	if err == nil {
		err = os.NewSyscallError(op, errno)
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		e := *oe
		e.Op = op
		return &e
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// Listener wraps every accepted connection with Wrap.
type Listener struct{ net.Listener }

// Accept accepts the next connection, wrapped.
func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Wrap(c), nil
}

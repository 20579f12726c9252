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
	"syscall"
)

// Conn is a *net.TCPConn whose Read and Write make raw system calls. Every
// other method (deadlines, CloseWrite, addresses) is the TCPConn's.
type Conn struct {
	*net.TCPConn
	rc syscall.RawConn

	rmu    sync.Mutex // one Read at a time uses the fields below
	rp     []byte
	rn     int
	rerr   syscall.Errno
	readFn func(uintptr) bool // c.read, made once

	wmu     sync.Mutex // one Write at a time uses the fields below
	wp      []byte
	wn      int
	werr    syscall.Errno
	writeFn func(uintptr) bool // c.write, made once
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
	sc.readFn = sc.read
	sc.writeFn = sc.write
	return sc
}

// Read reads like net.TCPConn.Read: io.EOF once the peer closed its side,
// timeouts as net.Error values with Timeout() true.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	c.rp = p
	err := c.rc.Read(c.readFn)
	n, errno := c.rn, c.rerr
	c.rp, c.rn, c.rerr = nil, 0, 0
	c.rmu.Unlock()
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case errno != 0:
		return 0, c.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of p, waiting for socket buffer space as needed, like
// net.TCPConn.Write.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	c.wp = p
	err := c.rc.Write(c.writeFn)
	n, errno := c.wn, c.werr
	c.wp, c.wn, c.werr = nil, 0, 0
	c.wmu.Unlock()
	switch {
	case err != nil:
		return n, c.opError("write", err)
	case errno != 0:
		return n, c.opError("write", os.NewSyscallError("write", errno))
	}
	return n, nil
}

// read is the RawConn.Read callback: false asks the poller to wait.
func (c *Conn) read(fd uintptr) bool {
	for {
		n, errno := rawRead(fd, c.rp)
		switch errno {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		c.rn, c.rerr = n, errno
		return true
	}
}

// write is the RawConn.Write callback: false asks the poller to wait for
// buffer space.
func (c *Conn) write(fd uintptr) bool {
	n, errno := WriteAll(fd, c.wp[c.wn:])
	c.wn += n
	if errno != 0 {
		c.werr = errno
		return true
	}
	return c.wn == len(c.wp)
}

// WriteAll writes p to the non-blocking socket fd until all of it is
// written, the socket buffer is full (n < len(p), errno 0) or a write fails.
// It is meant for syscall.RawConn callbacks.
func WriteAll(fd uintptr, p []byte) (int, syscall.Errno) {
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

// opError names the operation the way net.TCPConn does ("read", not
// RawConn's "raw-read"), keeping the cause (and so Timeout()).
func (c *Conn) opError(op string, err error) error {
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

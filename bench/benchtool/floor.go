package main

// floor is the least a Go proxy does per request with a goroutine per
// connection on the runtime's poller: the floor under lbproxy's CPU per
// request in bench/run.sh (row "floor"). Each client connection gets its own
// backend connection at accept (a smooth weighted round robin of -backends),
// and its goroutine loops: read a request head (a GET: no body), write it
// to the backend as it came, read the answer (its head and a Content-Length
// body), write it to the client as it came. No routing, no header parsed or
// rewritten, no pool, no metrics, no timeouts. It is a measuring stick, not a
// proxy: anything but bodiless requests and Content-Length answers ends the
// connection.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"
)

func floor(args []string) error {
	addr, bs, err := floorFlags("floor", args)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return serveFloor(ctx, ln, bs)
}

// serveFloor relays ln's connections until ctx is done; it closes ln and
// returns once every connection ended.
func serveFloor(ctx context.Context, ln net.Listener, bs *weighted) error {
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		conns = map[net.Conn]struct{}{}
	)
	defer func() {
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("floor: %w", err)
		}
		mu.Lock()
		b := bs.next()
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			floorConn(c, b)
			mu.Lock()
			delete(conns, c)
			mu.Unlock()
		}()
	}
}

// floorConn relays c's requests to one connection to backend until either
// side ends or sends what floor does not handle. It makes lbproxy's system
// calls, no more, and as lbproxy makes them (rawIO): each write is made
// inside the raw read of the socket the answer will come back on
// (syscall.RawConn), so the runtime waits for that answer without a read
// failing with EAGAIN first (lbproxy's sockio).
func floorConn(c net.Conn, backend string) {
	defer c.Close()
	up, err := net.Dial("tcp", backend)
	if err != nil {
		return
	}
	defer up.Close()
	crc, err1 := c.(*net.TCPConn).SyscallConn()
	urc, err2 := up.(*net.TCPConn).SyscallConn()
	if err1 != nil || err2 != nil {
		return
	}
	in, out := make([]byte, 16<<10), make([]byte, 16<<10)
	var send []byte // the answer to write before waiting for the next request
	for {
		n, err := readWhole(crc, send, in, true)
		if err != nil {
			return
		}
		m, err := readWhole(urc, in[:n], out, false)
		if err != nil {
			return
		}
		send = out[:m]
	}
}

// readWhole writes send to rc's socket, then reads into buf until it holds
// one whole request or answer (whole): its length.
func readWhole(rc syscall.RawConn, send, buf []byte, request bool) (int, error) {
	n, err := writeThenRead(rc, send, buf, 0)
	for err == nil {
		var done bool
		if done, err = whole(buf[:n], len(buf), request); done {
			return n, nil
		}
		if err == nil {
			n, err = writeThenRead(rc, nil, buf, n)
		}
	}
	return 0, err
}

var errFull = errors.New("floor: a socket buffer is full")

// writeThenRead writes all of p to rc's socket, then reads once into
// buf[have:] (waiting for it to be readable): the new length of buf's data.
func writeThenRead(rc syscall.RawConn, p, buf []byte, have int) (int, error) {
	var n int
	var ioErr error
	err := rc.Read(func(fd uintptr) bool {
		for len(p) > 0 {
			w, err := rawIO(syscall.SYS_WRITE, int(fd), p)
			if err == syscall.EAGAIN {
				err = errFull // not for this stick: it never waits to write
			}
			if err != nil {
				ioErr = err
				return true
			}
			p = p[w:]
			if len(p) == 0 {
				return false // the answer is not there yet: wait for it
			}
		}
		r, err := rawIO(syscall.SYS_READ, int(fd), buf[have:])
		if err == syscall.EAGAIN {
			return false
		}
		switch {
		case err != nil:
			ioErr = err
		case r == 0:
			ioErr = io.EOF
		}
		n = have + r
		return true
	})
	if err != nil {
		return 0, err
	}
	return n, ioErr
}

// rawIO makes a read or write system call without telling the scheduler
// (syscall.RawSyscall): a non-blocking socket's call does not block, and
// the runtime's entersyscall and exitsyscall around it (syscall.Read and
// Write) would cost more than the call's own user-space part. lbproxy's
// sockio makes its calls so too.
func rawIO(trap uintptr, fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, e := syscall.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// errFraming: what a stick read is not one bodiless request or one
// Content-Length answer that fits its buffer.
var errFraming = errors.New("not one bodiless request or Content-Length answer that fits")

// whole reports whether b holds one whole request (a head: a GET has no
// body) or answer (a head and a Content-Length body) in a buffer of room
// bytes; not yet, or errFraming when it never will.
func whole(b []byte, room int, request bool) (bool, error) {
	end := bytes.Index(b, headEnd)
	if end < 0 {
		if len(b) == room {
			return false, errFraming
		}
		return false, nil
	}
	size := end + len(headEnd)
	if !request {
		body, ok := contentLength(b[:end+2])
		if !ok {
			return false, errFraming
		}
		size += body
	}
	if size > room || len(b) > size {
		return false, errFraming
	}
	return len(b) == size, nil
}

var headEnd = []byte("\r\n\r\n")

// contentLength is the Content-Length of a head (its fields, each ending
// "\r\n"), as the backends write it.
func contentLength(head []byte) (int, bool) {
	const cl = "\r\nContent-Length: "
	j := bytes.Index(head, []byte(cl))
	if j < 0 {
		return 0, false
	}
	v := head[j+len(cl):]
	v = v[:bytes.IndexByte(v, '\r')]
	n, err := strconv.Atoi(string(v))
	return n, err == nil && n >= 0
}

// floorFlags parses the flags of floor and evfloor (cmd): the listen
// address and the weighted backends.
func floorFlags(cmd string, args []string) (string, *weighted, error) {
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:9100", "listen address")
	list := fs.String("backends", "127.0.0.1:9101=5,127.0.0.1:9102=3,127.0.0.1:9103=1,127.0.0.1:9104=1", "backends, host:port=weight, comma-separated")
	fs.Parse(args)
	bs, err := parseWeighted(*list)
	if err != nil {
		return "", nil, fmt.Errorf("%s: -backends: %w", cmd, err)
	}
	return *addr, bs, nil
}

// weighted is a smooth weighted round robin over backends (nginx's).
type weighted struct {
	addrs           []string
	weight, current []int
	total           int
}

func parseWeighted(s string) (*weighted, error) {
	w := &weighted{}
	for _, f := range strings.Split(s, ",") {
		a, ws, ok := strings.Cut(f, "=")
		n := 1
		if ok {
			var err error
			if n, err = strconv.Atoi(ws); err != nil || n < 1 {
				return nil, fmt.Errorf("%q: want host:port=weight with a weight of at least 1", f)
			}
		}
		w.addrs = append(w.addrs, a)
		w.weight = append(w.weight, n)
		w.current = append(w.current, 0)
		w.total += n
	}
	return w, nil
}

func (w *weighted) next() string {
	best := 0
	for i := range w.addrs {
		w.current[i] += w.weight[i]
		if w.current[i] > w.current[best] {
			best = i
		}
	}
	w.current[best] -= w.total
	return w.addrs[best]
}

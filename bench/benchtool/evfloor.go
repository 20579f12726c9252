package main

// evfloor is floor's other model: one goroutine on its own thread running
// its own epoll loop over non-blocking sockets, as nginx's worker does, with
// no runtime poller and no goroutine switch per request (row "evfloor" in
// bench/run.sh). The same work otherwise: each client connection gets a
// backend connection at accept, bodiless requests and Content-Length answers
// are relayed as they came. A measuring stick like floor, Linux only.

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
)

// evConn is one side of a relayed pair: its socket, what it has read, and
// the other side.
type evConn struct {
	fd     int
	buf    []byte
	have   int
	peer   *evConn
	client bool
}

func evfloor(args []string) error {
	addr, bs, err := floorFlags("evfloor", args)
	if err != nil {
		return err
	}
	ln, err := evListen(addr)
	if err != nil {
		return fmt.Errorf("evfloor: %w", err)
	}
	defer syscall.Close(ln)
	// The loop blocks in epoll_wait: a signal ends it through a pipe it
	// watches too.
	var stop [2]int
	if err := syscall.Pipe2(stop[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
		return fmt.Errorf("evfloor: %w", err)
	}
	defer syscall.Close(stop[0])
	defer syscall.Close(stop[1])
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	var wg sync.WaitGroup
	defer wg.Wait() // before the pipe closes
	defer cancel()
	wg.Go(func() {
		<-ctx.Done()
		syscall.Write(stop[1], []byte{1})
	})
	return runEvfloor(ln, stop[0], bs)
}

// runEvfloor relays the connections of the listening socket ln on this
// goroutine's thread until stop is readable; it closes every connection it
// accepted before it returns.
func runEvfloor(ln, stop int, bs *weighted) error {
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("evfloor: %w", err)
	}
	defer syscall.Close(ep)
	for _, fd := range []int{ln, stop} {
		if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}); err != nil {
			return fmt.Errorf("evfloor: %w", err)
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	conns := map[int32]*evConn{}
	defer func() {
		for fd := range conns {
			syscall.Close(int(fd))
		}
	}()
	closePair := func(c *evConn) {
		for _, x := range []*evConn{c, c.peer} {
			if x != nil {
				delete(conns, int32(x.fd))
				syscall.Close(x.fd)
			}
		}
	}
	events := make([]syscall.EpollEvent, 128)
	for {
		n, err := syscall.EpollWait(ep, events, -1)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("evfloor: %w", err)
		}
		for _, ev := range events[:n] {
			switch int(ev.Fd) {
			case stop:
				return nil
			case ln:
				if err := evAccept(ep, ln, bs.next(), conns); err != nil {
					return fmt.Errorf("evfloor: %w", err)
				}
				continue
			}
			c := conns[ev.Fd]
			if c == nil {
				continue
			}
			if !evRelay(c) {
				closePair(c)
			}
		}
	}
}

// evRelay reads what c's socket has and, once it holds a whole request or
// answer, writes it to the other side. False: the pair ends.
func evRelay(c *evConn) bool {
	r, err := rawIO(syscall.SYS_READ, c.fd, c.buf[c.have:])
	if err == syscall.EAGAIN {
		return true
	}
	if err != nil || r == 0 {
		return false
	}
	c.have += r
	done, err := whole(c.buf[:c.have], len(c.buf), c.client)
	if err != nil {
		return false // not for this stick
	}
	if !done {
		return true // more to come
	}
	for p := c.buf[:c.have]; len(p) > 0; {
		w, err := rawIO(syscall.SYS_WRITE, c.peer.fd, p)
		if err != nil {
			return false // a full socket buffer too: not for this stick
		}
		p = p[w:]
	}
	c.have = 0
	return true
}

func evListen(addr string) (int, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return 0, fmt.Errorf("-addr %q: want an IPv4 address and port", addr)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		return 0, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); err != nil {
		return 0, err
	}
	return fd, syscall.Listen(fd, 4096)
}

// evAccept accepts one client, connects it to backend (a blocking connect:
// rare next to the requests) and watches both sockets.
func evAccept(ep, ln int, backend string, conns map[int32]*evConn) error {
	cfd, _, err := syscall.Accept4(ln, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
	if err == syscall.EAGAIN {
		return nil
	}
	if err != nil {
		return err
	}
	bc, err := net.Dial("tcp", backend)
	if err != nil {
		syscall.Close(cfd)
		return nil
	}
	f, err := bc.(*net.TCPConn).File() // a blocking duplicate, owned here
	bc.Close()
	if err != nil {
		syscall.Close(cfd)
		return nil
	}
	bfd, err := syscall.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		syscall.Close(cfd)
		return nil
	}
	syscall.SetNonblock(bfd, true)
	for _, fd := range []int{cfd, bfd} {
		syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
	}
	c := &evConn{fd: cfd, buf: make([]byte, 16<<10), client: true}
	b := &evConn{fd: bfd, buf: make([]byte, 16<<10), peer: c}
	c.peer = b
	conns[int32(cfd)], conns[int32(bfd)] = c, b
	for _, fd := range []int{cfd, bfd} {
		if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP, Fd: int32(fd)}); err != nil {
			return err
		}
	}
	return nil
}

package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/testkit/poll"
)

// connLog records the ConnState hook's calls.
type connLog struct {
	mu     sync.Mutex
	states map[http.ConnState]int
}

func (l *connLog) hook(_ net.Conn, st http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.states[st]++
}

func (l *connLog) count(st http.ConnState) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.states[st]
}

func parkProxy(t *testing.T, fo FrontOptions) (*proxy, *connLog) {
	t.Helper()
	b := newBackend(t, "b1", frontBackend)
	snap := testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}},
		map[string]int{"SC1": 100}, nil))
	log := &connLog{states: map[http.ConnState]int{}}
	p := newProxy(t, snap, proxyOpts{frontKind: FrontFastHTTP, front: fo, connState: log.hook,
		opts: Options{UpstreamClient: UpstreamFast}})
	return p, log
}

// parkedConns counts the fasthttp front's connections waiting without buffers.
func parkedConns(f *FastFront) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for c := range f.conns {
		if ac, ok := c.(*addrConn); ok && ac.park.Load() == connParked {
			n++
		}
	}
	return n
}

// readAnswers reads n answers and checks each is 200 with want's body length.
func readAnswers(t *testing.T, br *bufio.Reader, want ...int) {
	t.Helper()
	for _, w := range want {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != 200 || int(n) != w {
			t.Fatalf("answer: %d, %d bytes (%v), want 200 and %d bytes", res.StatusCode, n, err, w)
		}
	}
}

// dialFront opens a client connection, closed at cleanup.
func dialFront(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	return conn, bufio.NewReader(conn)
}

const smallGET = "GET /small HTTP/1.1\r\nHost: demo.test\r\n\r\n"

// TestFastFrontParksIdleConnections: a keep-alive connection parks between
// requests (no fasthttp buffers held), is served again on its next request,
// pipelined ones included, and is reported new and closed exactly once.
func TestFastFrontParksIdleConnections(t *testing.T) {
	p, log := parkProxy(t, FrontOptions{})
	f := p.hs.(*FastFront)
	conn, br := dialFront(t, p.addr)
	small := len("small body\n")
	for round := 0; round < 3; round++ {
		if _, err := io.WriteString(conn, smallGET); err != nil {
			t.Fatal(err)
		}
		readAnswers(t, br, small)
		poll.EventuallyTrue(t, 20*time.Second, "the idle connection parked", func() bool { return parkedConns(f) == 1 })
	}
	// Two requests in one write, then a body in two writes: nothing is lost
	// across parking.
	if _, err := io.WriteString(conn, smallGET+"GET /big HTTP/1.1\r\nHost: demo.test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	readAnswers(t, br, small, 200000)
	poll.EventuallyTrue(t, 20*time.Second, "parked again", func() bool { return parkedConns(f) == 1 })
	if _, err := io.WriteString(conn, "POST /echo HTTP/1.1\r\nHost: demo.test\r\nContent-Length: 10\r\n\r\n01234"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // a second segment, not a wait for state
	if _, err := io.WriteString(conn, "56789"); err != nil {
		t.Fatal(err)
	}
	readAnswers(t, br, 10)
	if n := log.count(http.StateNew); n != 1 {
		t.Fatalf("StateNew reported %d times, want 1", n)
	}
	if n := log.count(http.StateClosed); n != 0 {
		t.Fatalf("StateClosed reported %d times while open, want 0", n)
	}
	conn.Close()
	poll.EventuallyTrue(t, 20*time.Second, "the closed connection reported", func() bool { return log.count(http.StateClosed) == 1 })
	poll.EventuallyTrue(t, 20*time.Second, "the closed connection untracked", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.conns) == 0
	})
}

// TestFastFrontParkedIdleTimeout: a parked connection still closes after
// IdleTimeout.
func TestFastFrontParkedIdleTimeout(t *testing.T) {
	p, log := parkProxy(t, FrontOptions{IdleTimeout: 300 * time.Millisecond})
	conn, br := dialFront(t, p.addr)
	io.WriteString(conn, smallGET)
	readAnswers(t, br, len("small body\n"))
	start := time.Now()
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("read on the idle connection: %v, want EOF (closed by the idle timeout)", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("closed after %v, want about 300ms", d)
	}
	poll.EventuallyTrue(t, 20*time.Second, "the closed connection reported", func() bool { return log.count(http.StateClosed) == 1 })
}

// TestFastFrontShutdownClosesParked: Shutdown closes parked connections and
// returns (their goroutines end: goleak in TestMain).
func TestFastFrontShutdownClosesParked(t *testing.T) {
	p, log := parkProxy(t, FrontOptions{})
	f := p.hs.(*FastFront)
	conn, br := dialFront(t, p.addr)
	io.WriteString(conn, smallGET)
	readAnswers(t, br, len("small body\n"))
	poll.EventuallyTrue(t, 20*time.Second, "the idle connection parked", func() bool { return parkedConns(f) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("read on the parked connection after Shutdown: %v, want EOF", err)
	}
	poll.EventuallyTrue(t, 20*time.Second, "the closed connection reported", func() bool { return log.count(http.StateClosed) == 1 })
}

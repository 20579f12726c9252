package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/proxy/internal/balance"
	"github.com/sluicelb/sluice/proxy/internal/forward"
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
	return parkProxyLog(t, fo, nil)
}

// parkProxyLog is parkProxy with its access log written to access (nil:
// none).
func parkProxyLog(t *testing.T, fo FrontOptions, access *syncBuffer) (*proxy, *connLog) {
	t.Helper()
	var al *slog.Logger
	if access != nil {
		al = slog.New(slog.NewJSONHandler(access, nil))
	}
	b := newBackend(t, "b1", frontBackend)
	snap := testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}},
		map[string]int{"SC1": 100}, nil))
	log := &connLog{states: map[http.ConnState]int{}}
	p := newProxy(t, snap, proxyOpts{frontKind: FrontFastHTTP, front: fo, connState: log.hook,
		opts: Options{UpstreamClient: UpstreamFast, AccessLog: al}})
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

// TestFastFrontShutdownClosesIdle: with LazyRequestTime on (no clock read
// per request for ctx.Time, which nothing reads), a keep-alive connection
// idle right after a request is still closed by Shutdown at once: fasthttp
// marks it idle with a once-a-second clock instead of the request's time.
func TestFastFrontShutdownClosesIdle(t *testing.T) {
	p, log := parkProxy(t, FrontOptions{ParkIdleAfter: time.Hour})
	f := p.hs.(*FastFront)
	if !f.fs.LazyRequestTime {
		t.Fatal("LazyRequestTime off: a clock read per request")
	}
	conn, br := dialFront(t, p.addr)
	io.WriteString(conn, smallGET)
	readAnswers(t, br, len("small body\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := f.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Shutdown took %v with one idle connection", d)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("read on the idle connection after Shutdown: %v, want EOF", err)
	}
	poll.EventuallyTrue(t, 20*time.Second, "the closed connection reported", func() bool { return log.count(http.StateClosed) == 1 })
}

// TestFastFrontQuietCloseLogsNothing: a connection that ends before the
// first byte of a request gets no answer and no access line, as an idle
// keep-alive connection that ends does not with the std front or nginx: a
// parked keep-alive connection the client closes (a FIN, or a reset:
// SO_LINGER 0) or leaves to the idle timeout, and a new connection that
// sends nothing before it is reset or its read timeout passes. Only the
// requests made are logged. (Issue 19: a reset parked connection came back
// to fasthttp as a new connection's first read, which fasthttp answers with
// a generated 400, logged with no path.)
func TestFastFrontQuietCloseLogsNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		request bool // one GET before the end (the connection parks)
		end     string
		fo      FrontOptions
	}{
		{"parked fin", true, "fin", FrontOptions{}},
		{"parked reset", true, "reset", FrontOptions{}},
		{"parked idle timeout", true, "timeout", FrontOptions{IdleTimeout: 300 * time.Millisecond}},
		{"new reset", false, "reset", FrontOptions{}},
		{"new read timeout", false, "timeout", FrontOptions{ReadHeaderTimeout: 300 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var access syncBuffer
			p, log := parkProxyLog(t, tc.fo, &access)
			f := p.hs.(*FastFront)
			conn, br := dialFront(t, p.addr)
			if tc.request {
				io.WriteString(conn, smallGET)
				readAnswers(t, br, len("small body\n"))
				if tc.end != "timeout" {
					poll.EventuallyTrue(t, 20*time.Second, "the idle connection parked", func() bool { return parkedConns(f) == 1 })
				}
			} else {
				poll.EventuallyTrue(t, 20*time.Second, "the connection accepted", func() bool { return log.count(http.StateNew) == 1 })
			}
			switch tc.end {
			case "timeout":
				if b, err := br.ReadByte(); !errors.Is(err, io.EOF) {
					t.Fatalf("read on the idle connection: %q %v, want EOF (closed by the timeout, no answer)", b, err)
				}
			case "reset":
				conn.(*net.TCPConn).SetLinger(0)
				conn.Close()
			default:
				conn.Close()
			}
			poll.EventuallyTrue(t, 20*time.Second, "the closed connection reported", func() bool { return log.count(http.StateClosed) == 1 })
			want := 0
			if tc.request {
				want = 1
			}
			lines := access.lines(t)
			if len(lines) != want || want == 1 && (lines[0]["path"] != "/small" || lines[0]["status"] != float64(200)) {
				t.Fatalf("access log: %v, want %d lines (GET /small 200)", lines, want)
			}
			if n := testutil.ToFloat64(p.s.metrics.generated.WithLabelValues("", CodeBadRequest)) +
				testutil.ToFloat64(p.s.metrics.generated.WithLabelValues("", CodeClientTimeout)); n != 0 {
				t.Fatalf("%v generated 400/408 answers counted, want 0", n)
			}
		})
	}
}

// TestFastFrontParkedOutlivesTheHeaderTimeout: a parked connection waits
// for its idle timeout, not for the shorter header timeout left armed from
// its last request: a request after the header timeout is served on it, and
// it closes only once the idle timeout passed.
func TestFastFrontParkedOutlivesTheHeaderTimeout(t *testing.T) {
	const header, idle = 100 * time.Millisecond, 1500 * time.Millisecond
	p, _ := parkProxy(t, FrontOptions{ReadHeaderTimeout: header, IdleTimeout: idle})
	f := p.hs.(*FastFront)
	conn, br := dialFront(t, p.addr)
	io.WriteString(conn, smallGET)
	readAnswers(t, br, len("small body\n"))
	poll.EventuallyTrue(t, 20*time.Second, "the idle connection parked", func() bool { return parkedConns(f) == 1 })
	time.Sleep(4 * header) // the header timeout passes (time that must pass, not a state to wait for)
	last := time.Now()     // before the request: its idle timeout starts after it (from the client's read of the answer, a stalled client lost time)
	io.WriteString(conn, smallGET)
	readAnswers(t, br, len("small body\n"))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("read on the idle connection: %v, want EOF (closed by the idle timeout)", err)
	}
	if d := time.Since(last); d < idle-idle/16 {
		t.Fatalf("closed %v after the last request, want the idle timeout %v", d, idle)
	}
}

// TestFastFrontGETArmsOnlyTheHeaderDeadline: between two GETs a
// connection's read deadline is the header timeout fasthttp armed for the
// last one — neither a body deadline (a GET has no body) nor the idle one
// (set only if the header deadline passes first), whether it waits parked
// (after its first request) or in fasthttp's Read (after later ones), plain
// and over TLS: no timer moves per request beyond that one, which
// deadline.Skip mostly skips.
func TestFastFrontGETArmsOnlyTheHeaderDeadline(t *testing.T) {
	const header, idle = 5 * time.Second, 60 * time.Second
	for _, overTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "tls"}[overTLS], func(t *testing.T) {
			f, conn, br := parkFront(t, overTLS, FrontOptions{ReadHeaderTimeout: header, IdleTimeout: idle, ParkIdleAfter: time.Hour})
			for i := range 3 {
				io.WriteString(conn, smallGET)
				readAnswers(t, br, len("small body\n"))
				poll.EventuallyTrue(t, 20*time.Second, "the connection waiting for its next request", func() bool {
					return parkedConns(f)+idleReads(f) == 1
				})
				f.mu.Lock()
				// Whatever armed the deadline did so before now: the header
				// timeout's ends within header of now, the idle one's
				// (60 s) far later.
				now := time.Now()
				for c := range f.conns {
					if ac, ok := c.(*addrConn); ok {
						// The waiting goroutine writes rdl only once the
						// header deadline passed; park's or kick's atomic
						// orders the earlier writes.
						if left := ac.rdl.Sub(now); ac.rdl.IsZero() || left > header {
							t.Errorf("GET %d: read deadline %v from now, want the header timeout's %v at most", i, left, header)
						}
					}
				}
				f.mu.Unlock()
			}
		})
	}
}

// TestFastFrontWriteDeadlineClearWaitsForAWrite: the write deadline a
// routed request's handler set (write_client) stays armed after its answer
// — the next request's moves it only a little — but no write runs under it
// once fasthttp cleared it: an answer the handler sets no deadline for (a
// generated 404) is written without one.
func TestFastFrontWriteDeadlineClearWaitsForAWrite(t *testing.T) {
	b := newBackend(t, "b1", frontBackend)
	snap := testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}},
		map[string]int{"SC1": 100}, nil))
	snap.DefaultProduct = "" // other hosts: no route, a generated 404
	snap.Meta.Hash = snapshotHash(snap)
	p := newProxy(t, snap, proxyOpts{frontKind: FrontFastHTTP, opts: Options{UpstreamClient: UpstreamFast}})
	f := p.hs.(*FastFront)
	conn, br := dialFront(t, p.addr)
	parkedWDL := func() (time.Time, bool) {
		poll.EventuallyTrue(t, 20*time.Second, "the idle connection parked", func() bool { return parkedConns(f) == 1 })
		f.mu.Lock()
		defer f.mu.Unlock()
		for c := range f.conns {
			if ac, ok := c.(*addrConn); ok {
				return ac.wdl, ac.wclear
			}
		}
		t.Fatal("no connection")
		return time.Time{}, false
	}
	io.WriteString(conn, smallGET)
	readAnswers(t, br, len("small body\n"))
	if wdl, clear := parkedWDL(); wdl.IsZero() || !clear {
		t.Fatalf("after a routed GET: write deadline %v, clear pending %v; want it armed, its clear pending", wdl, clear)
	}
	io.WriteString(conn, "GET /x HTTP/1.1\r\nHost: no-such-product.test\r\n\r\n")
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusNotFound {
		t.Fatalf("unrouted GET: %v %v, want 404", res, err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if wdl, clear := parkedWDL(); !wdl.IsZero() || clear {
		t.Fatalf("after a generated answer: write deadline %v, clear pending %v; want none (cleared before its write)", wdl, clear)
	}
}

// idleReads counts the fasthttp front's connections waiting in fasthttp's
// own Read for their next request (not parked: addrConn.kick armed).
func idleReads(f *FastFront) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for c := range f.conns {
		if ac, ok := c.(*addrConn); ok && ac.kick.Load() > 0 {
			n++
		}
	}
	return n
}

// parkFront is a fasthttp front (plain, or over TLS) with fo, and a client
// connection to it.
func parkFront(t *testing.T, overTLS bool, fo FrontOptions) (*FastFront, net.Conn, *bufio.Reader) {
	t.Helper()
	if !overTLS {
		p, _ := parkProxy(t, fo)
		conn, br := dialFront(t, p.addr)
		return p.hs.(*FastFront), conn, br
	}
	snap, _ := frontSnapshot(t)
	tf, addr, pool := tlsProxyWith(t, FrontFastHTTP, snap, fo)
	raw, _ := dialFront(t, addr)
	tc := tls.Client(raw, tlsClientConfig(pool))
	return tf.fast, tc, bufio.NewReader(tc)
}

// TestFastFrontBusyConnectionNotParked: a keep-alive connection is parked
// at once after its first request; after later ones, while they come within
// ParkIdleAfter, it is not: it waits in fasthttp's own Read, with its buffers
// (parking at every answer cost each request a fasthttp loop's end and
// start: issue 20 round 4).
func TestFastFrontBusyConnectionNotParked(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "tls"}[overTLS], func(t *testing.T) {
			f, conn, br := parkFront(t, overTLS, FrontOptions{ParkIdleAfter: time.Hour})
			for round := 0; round < 4; round++ {
				if _, err := io.WriteString(conn, smallGET); err != nil {
					t.Fatal(err)
				}
				readAnswers(t, br, len("small body\n"))
				poll.EventuallyTrue(t, 20*time.Second, "the connection waiting for its next request", func() bool {
					return idleReads(f)+parkedConns(f) > 0
				})
				wantParked, wantWaiting := 0, 1
				if round == 0 {
					wantParked, wantWaiting = 1, 0
				}
				if parked, waiting := parkedConns(f), idleReads(f); parked != wantParked || waiting != wantWaiting {
					t.Fatalf("after request %d: %d parked, %d waiting in fasthttp's Read; want %d and %d",
						round+1, parked, waiting, wantParked, wantWaiting)
				}
			}
		})
	}
}

// TestFastFrontParkRace: with the sweep ticking every millisecond, requests
// that come as a kick lands (or just before, or after) are all answered
// once, in order, on the one connection, plain and over TLS, and a body
// whose second half comes after a pause is not cut by the sweep.
func TestFastFrontParkRace(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "tls"}[overTLS], func(t *testing.T) {
			f, conn, br := parkFront(t, overTLS, FrontOptions{ParkIdleAfter: time.Millisecond})
			small := len("small body\n")
			for i := 0; i < 150; i++ {
				req := smallGET
				if i%10 == 9 {
					req += smallGET // two at once
				}
				if _, err := io.WriteString(conn, req); err != nil {
					t.Fatal(err)
				}
				if i%10 == 9 {
					readAnswers(t, br, small, small)
				} else {
					readAnswers(t, br, small)
				}
				time.Sleep(time.Duration(i%5) * 700 * time.Microsecond) // gaps around the sweep's ticks, not a wait for state
			}
			poll.EventuallyTrue(t, 20*time.Second, "parked after the last", func() bool { return parkedConns(f) == 1 })
			if _, err := io.WriteString(conn, "POST /echo HTTP/1.1\r\nHost: demo.test\r\nContent-Length: 10\r\n\r\n01234"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond) // ten sweep ticks inside the body, not a wait for state
			if _, err := io.WriteString(conn, "56789"); err != nil {
				t.Fatal(err)
			}
			readAnswers(t, br, 10)
		})
	}
}

// TestFastFrontParkIdleAfterRefused: a negative ParkIdleAfter is refused,
// naming the field and the value.
func TestFastFrontParkIdleAfterRefused(t *testing.T) {
	s, err := New(Options{Registry: balance.NewRegistry(balance.RegistryOptions{}), Pools: forward.NewPools(forward.Options{}), UpstreamClient: UpstreamFast})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.FastHTTPServer(FrontOptions{ParkIdleAfter: -time.Second})
	if err == nil || !strings.Contains(err.Error(), "ParkIdleAfter -1s") {
		t.Fatalf("ParkIdleAfter -1s: %v, want an error naming it", err)
	}
}

// TestFastFrontKickedRead: an idle Read the sweep kicked just as the next
// request arrived (it read bytes, or failed otherwise than by the kick's
// deadline) goes on under the connection's own read deadline again — not
// the kick's, in the past, which would fail the request's next read — and
// does not park; one that read nothing parks, its wait to set the idle
// deadline (TestFastFrontParkRace meets the first case only by chance).
func TestFastFrontKickedRead(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	c := &addrConn{Conn: server, rdl: time.Now().Add(time.Minute)}
	kick := func() { // the sweep's two steps
		c.kick.Store(kickBusy)
		_ = c.Conn.SetReadDeadline(aLongTimeAgo)
		c.kick.Store(kickDone)
	}
	kick()
	if n, err := c.kicked(3, nil); n != 3 || err != nil || c.park.Load() != connServing || c.kick.Load() != kickNone {
		t.Fatalf("kicked after 3 bytes: %d, %v, park %d, kick %d; want 3, nil, serving, none", n, err, c.park.Load(), c.kick.Load())
	}
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Conn.Read(make([]byte, 1)); err != nil {
		t.Fatalf("the request's next read: %v, want its byte (the kick's deadline undone)", err)
	}
	kick()
	if n, err := c.kicked(0, os.ErrDeadlineExceeded); n != 0 || err != io.EOF || c.park.Load() != connParking || !c.rdl.Equal(aLongTimeAgo) {
		t.Fatalf("kicked having read nothing: %d, %v, park %d, rdl %v; want 0, EOF, parking, the kick's", n, err, c.park.Load(), c.rdl)
	}
}

// TestFastFrontIdleTimeoutBeforeTheHeaderTimeout: an idle timeout shorter
// than the header timeout left armed by the last request closes the
// connection on time, whether it waits parked (after one request) or in
// fasthttp's Read (after two, ParkIdleAfter an hour).
func TestFastFrontIdleTimeoutBeforeTheHeaderTimeout(t *testing.T) {
	const header, idle = 20 * time.Second, 400 * time.Millisecond
	for _, requests := range []int{1, 2} {
		_, conn, br := parkFront(t, false, FrontOptions{ReadHeaderTimeout: header, IdleTimeout: idle, ParkIdleAfter: time.Hour})
		var last time.Time
		for range requests {
			last = time.Now() // before the last request: its idle timeout starts after it
			io.WriteString(conn, smallGET)
			readAnswers(t, br, len("small body\n"))
		}
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Fatalf("after %d requests: read on the idle connection: %v, want EOF (closed by the idle timeout)", requests, err)
		}
		if d := time.Since(last); d < idle-idle/16 || d > header/2 {
			t.Fatalf("after %d requests: closed %v after the last request, want the idle timeout %v", requests, d, idle)
		}
	}
}

// TestFastFrontParkedAnswersAtOnce: a request on a parked connection is
// answered without waiting for the park sweep: the parked wait wakes on the
// socket becoming readable. The connection parks at once after its first
// request; ParkIdleAfter (the sweep's tick) is 10 s and the second answer
// must come within 2 s (the race detector on a loaded 2-core machine), far
// below one tick (s9-latency: open-loop p50 of seconds under CPU contention
// was the load, not this path).
func TestFastFrontParkedAnswersAtOnce(t *testing.T) {
	const tick, bound = 10 * time.Second, 2 * time.Second
	p, _ := parkProxy(t, FrontOptions{ParkIdleAfter: tick, IdleTimeout: time.Minute})
	f := p.hs.(*FastFront)
	conn, br := dialFront(t, p.addr)
	small := len("small body\n")
	if _, err := io.WriteString(conn, smallGET); err != nil {
		t.Fatal(err)
	}
	readAnswers(t, br, small)
	poll.EventuallyTrue(t, 5*time.Second, "the connection parked after its first request", func() bool { return parkedConns(f) == 1 })
	start := time.Now()
	if _, err := io.WriteString(conn, smallGET); err != nil {
		t.Fatal(err)
	}
	readAnswers(t, br, small)
	if d := time.Since(start); d > bound {
		t.Fatalf("the parked connection's request answered after %v, want within %v (ParkIdleAfter %v)", d, bound, tick)
	}
	if n := parkedConns(f); n != 0 {
		t.Fatalf("%d connections parked just after the answer on a busy connection, want 0", n)
	}
}

// TestFastFrontNextRequestAtEveryMoment: on a busy keep-alive connection
// (waiting in fasthttp's Read for its next request, where the front waits in
// the poller without the read that finds nothing: sockio.Conn.AwaitAfterDrain)
// the next request is sent at every moment against the answer before it —
// with it (pipelined), while it is made, as it arrives, after it, half
// before and half after — and every one is answered at once. The sweep
// never kicks (ParkIdleAfter an hour): a lost wake-up is a hang, which the
// client's read deadline fails.
func TestFastFrontNextRequestAtEveryMoment(t *testing.T) {
	f, conn, br := parkFront(t, false, FrontOptions{ParkIdleAfter: time.Hour})
	small := len("small body\n")
	write := func(s string) {
		if _, err := io.WriteString(conn, s); err != nil {
			t.Error(err)
		}
	}
	write(smallGET) // the first request parks the connection; the next ones find it busy
	readAnswers(t, br, small)
	write(smallGET)
	readAnswers(t, br, small)
	half := len(smallGET) / 2
	for i := range 600 {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		switch i % 6 {
		case 0: // the next one with this one: fasthttp has it buffered
			write(smallGET + smallGET)
			readAnswers(t, br, small, small)
			continue
		case 1: // while the answer is made (and read by the proxy's poller before it is written)
			write(smallGET)
			write(smallGET)
			readAnswers(t, br, small, small)
			continue
		case 2: // half while the answer is made, half after it
			write(smallGET + smallGET[:half])
			readAnswers(t, br, small)
			write(smallGET[half:])
		case 3: // as the answer arrives
			write(smallGET)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for range rand.IntN(200) {
					goruntime.Gosched()
				}
				write(smallGET)
			}()
			readAnswers(t, br, small)
			<-done
		case 4: // after it, at once
			write(smallGET)
			readAnswers(t, br, small)
			write(smallGET)
		case 5: // after it, a little later (a jitter, not a wait for state)
			write(smallGET)
			readAnswers(t, br, small)
			time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
			write(smallGET)
		}
		readAnswers(t, br, small)
	}
	if parked := parkedConns(f); parked != 0 {
		t.Fatalf("%d parked, want the busy connection in fasthttp's Read", parked)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		if ac, ok := c.(*addrConn); !ok || ac.drain == nil {
			t.Fatalf("connection %T waits with a read, not in the poller (no drainWaiter)", c)
		}
	}
}

// TestFastFrontHalfCloseAfterABusyRequest: a client that half-closes right
// after a keep-alive request on a busy connection gets its answer and then
// the connection's end, soon. Its FIN may be read together with the
// request, when the wait for the next request (AwaitAfterDrain) sees no
// event for it: the sweep's kick ends that wait within two ticks and the
// parked wait sees the end (before the wait in the poller, fasthttp's read
// found it at once).
func TestFastFrontHalfCloseAfterABusyRequest(t *testing.T) {
	p, _ := parkProxy(t, FrontOptions{ParkIdleAfter: 20 * time.Millisecond})
	small := len("small body\n")
	for i := range 20 {
		conn, br := dialFront(t, p.addr)
		conn.SetDeadline(time.Now().Add(5 * time.Second)) // 250 ticks
		for range 2 {                                     // the first parks it; the second finds it busy
			if _, err := io.WriteString(conn, smallGET); err != nil {
				t.Fatal(err)
			}
			readAnswers(t, br, small)
		}
		if _, err := io.WriteString(conn, smallGET); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			readAnswers(t, br, small) // the FIN after the answer: its own event
		}
		if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			readAnswers(t, br, small)
		}
		if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("after the last answer: %d bytes, %v; want the connection's end (io.EOF)", n, err)
		}
	}
}

// waitConn is a connection the front may park (AwaitReadable), with or
// without bytes of its own read ahead (Buffered, as a TLS one).
type waitConn struct{ net.Conn }

func (waitConn) AwaitReadable() error { return nil }

type bufferingConn struct {
	waitConn
	buffered bool
}

func (c *bufferingConn) Buffered() bool { return c.buffered }

// oneConnL accepts c, once.
type oneConnL struct {
	net.Listener
	c net.Conn
}

func (l oneConnL) Accept() (net.Conn, error) { return l.c, nil }

// An idle connection whose wrapper holds bytes already read (a TLS one's
// records) is not taken for waiting: fasthttp reads them. The front asks
// Buffered only of a connection that has it, which it finds out once.
func TestIdleNextAsksBufferedConns(t *testing.T) {
	bc := &bufferingConn{}
	for _, c := range []struct {
		conn     net.Conn
		buffered bool
		want     bool
	}{
		{waitConn{}, false, true},
		{bc, false, true},
		{bc, true, false},
	} {
		nc, err := addrListener{Listener: oneConnL{c: c.conn}, f: &FastFront{}}.Accept()
		if err != nil {
			t.Fatal(err)
		}
		ac := nc.(*addrConn)
		ac.idle.Store(true)
		bc.buffered = c.buffered
		if got := ac.idleNext(); got != c.want {
			t.Errorf("%T buffered=%v: idleNext %v, want %v", c.conn, c.buffered, got, c.want)
		}
	}
}

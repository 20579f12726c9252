package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicelb/sluice/proxy/internal/connlimit"
	"github.com/sluicelb/sluice/proxy/internal/deadline"
	"github.com/sluicelb/sluice/proxy/internal/sockio"

	"github.com/valyala/fasthttp"
)

// Fronts: the HTTP/1.1 server of the cleartext listener (lbproxy --front).
const (
	// FrontStd is net/http's server (HTTPServer).
	FrontStd = "std"
	// FrontFastHTTP is github.com/valyala/fasthttp's server (FastHTTPServer):
	// fewer syscalls and goroutine hand-offs per request. Cleartext HTTP/1.1
	// only; Upgrade requests are handed to net/http.
	FrontFastHTTP = "fasthttp"
)

// Front is a client-facing server. *http.Server is one.
type Front interface {
	Serve(l net.Listener) error
	// Shutdown stops accepting, closes idle connections and waits for the
	// busy ones until ctx is done.
	Shutdown(ctx context.Context) error
	// Close closes the listeners and every connection now.
	Close() error
}

// NewFront returns the cleartext front of the given kind ("" is FrontStd).
// TLS listeners use TLSFront (the same kind for HTTP/1.1).
func (s *Server) NewFront(kind string, o FrontOptions) (Front, error) {
	switch kind {
	case "", FrontStd:
		return s.newStdFront(o)
	case FrontFastHTTP:
		return s.FastHTTPServer(o)
	default:
		return nil, fmt.Errorf("server: front %q: want %q or %q", kind, FrontStd, FrontFastHTTP)
	}
}

// handoffMax is the largest response body the fasthttp front buffers and
// writes in one go with its header; longer or unsized bodies are streamed by
// fasthttp after the handler returned (bodyHandoff).
const handoffMax = 64 << 10

// FastFront serves plain HTTP/1.1 with fasthttp and hands every request to
// Server.ServeHTTP through a small adapter (an *http.Request built from the
// fasthttp request, an http.ResponseWriter writing into the fasthttp
// response), so routing, balancing, retries, forwarding headers and generated
// answers are the very code of the net/http front.
//
// Differences from the net/http front, by design: request bodies stream
// (fasthttp StreamRequestBody), request trailers are not forwarded, no
// Content-Type is sniffed for an answer that has none (net/http adds one), the
// request context is not cancelled when the client goes away (a backend
// exchange stays bounded by the policy timeouts), and Upgrade requests (other
// than h2c, which is refused as on the std front) are handed with their
// connection to a net/http server. fasthttp's read buffer is also its header
// limit (MaxHeaderBytes + 4 KiB, 68 KiB by default): a connection holds it
// only while a request is in progress; an idle keep-alive connection is
// parked without buffers (idlepark.go).
type FastFront struct {
	s    *Server
	fs   *fasthttp.Server
	std  *http.Server // serves connections handed over for an Upgrade
	hook func(net.Conn, http.ConnState)

	mu        sync.Mutex
	conns     map[net.Conn]struct{}
	lns       []net.Listener // Serve's, closed by beginClose
	closing   bool           // Shutdown or Close began: parked connections close
	serving   int            // parked connections handed back to fasthttp
	drained   chan struct{}  // closed when closing and serving is 0
	drainOnce sync.Once

	parkAfter time.Duration // FrontOptions.ParkIdleAfter: the sweep's tick (idlepark.go)
	tick      atomic.Int64  // the sweep's ticks, from 1
	sweepOnce sync.Once     // the sweep starts with the first Serve
	stopOnce  sync.Once
	stop      chan struct{} // closed at Shutdown or Close: the sweep ends
	swept     chan struct{} // closed when the sweep ended (or never started)
}

// FastHTTPServer returns the fasthttp front with the limits of o (the same
// defaults as HTTPServer). Certificates are refused: a TLS listener is
// served by TLSFront, which makes the handshake and hands HTTP/1.1
// connections to a FastFront.
func (s *Server) FastHTTPServer(o FrontOptions) (*FastFront, error) {
	if len(o.Certificates) > 0 {
		return nil, errors.New("server: the fasthttp front serves cleartext HTTP/1.1 only; TLS listeners use TLSFront")
	}
	if !s.fast {
		// ReverseProxy writes every body through Write: the front would
		// buffer whole answers (no streaming).
		return nil, fmt.Errorf("server: the fasthttp front needs the %q upstream client", UpstreamFast)
	}
	parkAfter, err := parkIdleAfter(o)
	if err != nil {
		return nil, err
	}
	std, err := s.HTTPServer(o) // applies the defaults to o's copy in std
	if err != nil {
		return nil, err
	}
	std.ConnState = o.ConnState
	f := &FastFront{s: s, std: std, hook: o.ConnState, conns: make(map[net.Conn]struct{}), drained: make(chan struct{}),
		parkAfter: parkAfter, stop: make(chan struct{}), swept: make(chan struct{})}
	f.tick.Store(1) // a kick's tick is positive (addrConn.kick)
	readTimeout := std.ReadHeaderTimeout
	f.fs = &fasthttp.Server{
		Handler:      f.serve,
		ErrorHandler: f.onError,
		HeaderReceived: func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
			if s.overBodyLimit(h) {
				return fasthttp.RequestConfig{} // no body read: ServeHTTP answers 413 at once
			}
			if n := h.ContentLength(); n == 0 || n == -2 {
				// Nothing more to read: -2 is neither Content-Length nor
				// Transfer-Encoding, a request without a body (RFC 9112
				// 6.3; fasthttp reads none). No body deadline either: it
				// was a timer update per GET.
				return fasthttp.RequestConfig{}
			}
			// The header arrived within ReadHeaderTimeout; the body gets
			// ReadTimeout (none: policy read_client bounds it per request).
			return fasthttp.RequestConfig{ReadTimeout: bodyReadTimeout(std.ReadTimeout)}
		},
		ReadTimeout:                   readTimeout,
		WriteTimeout:                  std.WriteTimeout,
		IdleTimeout:                   std.IdleTimeout,
		ReadBufferSize:                std.MaxHeaderBytes + 4096, // the header must fit: over it 431
		MaxRequestBodySize:            maxRequestBody,            // Server.ServeHTTP enforces Options.MaxBodyBytes
		StreamRequestBody:             true,
		DisablePreParseMultipartForm:  true,
		NoDefaultServerHeader:         true,
		NoDefaultContentType:          true,
		DisableHeaderNamesNormalizing: false,
		// Nothing here reads ctx.Time(): no clock read per request for
		// it. Shutdown's idle-connection sweep then compares fasthttp's
		// once-a-second clock (never ahead of now) instead of the request's
		// time: the same connections close.
		LazyRequestTime:       true,
		CloseOnShutdown:       true,
		SecureErrorLogMessage: true,
		Logger:                discardLogger{},
		ConnState:             f.connState,
	}
	return f, nil
}

// defaultParkIdleAfter is FrontOptions.ParkIdleAfter's default: long
// against a busy keep-alive client's gaps between requests (milliseconds),
// short against bench/idleconns.sh's 2 s settle and a client's idle minutes.
const defaultParkIdleAfter = 500 * time.Millisecond

// parkIdleAfter is o.ParkIdleAfter with its default, the park sweep's tick
// of the fasthttp front and of the HTTP/2 server (h2park.go).
func parkIdleAfter(o FrontOptions) (time.Duration, error) {
	if o.ParkIdleAfter < 0 {
		return 0, fmt.Errorf("server: ParkIdleAfter %v: want 0 (the default, %v) or a positive duration", o.ParkIdleAfter, defaultParkIdleAfter)
	}
	if o.ParkIdleAfter == 0 {
		return defaultParkIdleAfter, nil
	}
	return o.ParkIdleAfter, nil
}

// maxRequestBody lets every body through fasthttp; the handler caps it.
const maxRequestBody = int(^uint(0) >> 1)

// bodyReadTimeout is the read deadline set once the request header arrived.
// fasthttp's ReadTimeout would otherwise keep bounding a streamed body with
// the header timeout.
func bodyReadTimeout(d time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return 24 * time.Hour
}

type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}

// Serve accepts connections on l until Shutdown or Close, then answers
// http.ErrServerClosed, as net/http's Serve does; called after them, it
// answers so at once. (fasthttp's Serve after its Shutdown would serve on:
// Shutdown closes only the listeners Serve had registered, and lbproxy
// starts Serve in a goroutine that may run only after an early Shutdown.)
func (f *FastFront) Serve(l net.Listener) error {
	f.mu.Lock()
	if f.closing {
		f.mu.Unlock()
		return http.ErrServerClosed
	}
	f.lns = append(f.lns, l) // beginClose closes it, registered with fasthttp or not yet
	f.mu.Unlock()
	f.sweepOnce.Do(func() { go f.sweep(f.parkAfter, f.stop, f.swept) }) // ends at Shutdown or Close
	err := f.fs.Serve(addrListener{Listener: l, f: f})
	if f.closingErr() != nil {
		return http.ErrServerClosed
	}
	return err
}

// addrListener wraps each client connection in an addrConn.
type addrListener struct {
	net.Listener
	f *FastFront
}

func (l addrListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c = sockio.Wrap(c) // lbproxy's listeners wrap already: Wrap keeps a *sockio.Conn
	ac := &addrConn{Conn: c, front: l.f}
	ac.wait, _ = c.(readableWaiter)
	_, ac.buffers = c.(bufferedConn)
	ac.lim = connlimit.Of(c)
	if tc, ok := c.(interface{ ConnectionState() tls.ConnectionState }); ok { // from TLSFront: the handshake is done
		st := tc.ConnectionState()
		ac.tls = &st
	} else {
		ac.drain = drainWaiterOf(c)
	}
	return ac, nil
}

// addrConn formats the remote address once per connection, not per
// request, and moves its deadlines only when they really move
// (deadline.Skip): fasthttp and the handler set them at every request.
type addrConn struct {
	net.Conn
	remote   string // set on first use by the connection's goroutine
	rdl, wdl time.Time

	tls     *tls.ConnectionState // over TLS (TLSFront): the request's r.TLS
	wait    readableWaiter       // nil: never parked (idlepark.go)
	drain   drainWaiter          // the plain socket under the connection: idleRead's wait (idlepark.go); nil over TLS
	idle    atomic.Bool          // between two requests (fasthttp StateIdle)
	park    atomic.Int32         // connServing, connParking, connParked, connClosed
	looping bool                 // a parked goroutine serves it (owned by that goroutine)
	begun   bool                 // a byte of the request fasthttp waits for arrived (Read, idlepark.go)
	wclear  bool                 // a write-deadline clear left undone until the next Write (SetWriteDeadline)
	peerOK  bool                 // remote parsed: peer is netip.ParseAddrPort(remote)
	buffers bool                 // wait is a bufferedConn (TLS, tlsidle.go): asserted once, for idleNext
	lim     *connlimit.Conn      // nil: not limited (connlimit.go)

	front     *FastFront
	kick      atomic.Int64 // the sweep's hold on an idle Read (idlepark.go)
	served    int          // requests begun (fasthttp StateActive), owned by the serving goroutine
	parkUntil time.Time    // fasthttp's idle deadline, applied only if the one armed passes first (armIdle, idlepark.go)
	// remote parsed with it, for ServeHTTP (remoteAddrPort): a parse per
	// connection, not per request
	peer netip.AddrPort
}

// SetReadDeadline moves c's read deadline, except fasthttp's idle deadline,
// set just before the Read that waits for the next request: it is kept in
// parkUntil, and that wait (idleRead, or the parked one) applies it only
// if the deadline already armed passes first (idlepark.go, armIdle).
func (c *addrConn) SetReadDeadline(t time.Time) error {
	if c.idleNext() {
		c.parkUntil = t
		return nil
	}
	return c.setReadDeadline(t)
}

// setReadDeadline moves the socket's read deadline to t, unless t is
// (nearly) the one armed: deadline.Skip.
func (c *addrConn) setReadDeadline(t time.Time) error {
	if deadline.Skip(c.rdl, t) {
		return nil
	}
	c.rdl = t
	return c.Conn.SetReadDeadline(t)
}

// SetWriteDeadline leaves a clear undone until a Write would run under the
// deadline: fasthttp clears the handler's write deadline (policy
// write_client) after every answer and the next request's handler sets it
// again, a timer deletion and addition per request; left armed, the next
// one only moves it a little (deadline.Skip).
func (c *addrConn) SetWriteDeadline(t time.Time) error {
	if t.IsZero() && !c.wdl.IsZero() {
		c.wclear = true
		return nil
	}
	c.wclear = false
	if deadline.Skip(c.wdl, t) {
		return nil
	}
	c.wdl = t
	return c.Conn.SetWriteDeadline(t)
}

// Write writes p, with no write deadline if the last one set was a clear.
func (c *addrConn) Write(p []byte) (int, error) {
	if c.wclear {
		c.wclear, c.wdl = false, time.Time{}
		if err := c.Conn.SetWriteDeadline(time.Time{}); err != nil {
			return 0, err
		}
	}
	return c.Conn.Write(p)
}

func (c *addrConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

func (c *addrConn) remoteAddr() string {
	if c.remote == "" {
		c.remote = c.Conn.RemoteAddr().String()
		ap, err := netip.ParseAddrPort(c.remote)
		c.peer, c.peerOK = ap, err == nil
	}
	return c.remote
}

// Shutdown stops accepting, closes idle (and parked) connections and waits
// for busy ones (and connections handed over for an Upgrade) until ctx is
// done.
func (f *FastFront) Shutdown(ctx context.Context) error {
	f.beginClose()
	err := f.fs.ShutdownWithContext(ctx)
	if errors.Is(err, net.ErrClosed) {
		err = nil // beginClose closed the listeners already
	}
	f.beginClose() // those that parked meanwhile
	select {
	case <-f.drained:
	case <-ctx.Done():
		if err == nil {
			err = ctx.Err()
		}
	}
	if serr := f.std.Shutdown(ctx); err == nil {
		err = serr
	}
	<-f.swept
	return err
}

// Close stops accepting and closes every connection now.
func (f *FastFront) Close() error {
	f.beginClose()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = f.fs.ShutdownWithContext(ctx)
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	<-f.swept
	return f.std.Close()
}

func (f *FastFront) connState(c net.Conn, st fasthttp.ConnState) {
	if ac, ok := c.(*addrConn); ok {
		limitFastState(ac, st)
		if f.parkState(ac, st) {
			return // parked, not closed
		}
	}
	switch st {
	case fasthttp.StateNew:
		f.mu.Lock()
		f.conns[c] = struct{}{}
		f.mu.Unlock()
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		f.mu.Lock()
		delete(f.conns, c)
		f.mu.Unlock()
	}
	if f.hook != nil {
		f.hook(c, http.ConnState(st))
	}
}

var upgradeKey = []byte("Upgrade")

// serve is the fasthttp handler.
func (f *FastFront) serve(ctx *fasthttp.RequestCtx) {
	// The name is canonical already: Peek would copy and normalize it.
	if up := ctx.Request.Header.PeekCanonical(upgradeKey); len(up) > 0 && !h2cOffer(string(up)) {
		f.handOver(ctx)
		return
	}
	a := adapters.Get().(*fastAdapter)
	if err := a.reset(ctx); err != nil {
		a.release()
		f.answer(ctx, http.StatusBadRequest, CodeBadRequest, true, ": "+err.Error())
		return
	}
	aborted := f.run(a)
	if aborted {
		a.abort()
	} else if !a.wrote {
		a.WriteHeader(http.StatusOK)
	}
	if !a.handed {
		a.release()
	}
}

// run calls the shared handler; a panic (http.ErrAbortHandler after a
// failed response body) aborts the client connection.
func (f *FastFront) run(a *fastAdapter) (aborted bool) {
	defer func() {
		if p := recover(); p != nil {
			aborted = true
			if p != http.ErrAbortHandler {
				f.s.log.Error("panic serving request", "panic", fmt.Sprint(p))
			}
		}
	}()
	f.s.ServeHTTP(a, &a.req)
	return false
}

// handOver gives an Upgrade request and its connection to the net/http
// server, which replays the request head and runs the std path (WebSocket
// pass-through as on the std front).
func (f *FastFront) handOver(ctx *fasthttp.RequestCtx) {
	markForHandOver(&ctx.Request.Header)
	head := append([]byte(nil), ctx.Request.Header.Header()...)
	var body []byte
	if bs := ctx.RequestBodyStream(); bs != nil && ctx.Request.Header.ContentLength() > 0 {
		body, _ = io.ReadAll(io.LimitReader(bs, int64(ctx.Request.Header.ContentLength())))
	}
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		done := make(chan struct{})
		hc := &handedConn{Conn: c, r: io.MultiReader(bytes.NewReader(head), bytes.NewReader(body), c), done: done}
		l := &oneConnListener{c: hc, addr: c.LocalAddr()}
		_ = f.std.Serve(l)
		if !l.accepted {
			c.Close()
			return
		}
		<-done
	})
}

// handedConn is a hijacked connection replaying the request head.
//
// fasthttp owns the connection it handed to the hijack handler: when the
// handler returns it closes the socket and recycles its hijackConn, whose
// fields then become nil. net/http's upgrade path closes the client side
// when one direction ends and does not wait for the copier of the other
// direction, which may still be in Read or about to call it. So Close
// closes the socket itself (unblocking a Read in progress), waits for every
// Read and Write in progress to return, and only then lets the handler
// return; a Read or Write after Close answers net.ErrClosed without
// touching fasthttp's connection.
type handedConn struct {
	net.Conn
	r    io.Reader
	done chan struct{}

	mu     sync.Mutex
	closed bool
	ops    sync.WaitGroup
}

// enter registers one Read or Write; false once the connection is closed.
func (c *handedConn) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.ops.Add(1)
	return true
}

func (c *handedConn) Read(p []byte) (int, error) {
	if !c.enter() {
		return 0, net.ErrClosed
	}
	defer c.ops.Done()
	return c.r.Read(p)
}

func (c *handedConn) Write(p []byte) (int, error) {
	if !c.enter() {
		return 0, net.ErrClosed
	}
	defer c.ops.Done()
	return c.Conn.Write(p)
}

func (c *handedConn) Close() error {
	c.mu.Lock()
	first := !c.closed
	c.closed = true
	c.mu.Unlock()
	if !first {
		return nil
	}
	// fasthttp's hijackConn.Close does nothing (it closes the socket when
	// the handler returns), so close the socket under it.
	raw := c.Conn
	if u, ok := raw.(interface{ UnsafeConn() net.Conn }); ok {
		raw = u.UnsafeConn()
	}
	err := raw.Close()
	c.ops.Wait()
	close(c.done)
	return err
}

// oneConnListener accepts one connection, then reports closed.
type oneConnListener struct {
	c        net.Conn
	addr     net.Addr
	accepted bool
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	if l.accepted || l.c == nil {
		return nil, net.ErrClosed
	}
	l.accepted = true
	return l.c, nil
}

func (l *oneConnListener) Close() error   { return nil }
func (l *oneConnListener) Addr() net.Addr { return l.addr }

package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicelb/sluice/proxy/internal/deadline"

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
// TLS listeners always use HTTPServer.
func (s *Server) NewFront(kind string, o FrontOptions) (Front, error) {
	switch kind {
	case "", FrontStd:
		return s.HTTPServer(o)
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
// limit, so every client connection holds MaxHeaderBytes + 4 KiB (68 KiB by
// default) for its lifetime, where net/http starts at 4 KiB.
type FastFront struct {
	s    *Server
	fs   *fasthttp.Server
	std  *http.Server // serves connections handed over for an Upgrade
	hook func(net.Conn, http.ConnState)

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// FastHTTPServer returns the fasthttp front with the limits of o (the same
// defaults as HTTPServer). Certificates are refused: TLS stays on net/http.
func (s *Server) FastHTTPServer(o FrontOptions) (*FastFront, error) {
	if len(o.Certificates) > 0 {
		return nil, errors.New("server: the fasthttp front serves cleartext HTTP/1.1 only; TLS listeners use the std front")
	}
	if !s.fast {
		// ReverseProxy writes every body through Write: the front would
		// buffer whole answers (no streaming).
		return nil, fmt.Errorf("server: the fasthttp front needs the %q upstream client", UpstreamFast)
	}
	std, err := s.HTTPServer(o) // applies the defaults to o's copy in std
	if err != nil {
		return nil, err
	}
	std.ConnState = o.ConnState
	f := &FastFront{s: s, std: std, hook: o.ConnState, conns: make(map[net.Conn]struct{})}
	readTimeout := std.ReadHeaderTimeout
	f.fs = &fasthttp.Server{
		Handler:      f.serve,
		ErrorHandler: f.onError,
		HeaderReceived: func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
			if h.ContentLength() == 0 {
				return fasthttp.RequestConfig{} // nothing more to read
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
		CloseOnShutdown:               true,
		SecureErrorLogMessage:         true,
		Logger:                        discardLogger{},
		ConnState:                     f.connState,
	}
	return f, nil
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

// Serve accepts connections on l until Shutdown or Close.
func (f *FastFront) Serve(l net.Listener) error { return f.fs.Serve(addrListener{l}) }

// addrListener wraps each client connection in an addrConn.
type addrListener struct{ net.Listener }

func (l addrListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &addrConn{Conn: c}, nil
}

// addrConn formats the remote address once per connection, not per
// request, and moves its deadlines only when they really move
// (deadline.Skip): fasthttp and the handler set them at every request.
type addrConn struct {
	net.Conn
	remote   string // set on first use by the connection's goroutine
	rdl, wdl time.Time
}

func (c *addrConn) SetReadDeadline(t time.Time) error {
	if deadline.Skip(c.rdl, t) {
		return nil
	}
	c.rdl = t
	return c.Conn.SetReadDeadline(t)
}

func (c *addrConn) SetWriteDeadline(t time.Time) error {
	if deadline.Skip(c.wdl, t) {
		return nil
	}
	c.wdl = t
	return c.Conn.SetWriteDeadline(t)
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
	}
	return c.remote
}

// Shutdown stops accepting, closes idle connections and waits for busy ones
// (and connections handed over for an Upgrade) until ctx is done.
func (f *FastFront) Shutdown(ctx context.Context) error {
	err := f.fs.ShutdownWithContext(ctx)
	if serr := f.std.Shutdown(ctx); err == nil {
		err = serr
	}
	return err
}

// Close stops accepting and closes every connection now.
func (f *FastFront) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = f.fs.ShutdownWithContext(ctx)
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	return f.std.Close()
}

func (f *FastFront) connState(c net.Conn, st fasthttp.ConnState) {
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

// serve is the fasthttp handler.
func (f *FastFront) serve(ctx *fasthttp.RequestCtx) {
	if up := ctx.Request.Header.Peek("Upgrade"); len(up) > 0 && !isH2CUpgrade(http.Header{"Upgrade": {string(up)}}) {
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
type handedConn struct {
	net.Conn
	r    io.Reader
	once sync.Once
	done chan struct{}
}

func (c *handedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *handedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.done) })
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

var adapters = sync.Pool{New: func() any {
	return &fastAdapter{h: make(http.Header), in: make(http.Header)}
}}

// fastAdapter presents one fasthttp request to Server.ServeHTTP as an
// *http.Request and an http.ResponseWriter. It is pooled; nothing in it may
// outlive the request (strings are copies, never views of fasthttp buffers).
type fastAdapter struct {
	ctx    *fasthttp.RequestCtx
	req    http.Request
	url    url.URL
	in     http.Header // request header
	h      http.Header // response header
	status int
	wrote  bool
	handed bool // the body was handed to fasthttp: release on its Close
	body   bodyReader
}

func (a *fastAdapter) release() {
	a.ctx = nil
	a.req = http.Request{}
	a.body = bodyReader{}
	clear(a.in)
	clear(a.h)
	a.status, a.wrote, a.handed = 0, false, false
	adapters.Put(a)
}

// reset builds the *http.Request of ctx's request as net/http would.
func (a *fastAdapter) reset(ctx *fasthttp.RequestCtx) error {
	a.ctx = ctx
	rh := &ctx.Request.Header
	r := &a.req
	r.Method = internMethod(rh.Method())
	r.RequestURI = string(rh.RequestURI())
	if path, query, ok := plainTarget(r.RequestURI); ok {
		a.url = url.URL{Path: path, RawQuery: query}
	} else {
		u, err := url.ParseRequestURI(r.RequestURI)
		if err != nil {
			return fmt.Errorf("request target %q: %w", r.RequestURI, err)
		}
		a.url = *u
	}
	u := &a.url
	r.URL = u
	r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.1", 1, 1
	if !rh.IsHTTP11() {
		r.Proto, r.ProtoMinor = "HTTP/1.0", 0
	}
	chunked := rh.ContentLength() == -1
	hosts := 0
	for k, v := range rh.All() {
		key := internKey(k)
		switch key {
		case "Host":
			hosts++
			continue
		case "Transfer-Encoding":
			continue
		case "Content-Length":
			if chunked {
				continue
			}
		}
		a.in[key] = append(a.in[key], string(v))
	}
	if rh.ConnectionClose() && len(a.in["Connection"]) == 0 {
		a.in["Connection"] = []string{"close"}
		r.Close = true
	}
	r.Header = a.in
	if u.Host != "" {
		r.Host = u.Host
	} else {
		r.Host = string(rh.Host())
	}
	if r.ProtoMinor == 1 && hosts == 0 && u.Host == "" {
		return errors.New("missing required Host header")
	}
	switch n := rh.ContentLength(); {
	case chunked:
		r.ContentLength = -1
		r.TransferEncoding = []string{"chunked"}
		a.body = bodyReader{r: ctx.RequestBodyStream()}
		r.Body = &a.body
	case n > 0:
		r.ContentLength = int64(n)
		a.body = bodyReader{r: ctx.RequestBodyStream()}
		if a.body.r == nil {
			a.body.r = bytes.NewReader(ctx.Request.Body())
		}
		r.Body = &a.body
	default:
		r.Body = http.NoBody
	}
	if yc, ok := ctx.Conn().(*addrConn); ok {
		r.RemoteAddr = yc.remoteAddr() // formatted once per connection
	} else {
		r.RemoteAddr = ctx.RemoteAddr().String()
	}
	return nil
}

// plainTarget splits an origin-form request target made only of characters
// that url.ParseRequestURI neither unescapes nor rejects ("/a/b?x=1"):
// for those its answer is URL{Path, RawQuery}, without the parse. Any other
// target goes through url.ParseRequestURI.
func plainTarget(t string) (path, query string, ok bool) {
	if t == "" || t[0] != '/' {
		return "", "", false
	}
	q := len(t)
	for i := 0; i < len(t); i++ {
		c := t[i]
		if c == '?' && q == len(t) {
			q = i
			continue
		}
		if !plainByte[c] {
			return "", "", false
		}
	}
	switch q {
	case len(t):
		return t, "", true
	case len(t) - 1: // "/p?": an empty query that URL.ForceQuery keeps
		return "", "", false
	}
	return t[:q], t[q+1:], true
}

// plainByte: the characters url's path escaping leaves as they are
// (unreserved ones and "$&+,;=:@/"): for them Path is the target's path
// and RawPath stays empty.
var plainByte = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "-._~$&+,;=:@/" {
		t[c] = true
	}
	return t
}()

// bodyReader is the request body: fasthttp's stream, closed by the server.
type bodyReader struct{ r io.Reader }

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.r == nil {
		return 0, io.EOF
	}
	return b.r.Read(p)
}

func (b *bodyReader) Close() error { return nil }

// Header is the response header, sent at WriteHeader.
func (a *fastAdapter) Header() http.Header { return a.h }

// WriteHeader copies the status and header into the fasthttp response.
func (a *fastAdapter) WriteHeader(code int) {
	if a.wrote || code < 200 {
		return
	}
	a.wrote, a.status = true, code
	rh := &a.ctx.Response.Header
	a.ctx.SetStatusCode(code)
	for k, vv := range a.h {
		switch k {
		case "Trailer":
			// Announced trailers: fasthttp sends them after a chunked body
			// (values set by setTrailers once the backend's body ended).
			for _, v := range vv {
				for _, name := range strings.Split(v, ",") {
					if name = strings.TrimSpace(name); name != "" {
						_ = rh.AddTrailer(name) // forbidden names are dropped
					}
				}
			}
			continue
		case "Transfer-Encoding", "Content-Length":
			// fasthttp frames the body itself (Content-Length from the
			// buffered body or StreamBody's length, chunked otherwise).
			continue
		case "Connection":
			if hasCloseToken(vv) {
				a.ctx.SetConnectionClose()
			}
			continue
		}
		if len(k) > len(http.TrailerPrefix) && k[:len(http.TrailerPrefix)] == http.TrailerPrefix {
			continue
		}
		for _, v := range vv {
			rh.Add(k, v)
		}
	}
	if a.req.Method == http.MethodHead {
		// No body follows; announce the backend's length as net/http does.
		if cl := a.h["Content-Length"]; len(cl) == 1 {
			if n, err := strconv.Atoi(cl[0]); err == nil && n >= 0 {
				a.ctx.Response.SkipBody = true
				rh.SetContentLength(n)
			}
		}
	}
}

func hasCloseToken(vv []string) bool {
	for _, v := range vv {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), "close") {
				return true
			}
		}
	}
	return false
}

// setTrailers gives the backend's trailers to fasthttp, which writes the
// announced ones after the last chunk (handedBody calls it at EOF).
func (a *fastAdapter) setTrailers(tr http.Header) {
	for k, vv := range tr {
		for i, v := range vv {
			if i == 0 {
				a.ctx.Response.Header.Set(k, v)
			} else {
				a.ctx.Response.Header.Add(k, v)
			}
		}
	}
}

// Write appends to the buffered response body.
func (a *fastAdapter) Write(p []byte) (int, error) {
	if !a.wrote {
		a.WriteHeader(http.StatusOK)
	}
	if a.req.Method == http.MethodHead {
		return len(p), nil
	}
	a.ctx.Response.AppendBody(p)
	return len(p), nil
}

// Flush is a no-op: buffered bodies are written when the handler returns,
// unsized ones are streamed (and flushed per chunk) by fasthttp.
func (a *fastAdapter) Flush() {}

// SetReadDeadline and SetWriteDeadline serve http.ResponseController.
func (a *fastAdapter) SetReadDeadline(t time.Time) error  { return a.ctx.SetReadDeadline(t) }
func (a *fastAdapter) SetWriteDeadline(t time.Time) error { return a.ctx.SetWriteDeadline(t) }

// Handoff takes bodies that are unsized, over handoffMax or not all in
// memory yet; the header of one not in memory is flushed at once.
func (a *fastAdapter) Handoff(contentLength int64, ready bool) bool {
	if a.req.Method == http.MethodHead || a.status == http.StatusNoContent || a.status == http.StatusNotModified {
		return false
	}
	if !ready {
		a.ctx.Response.ImmediateHeaderFlush = true
		return true
	}
	return contentLength < 0 || contentLength > handoffMax
}

// StreamBody lets fasthttp copy body after the handler returned (chunked
// when the length is unknown). A read error makes fasthttp close the
// connection before the body is complete.
func (a *fastAdapter) StreamBody(body io.ReadCloser, contentLength int64) {
	a.handed = true
	n := int(contentLength)
	if contentLength < 0 {
		n = -1
	}
	a.ctx.Response.SetBodyStream(&releasingBody{ReadCloser: body, a: a}, n)
}

// releasingBody returns the adapter to its pool once fasthttp closed the
// handed-off body.
type releasingBody struct {
	io.ReadCloser
	a    *fastAdapter
	once sync.Once
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.a.release)
	return err
}

// abort closes the client connection without an answer (or after a partial
// one): a truncated response never looks complete.
func (a *fastAdapter) abort() {
	a.ctx.Response.Reset()
	a.ctx.HijackSetNoResponse(true)
	a.ctx.Hijack(func(net.Conn) {})
}

func internMethod(b []byte) string {
	switch string(b) {
	case http.MethodGet:
		return http.MethodGet
	case http.MethodHead:
		return http.MethodHead
	case http.MethodPost:
		return http.MethodPost
	case http.MethodPut:
		return http.MethodPut
	case http.MethodDelete:
		return http.MethodDelete
	case http.MethodOptions:
		return http.MethodOptions
	case http.MethodPatch:
		return http.MethodPatch
	}
	return string(b)
}

// commonRequestKeys interns frequent request header names (canonical form).
var commonRequestKeys = func() map[string]string {
	m := make(map[string]string)
	for _, k := range []string{"Host", "User-Agent", "Accept", "Accept-Encoding", "Accept-Language",
		"Connection", "Content-Length", "Content-Type", "Cookie", "Authorization", "Cache-Control",
		"Referer", "Origin", "Transfer-Encoding", "Upgrade", "X-Forwarded-For", "X-Forwarded-Proto",
		"X-Forwarded-Host", "X-Real-Ip", "X-Request-Id", "Traceparent", "Tracestate", "Te", "Expect",
		"If-None-Match", "If-Modified-Since", "Pragma", "Range", "Forwarded", "Keep-Alive"} {
		m[k] = k
	}
	return m
}()

func internKey(b []byte) string {
	if k, ok := commonRequestKeys[string(b)]; ok {
		return k
	}
	return http.CanonicalHeaderKey(string(b))
}

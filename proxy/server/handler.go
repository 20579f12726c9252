package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/route"
	"github.com/sluicelb/sluice/proxy/internal/balance"
	"github.com/sluicelb/sluice/proxy/internal/forward"
)

// ReasonHeader names the header on every response the proxy generates; its
// value is the error code also written to the access log.
const ReasonHeader = "X-Sluice-Reason"

// Error codes of generated answers (ReasonHeader values and access-log codes).
const (
	CodeNotReady       = "not-ready"             // 503: no snapshot applied yet
	CodeNoRoute        = "no-route"              // 404: no product/rule for the request
	CodeNoCluster      = "no-cluster"            // 503: the rule names a cluster the table lacks
	CodeBlackhole      = "blackhole"             // policy.blackhole.status (503): dropped by the row's share
	CodeNoAvailable    = "no-available-instance" // 503: nothing can take the request
	CodeRetryBudget    = "retry-budget"          // 503: the proxy-wide retry budget refused a retry
	CodeLocalLimit     = "local-limit"           // 503: backend connection cap reached for the queue timeout
	CodeConnect        = "connect-failed"        // 502: could not connect
	CodeUpstream       = "upstream-error"        // 502: the backend broke the exchange
	CodeTimeout        = "upstream-timeout"      // 504: per-try or response-header timeout
	CodeRequestTimeout = "request-timeout"       // 504: the overall request deadline passed
	CodeBodyTooLarge   = "body-too-large"        // 413: request body over the limit
	CodeClientClosed   = "client-closed"         // 499 (log only): the client went away
	CodeAborted        = "response-aborted"      // the backend failed after headers were sent; connection aborted
)

// StatusClientClosed is logged (never sent) when the client went away.
const StatusClientClosed = 499

type stateKey struct{}

// reqState is one request's journey. It belongs to the request's goroutine;
// fields touched by transport goroutines are atomic.
type reqState struct {
	s         *Server
	rt        *runtime
	c         *clusterRT
	res       route.Result
	sel       balance.Selection // started once the cluster is known
	stripe    uint32            // the client connection's smooth-WRR cursor (see connStripe)
	clientIP  netip.Addr
	peer      netip.Addr
	peerTrust bool
	peerText  string          // peer.String() when known without formatting
	ctx       context.Context // carries the server span
	span      trace.Span      // nil when untraced or left unsampled by the head (startTrace)
	sc        trace.SpanContext
	// traceparent of a request the head left unsampled, made at its first
	// attempt; on the fast path its text is tp
	traceparent string
	tp          [traceparentLen]byte
	buf         []byte      // replay buffer (nil: no body or streamed)
	stream      *streamBody // non-nil when the body is streamed
	replayable  bool
	start       time.Time

	// decision, for the log and the span
	subcluster, instance, algorithm, reason string
	attempts                                int
	status                                  int
	code                                    string
	bytesOut                                int64         // response body bytes relayed
	upstreamTime                            time.Duration // attempt start to the relayed answer's header
	upstreamConnect                         time.Duration // its connect time (0: reused connection, or the std path)

	// the first pick's sub-cluster and its metrics (next): finish looks
	// them up again only for another sub-cluster (or none found)
	subName string
	subM    *subMetrics

	// ServeHTTP changed r.Header (an h2c offer dropped): a front's copy
	// of its fields no longer is it (requestFields)
	headerEdited bool

	recording bool // the server span is sampled: child spans and attributes are worth building
	reuse     bool // served by the fast path: end() returns the state to Server.reqPool

	// end of the request: the request-deadline cancel, and whether the
	// response body was handed to the front (bodyHandoff) that then ends it
	r         *http.Request
	w         http.ResponseWriter // the std path's writer (flushingBody)
	cancel    context.CancelFunc
	handedOff bool

	// fast path (fast.go): reused across attempts, allocated with the state
	fwd   forward.Request
	extra [5]forward.HeaderField
	rep   reply
	// the router's view of the request: in the state, not on the stack,
	// where Match's interface calls made it escape (one allocation per
	// request)
	route route.Request
}

// connStripe derives a stripe from the client connection's address and
// port: a keep-alive connection keeps one smooth-WRR cursor (its requests
// see nginx's exact sequence) and concurrent connections spread over the
// cursors instead of contending for one. The port is scrambled first:
// Linux hands out ephemeral ports of one parity.
func connStripe(ap netip.AddrPort) uint32 {
	a := ap.Addr().As16()
	x := uint32(ap.Port())<<16 ^ uint32(a[15]) ^ uint32(a[14])<<8
	return (x * 0x9E3779B1) >> 16
}

// remoteAddrPort is netip.ParseAddrPort(r.RemoteAddr), ok when it parses.
// The fasthttp front parsed its connection's address once (addrConn.peer).
func remoteAddrPort(w http.ResponseWriter, r *http.Request) (netip.AddrPort, bool) {
	if a, ok := w.(*fastAdapter); ok && r == &a.req && a.conn != nil && r.RemoteAddr == a.conn.remote {
		return a.conn.peer, a.conn.peerOK
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	return ap, err == nil
}

// upgradeField is r.Header["Upgrade"]. The fasthttp front's adapter knows
// a request without one (reset read every field), which then needs no map
// access.
func upgradeField(w http.ResponseWriter, r *http.Request) []string {
	if a, ok := w.(*fastAdapter); ok && r == &a.req && !a.upgrade {
		return nil
	}
	return r.Header["Upgrade"]
}

// ServeHTTP handles one client request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	st := s.newState()
	st.s, st.start, st.r = s, s.now(), r
	rt := s.rt.Load() // the one load of this request (I2)
	st.rt = rt
	if ap, ok := remoteAddrPort(w, r); ok {
		st.peer = ap.Addr().Unmap()
		st.stripe = connStripe(ap)
		if a := ap.Addr(); !a.Is4In6() && a.Zone() == "" {
			// The peer's text is RemoteAddr's host part: no formatting
			// (and no allocation) for X-Forwarded-For.
			host := r.RemoteAddr[:strings.LastIndexByte(r.RemoteAddr, ':')]
			st.peerText = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		}
	}
	var trustedSet []netip.Prefix
	if rt != nil {
		trustedSet = rt.trusted
	} else {
		trustedSet = s.trusted
	}
	st.peerTrust = trusted(st.peer, trustedSet)
	// ClientIP's answer for an untrusted peer, without its X-Forwarded-For
	// lookup (a map access per request) and its second trust check.
	st.clientIP = st.peer
	if st.peerTrust {
		st.clientIP = ClientIP(st.peer, r.Header["X-Forwarded-For"], trustedSet)
	}

	st.ctx = r.Context()
	if s.tracing {
		st.startTrace(r)
	}
	defer func() {
		if p := recover(); p != nil {
			switch {
			case st.code != "":
			case p == http.ErrAbortHandler && r.Context().Err() != nil:
				// ReverseProxy's copy failed and net/http had seen the
				// client go: the client left (std path).
				st.clientLeft()
			default:
				st.code = CodeAborted
			}
			st.end()
			panic(p)
		}
		if !st.handedOff {
			st.end()
		}
	}()

	if rt == nil {
		st.generated(w, &genError{status: http.StatusServiceUnavailable, code: CodeNotReady})
		return
	}
	// An h2c upgrade is never performed: the request is served as plain
	// HTTP/1.1 and the backend never sees the upgrade offer. Nothing below
	// changes the Upgrade field: one lookup serves every check of it.
	upgrade := upgradeField(w, r)
	if h2cUpgrade(upgrade) {
		r.Header.Del("Upgrade")
		r.Header.Del("Http2-Settings")
		r.Header.Del("Connection")
		upgrade = nil
		st.headerEdited = true
	}
	st.route.Reset(r, st.clientIP, r.TLS != nil)
	res, ok := rt.router.Match(&st.route)
	if !ok {
		s.metrics.unrouted.WithLabelValues(CodeNoRoute).Inc()
		st.generated(w, &genError{status: http.StatusNotFound, code: CodeNoRoute})
		return
	}
	st.res = res
	c := rt.clusters[res.Cluster]
	if c == nil {
		s.metrics.unrouted.WithLabelValues(CodeNoCluster).Inc()
		st.generated(w, &genError{status: http.StatusServiceUnavailable, code: CodeNoCluster})
		return
	}
	st.c = c
	c.stats.requests.Add(1)
	p := &c.policy

	if s.maxBody > 0 {
		if r.ContentLength > s.maxBody {
			st.generated(w, &genError{status: http.StatusRequestEntityTooLarge, code: CodeBodyTooLarge})
			// The body is not wanted: end the connection once the answer is
			// out, instead of net/http draining up to 256 KiB of it first
			// from a client that may never send it (the fasthttp front reads
			// none: overBodyLimit).
			_ = http.NewResponseController(w).SetReadDeadline(time.Now())
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(w, r.Body, s.maxBody)
		}
	}
	rc := http.NewResponseController(w)
	// A request without a body has been read entirely: no read deadline to
	// set (it costs a timer update per request).
	if d := p.Timeouts.ReadClient.D(); d > 0 && hasBody(r) {
		_ = rc.SetReadDeadline(st.start.Add(d))
	}
	if d := p.Timeouts.WriteClient.D(); d > 0 && len(upgrade) == 0 {
		_ = rc.SetWriteDeadline(st.start.Add(d))
	}
	ctx := st.ctx
	if d := p.Timeouts.Request.D(); d > 0 {
		ctx, st.cancel = context.WithTimeout(ctx, d)
	}
	if err := st.prepareBody(r); err != nil {
		st.generated(w, classifyBodyError(r.Context().Err() != nil, err))
		return
	}
	c.bc.Start(&st.sel, r, st.clientIP, st.stripe)
	if s.fast && len(upgrade) == 0 {
		// Nothing outlives the fast path's end(): the state is reused.
		st.reuse = true
		st.serveFast(ctx, w, r)
		return
	}
	st.w = w
	s.rp.ServeHTTP(w, r.WithContext(context.WithValue(ctx, stateKey{}, st)))
}

// prepareBody decides whether the request is replayable and buffers its body
// when it fits policy.retry.max_replay_body.
func (st *reqState) prepareBody(r *http.Request) error {
	p := &st.c.policy.Retry
	methodOK := p.NonIdempotent || idempotent(r.Method)
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		r.Body = http.NoBody
		st.replayable = methodOK
		return nil
	}
	limit := p.MaxReplayBody
	if !methodOK || limit <= 0 || r.ContentLength > limit {
		st.stream = &streamBody{rc: r.Body}
		return nil
	}
	if r.ContentLength > 0 {
		st.buf = make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, st.buf); err != nil {
			return err
		}
		st.replayable = true
		return nil
	}
	// Unknown length (chunked): buffer up to the limit, stream beyond it.
	var b bytes.Buffer
	n, err := io.Copy(&b, io.LimitReader(r.Body, limit+1))
	if err != nil {
		return err
	}
	if n <= limit {
		st.buf = b.Bytes()
		if st.buf == nil {
			st.buf = []byte{}
		}
		st.replayable = true
		return nil
	}
	st.stream = &streamBody{rc: struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b.Bytes()), r.Body), r.Body}}
	return nil
}

// classifyBodyError names the failed read of a request body. A client that
// is gone (its connection lost, its HTTP/2 stream reset: the request's
// context is done) is answered nothing (logged 499): nobody would read it.
// A client that stopped sending gets nginx's answers: 408 after the read
// timeout, 400 when the body ended early; a malformed body (chunked
// encoding) is a bad request.
func classifyBodyError(gone bool, err error) *genError {
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		return &genError{status: http.StatusRequestEntityTooLarge, code: CodeBodyTooLarge, err: err}
	case gone:
		return &genError{status: StatusClientClosed, code: CodeClientClosed, err: err}
	case errors.As(err, &ne) && ne.Timeout():
		return &genError{status: http.StatusRequestTimeout, code: CodeClientTimeout, err: err}
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return &genError{status: http.StatusBadRequest, code: CodeClientClosed, err: err}
	default:
		return &genError{status: http.StatusBadRequest, code: CodeBadRequest, err: err}
	}
}

func idempotent(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// peerString is the peer address as text.
func (st *reqState) peerString() string {
	if st.peerText != "" {
		return st.peerText
	}
	return st.peer.String()
}

func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

// h2cUpgrade reports whether the Upgrade field values vv offer h2c.
func h2cUpgrade(vv []string) bool {
	for _, v := range vv {
		if h2cOffer(v) {
			return true
		}
	}
	return false
}

// h2cOffer reports whether one Upgrade field value lists h2c.
func h2cOffer(v string) bool {
	for _, p := range strings.Split(v, ",") {
		if strings.EqualFold(strings.TrimSpace(p), "h2c") {
			return true
		}
	}
	return false
}

// streamBody is a non-replayable request body shared by the attempts of one
// request. Close is a no-op so that a transport failing to connect (which
// closes the body it was given) leaves it intact for the next attempt; read
// counts whether any byte left for a backend.
type streamBody struct {
	rc   io.ReadCloser
	read atomic.Int64
}

func (b *streamBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.read.Add(int64(n))
	return n, err
}

func (b *streamBody) Close() error { return nil }

// errBodyTaken is again's answer once a byte of the body was read.
var errBodyTaken = errors.New("the streamed request body was read: it cannot be given again")

// again is the request's GetBody for the std upstream client (forward's
// Upstream.RoundTrip, after a reused connection found closed before a byte
// was written): the body itself while none of it was read, else
// errBodyTaken.
func (b *streamBody) again() (io.ReadCloser, error) {
	if b.read.Load() > 0 {
		return nil, errBodyTaken
	}
	return b, nil
}

// genError is an answer the proxy generates itself.
type genError struct {
	status     int
	code       string
	retryAfter time.Duration
	err        error
}

func (e *genError) Error() string {
	if e.err != nil {
		return e.code + ": " + e.err.Error()
	}
	return e.code
}

func (e *genError) Unwrap() error { return e.err }

// generated writes a generated answer.
func (st *reqState) generated(w http.ResponseWriter, e *genError) {
	st.status, st.code = e.status, e.code
	if st.c != nil {
		if e.status >= 500 && e.code != CodeBlackhole {
			st.c.stats.errors.Add(1)
		}
		st.s.metrics.generated.WithLabelValues(st.c.name, e.code).Inc()
	}
	if e.status == StatusClientClosed {
		return
	}
	h := w.Header()
	h.Set(ReasonHeader, e.code)
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	if e.retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int((e.retryAfter+time.Second-1)/time.Second)))
	}
	// An HTTP/1.1 connection whose request body was not read whole is of no
	// further use. An HTTP/2 stream ends alone (the server drains it, then
	// RST_STREAM(NO_ERROR): h2drain.go), and the connection's other streams
	// go on, as with nginx and Envoy: "Connection: close" would GOAWAY them.
	if (e.status == http.StatusRequestEntityTooLarge || e.status == http.StatusBadRequest || e.status == http.StatusRequestTimeout) &&
		(st.r == nil || st.r.ProtoMajor < 2) {
		h.Set("Connection", "close")
	}
	w.WriteHeader(e.status)
	_, _ = io.WriteString(w, http.StatusText(e.status)+" ("+e.code+")\n")
}

// end releases what the request held (its selection, its deadline) and
// finishes it. It runs when ServeHTTP returns, or, when the response body was
// handed to the front, once the front is done with it.
func (st *reqState) end() {
	st.sel.Release()
	if st.cancel != nil {
		st.cancel()
	}
	st.finish(st.r)
	if st.reuse {
		st.s.reqPool.Put(st)
	}
}

// newState returns a zeroed request state, reused when one is free: it
// is the largest allocation of a request (about 1 KiB).
func (s *Server) newState() *reqState {
	if v := s.reqPool.Get(); v != nil {
		st := v.(*reqState)
		*st = reqState{}
		return st
	}
	return new(reqState)
}

// finish writes the access log line, the metrics and ends the server span.
func (st *reqState) finish(r *http.Request) {
	s := st.s
	now := s.now() // the line's time too: one clock reading
	took := now.Sub(st.start)
	if st.c != nil {
		sub := st.subcluster
		var answers *atomic.Uint64
		m := st.subM
		if m == nil || sub != st.subName {
			m = st.c.subs[sub]
		}
		if m != nil {
			i := codeIndex(st.status)
			m.codes[i].Inc()
			m.durations[i].Observe(took.Seconds())
			answers = m.answers
		} else {
			class := classOf(st.status)
			s.metrics.requests.WithLabelValues(st.c.name, "", class).Inc()
			s.metrics.duration.WithLabelValues(st.c.name, "", class).Observe(took.Seconds())
		}
		st.c.stats.traffic.record(answers, st.status,
			st.status >= 500 && st.code != "" && st.code != CodeBlackhole, took)
		if st.status >= 500 && st.code == "" {
			st.c.stats.errors.Add(1)
		}
	}
	if st.recording {
		st.span.SetAttributes(st.attrs()...)
		st.span.SetAttributes(attribute.Int("http.response.status_code", st.status))
		if st.code != "" {
			st.span.SetAttributes(attribute.String("sluice.error_code", st.code))
		}
		if st.status >= 500 || st.code == CodeAborted {
			st.span.SetStatus(codes.Error, st.code)
		}
	}
	if st.span != nil {
		st.span.End()
	}
	switch {
	case s.accessW != nil:
		s.accessW.write(st, r, now, took)
	case s.access != nil && s.access.Handler().Enabled(context.Background(), slog.LevelInfo):
		_ = s.access.Handler().Handle(context.Background(), st.accessRecord(r, now, took))
	}
}

// bytesIn is the request body bytes read from the client.
func (st *reqState) bytesIn() int64 {
	switch {
	case st.buf != nil:
		return int64(len(st.buf))
	case st.stream != nil:
		return st.stream.read.Load()
	}
	return 0
}

// traceID is the request's trace id, "" when it is not traced.
func (st *reqState) traceID() string {
	if st.sc.HasTraceID() {
		return st.sc.TraceID().String()
	}
	return ""
}

// clientLeft records that the client went away before the answer ended:
// logged as 499 client-closed (nginx's convention), whatever the backend
// answered.
func (st *reqState) clientLeft() {
	st.status, st.code = StatusClientClosed, CodeClientClosed
}

func classOf(status int) string {
	if i := codeIndex(status); i > 0 {
		return strconv.Itoa(i) + "xx"
	}
	return "none"
}

func (st *reqState) attrs() []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.Int64("sluice.snapshot.version", int64(st.version())),
		attribute.String("sluice.route", st.res.Product+"/"+st.res.RuleName),
		attribute.String("sluice.cluster", st.res.Cluster),
		attribute.String("sluice.subcluster", st.subcluster),
		attribute.String("sluice.instance", st.instance),
		attribute.String("sluice.algorithm", st.algorithm),
		attribute.String("sluice.pick.reason", st.reason),
		attribute.Int("sluice.attempt", st.attempts),
	}
}

// blackholeError is the answer to a request drawn into GSLB_BLACKHOLE.
func blackholeError(p *config.Policy) *genError {
	status := p.Blackhole.Status
	if status == 0 {
		status = http.StatusServiceUnavailable
	}
	return &genError{status: status, code: CodeBlackhole, retryAfter: p.Blackhole.RetryAfter.D(), err: balance.ErrBlackhole}
}

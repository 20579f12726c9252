package server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicelb/sluice/proxy/internal/balance"
	"github.com/sluicelb/sluice/proxy/internal/bufpool"
	"github.com/sluicelb/sluice/proxy/internal/forward"
)

// Upstream clients (Options.UpstreamClient).
const (
	// UpstreamFast forwards plain requests with forward's purpose-built
	// HTTP/1.1 client (Upstream.Do) and writes the answer straight to the
	// client; upgrades still take the std path.
	UpstreamFast = "fast"
	// UpstreamStd forwards everything through httputil.ReverseProxy and
	// http.Transport.
	UpstreamStd = "std"
)

// reply is the backend's answer to one attempt on the fast path, relayed or
// held (a retry-on status that may still be relayed if no retry follows).
type reply struct {
	res    forward.Response
	pick   balance.Pick
	result balance.Result
	cancel context.CancelFunc
	span   trace.Span
	done   bool
}

// finish closes the body and reports the attempt's outcome, once.
func (rp *reply) finish() {
	if rp.done {
		return
	}
	rp.done = true
	rp.res.Body.Close()
	rp.pick.Done(rp.result)
	rp.cancel()
	if rp.span != nil {
		if rp.result.Err != nil {
			rp.span.SetStatus(codes.Error, rp.result.Err.Error())
		}
		rp.span.End()
	}
}

// forwardedSkip are client headers the fast path never forwards (the
// X-Forwarded-* ones are replaced through Request.Extra).
var forwardedSkip = []string{"Forwarded"}

// serveFast runs the attempts of one request over forward's HTTP/1.1 client
// and relays the answer: the same loop as roundTrip (attemptLoop) without
// ReverseProxy's request cloning and Transport's goroutine hand-offs.
func (st *reqState) serveFast(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	rep, ge := attemptLoop[*reply](st, fastAttempter{st: st, ctx: ctx, fr: st.outbound(w, r), h: w.Header()})
	if ge != nil {
		st.generated(w, ge)
		return
	}
	st.relay(w, rep)
}

// fastAttempter is one attempt over forward's HTTP/1.1 client. The answer's
// header stays in its reply (forward.Response.Header) until relay writes it;
// h is the client's response header (a sticky cookie goes there).
type fastAttempter struct {
	st  *reqState
	ctx context.Context
	fr  *forward.Request
	h   http.Header
}

func (a fastAttempter) attempt(pick balance.Pick) (*reply, bool, *failure) {
	rep, f := a.st.attemptFast(a.ctx, a.fr, pick, a.h)
	switch {
	case f == nil:
		return rep, false, nil
	case f.kind == failStatus:
		return rep, true, f
	}
	clear(a.h)
	return nil, false, f
}

func (a fastAttempter) release(rep *reply) {
	rep.finish()
	clear(a.h)
}

// outbound fills the request every attempt sends: the client's request with
// the forwarding headers of rewrite.
func (st *reqState) outbound(w http.ResponseWriter, r *http.Request) *forward.Request {
	fr := &st.fwd
	fr.Method, fr.URI, fr.Host, fr.Header, fr.Skip = r.Method, requestURI(r), r.Host, r.Header, forwardedSkip
	fr.Fields = st.requestFields(w, r)
	peer := st.peerString()
	// A client's X-Forwarded-* count only from a trusted peer: looked up
	// only then (three map accesses a request otherwise).
	xff, xfp, xfh := peer, "http", r.Host
	if r.TLS != nil {
		xfp = "https"
	}
	if st.peerTrust {
		if prior := r.Header["X-Forwarded-For"]; len(prior) > 0 {
			xff = strings.Join(prior, ", ") + ", " + peer
		}
		if prior := r.Header["X-Forwarded-Proto"]; len(prior) > 0 {
			xfp = prior[0]
		}
		if prior := r.Header["X-Forwarded-Host"]; len(prior) > 0 {
			xfh = prior[0]
		}
	}
	fr.Extra = append(st.extra[:0],
		forward.HeaderField{Name: "X-Forwarded-For", Value: xff},
		forward.HeaderField{Name: "X-Forwarded-Proto", Value: xfp},
		forward.HeaderField{Name: "X-Forwarded-Host", Value: xfh})
	switch {
	case st.buf != nil:
		fr.BodyBytes = st.buf
	case st.stream != nil:
		fr.Body, fr.BodyLength = st.stream, r.ContentLength
		if r.ContentLength < 0 {
			fr.BodyLength = -1
			fr.Trailer = func() http.Header { return r.Trailer }
		}
		fr.ExpectContinue = hasExpectContinue(r.Header)
	}
	return fr
}

// requestFields is r.Header field by field in the client's order, when the
// fasthttp front's adapter has them (reset) and ServeHTTP changed nothing
// in r.Header since: forward then writes them without ranging over the map.
// nil otherwise.
func (st *reqState) requestFields(w http.ResponseWriter, r *http.Request) []forward.HeaderField {
	if a, ok := w.(*fastAdapter); ok && r == &a.req && !st.headerEdited {
		return a.hf
	}
	return nil
}

// requestURI is r.URL.RequestURI() without its allocation (the path and
// query joined) when the client's own target is plain (plainTarget) and
// r.URL is still what that target parses to: then the two are the same
// text.
func requestURI(r *http.Request) string {
	u := r.URL
	if path, query, ok := plainTarget(r.RequestURI); ok && u.Path == path && u.RawQuery == query &&
		u.Opaque == "" && u.RawPath == "" && !u.ForceQuery {
		return r.RequestURI
	}
	return u.RequestURI()
}

func hasExpectContinue(h http.Header) bool {
	for _, v := range h["Expect"] {
		if strings.EqualFold(strings.TrimSpace(v), "100-continue") {
			return true
		}
	}
	return false
}

// attemptFast forwards the request to one pick. A sticky cookie goes into h
// (the client's response header); the backend's header stays in the reply.
func (st *reqState) attemptFast(ctx context.Context, fr *forward.Request, pick balance.Pick, h http.Header) (*reply, *failure) {
	p := &st.c.policy
	ep := pick.Endpoint()
	up := st.s.pools.Cached(ep.Slot(), ep.Addr(), p.Pool, p.Timeouts)
	tctx := ctx
	cancel := context.CancelFunc(nop)
	if d := p.Timeouts.PerTry.D(); d > 0 {
		tctx, cancel = context.WithTimeout(ctx, d)
	}
	fr.Extra = fr.Extra[:3]
	var sp trace.Span
	if st.s.tracing {
		sctx := st.ctx
		if st.recording {
			sctx, sp = st.s.tracer.Start(st.ctx, "sluice.forward", trace.WithSpanKind(trace.SpanKindClient),
				trace.WithAttributes(
					attribute.String("sluice.cluster", st.c.name),
					attribute.String("sluice.subcluster", pick.SubCluster()),
					attribute.String("sluice.instance", st.instance),
					attribute.Int("sluice.attempt", pick.Attempt()),
					attribute.String("server.address", st.instance)))
		}
		st.inject(sctx, extraCarrier{fr})
	}
	start := time.Now()
	fr.Start = start
	res, err := up.Do(tctx, fr, nil)
	lat := time.Since(start)
	if err != nil {
		f := st.classify(ctx, tctx, err)
		cancel()
		attemptFailed(pick, sp, err, f, lat)
		return nil, f
	}
	if sp != nil {
		sp.SetAttributes(attribute.Int("http.response.status_code", res.Status))
	}
	if pick.SetCookie() != nil {
		h.Add("Set-Cookie", pick.SetCookie().String())
	}
	st.upstreamTime, st.upstreamConnect = lat, res.Connect
	rep := &st.rep
	*rep = reply{res: res, pick: pick, cancel: cancel, span: sp,
		result: balance.Result{Kind: balance.KindStatus, Status: res.Status, Latency: lat}}
	if st.c.retryOnStatus(res.Status) {
		return rep, &failure{kind: failStatus, status: res.Status, err: errStatus}
	}
	return rep, nil
}

// bodyHandoff is implemented by a front (the fasthttp one) that writes a
// response body itself after the handler returned: relay gives it the body
// when Handoff says so (by the body's length, -1 unknown, and whether all of
// it is in memory already), and the stream's Close ends the request
// (reply.finish, reqState.end). A body not in memory is handed off with its
// header flushed at once.
type bodyHandoff interface {
	Handoff(contentLength int64, ready bool) bool
	StreamBody(body io.ReadCloser, contentLength int64)
}

// AccelBuffering is the response header (nginx's X-Accel-Buffering) by
// which a backend sets the flush policy of one answer: "no" flushes every
// read of the body to the client, "yes" lets the proxy coalesce writes. It
// is never relayed.
const AccelBuffering = "X-Accel-Buffering"

// flushPolicy is how relay flushes a body to the client.
type flushPolicy uint8

const (
	flushIdle   flushPolicy = iota // when the backend has nothing more buffered (the default)
	flushEach                      // after every read (X-Accel-Buffering: no)
	flushBuffer                    // only when the writer's buffer fills (X-Accel-Buffering: yes)
)

// accelPolicy takes X-Accel-Buffering out of the response header h.
func accelPolicy(h http.Header) flushPolicy {
	vv, ok := h[AccelBuffering]
	if !ok {
		return flushIdle
	}
	delete(h, AccelBuffering)
	if len(vv) != 1 {
		return flushIdle
	}
	return accelValue(vv[0])
}

// accelFields takes X-Accel-Buffering out of the backend's fields hdr.
func accelFields(hdr *forward.Fields) flushPolicy {
	i := hdr.Index(AccelBuffering)
	if i < 0 {
		return flushIdle
	}
	_, v := hdr.Field(i)
	p := accelValue(string(v))
	n := hdr.Len()
	if *hdr = hdr.Without(AccelBuffering); n-hdr.Len() != 1 {
		return flushIdle // repeated: as net/http's path, no policy
	}
	return p
}

// accelValue is the flush policy one X-Accel-Buffering value sets.
func accelValue(v string) flushPolicy {
	switch {
	case strings.EqualFold(strings.TrimSpace(v), "no"):
		return flushEach
	case strings.EqualFold(strings.TrimSpace(v), "yes"):
		return flushBuffer
	}
	return flushIdle
}

// upstreamHeader is implemented by a response writer (the fasthttp front's)
// that writes the backend's fields itself at WriteHeader, with no map in
// between. Any other gets them added to its Header().
type upstreamHeader interface {
	setUpstreamHeader(forward.Fields)
}

// relay writes the backend's answer to the client: the header as soon as it
// arrived (flushed unless the whole body came with it), the body as it
// comes. A body that fails after the header was sent aborts the client
// connection (http.ErrAbortHandler), so a truncated answer never looks
// complete.
func (st *reqState) relay(w http.ResponseWriter, rep *reply) {
	st.status = rep.res.Status
	if st.status >= 500 {
		st.c.stats.errors.Add(1)
	}
	policy := accelFields(&rep.res.Header)
	if uh, ok := w.(upstreamHeader); ok {
		uh.setUpstreamHeader(rep.res.Header)
	} else {
		rep.res.Header.AddTo(w.Header())
	}
	body := rep.res.Body
	ready := body.Ready()
	w.WriteHeader(st.status)
	if ho, ok := w.(bodyHandoff); ok && ho.Handoff(rep.res.ContentLength, ready) {
		st.handedOff = true
		ho.StreamBody(&handedBody{st: st, rep: rep, w: w}, rep.res.ContentLength)
		return
	}
	defer rep.finish()
	if p, ok := body.Rest(); ok {
		// All of it came with the header: written from the connection's
		// buffer, no copy buffer, no read.
		if len(p) > 0 {
			if _, werr := w.Write(p); werr != nil {
				st.clientLeft()
				panic(http.ErrAbortHandler) // the client went away mid-answer
			}
			st.bytesOut += int64(len(p))
		}
		return
	}
	fl, _ := w.(http.Flusher)
	if fl == nil {
		policy = flushBuffer
	} else if !ready {
		fl.Flush() // the header now: the body may take its time
	}
	bp := bufpool.Get()
	defer bufpool.Put(bp)
	buf := *bp
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				st.clientLeft()
				panic(http.ErrAbortHandler) // the client went away mid-answer
			}
			st.bytesOut += int64(n)
			if err == nil && (policy == flushEach || (policy == flushIdle && !body.Buffered())) {
				fl.Flush()
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			if st.r.Context().Err() != nil {
				// The client went away (net/http cancelled the request,
				// which interrupted the backend read): neutral for the
				// backend.
				rep.result.Err, rep.result.Kind = err, balance.KindNone
				st.clientLeft()
				panic(http.ErrAbortHandler)
			}
			rep.result.Err, rep.result.Kind = err, balance.KindConnect
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				rep.result.Kind = balance.KindTimeout
			}
			panic(http.ErrAbortHandler)
		}
	}
	if tr := body.Trailer(); len(tr) > 0 {
		h := w.Header()
		for k, vv := range tr {
			h[http.TrailerPrefix+k] = vv
		}
	}
}

// handedBody is a backend body handed to the front. A read error is
// recorded like relay does; the front then aborts the client connection.
// Close (once) copies the trailers, reports the attempt and ends the request.
type handedBody struct {
	st     *reqState
	rep    *reply
	w      http.ResponseWriter
	closed bool
	ended  bool // Read returned an error (io.EOF included)
}

func (b *handedBody) Read(p []byte) (int, error) {
	n, err := b.rep.res.Body.Read(p)
	b.st.bytesOut += int64(n)
	b.ended = b.ended || err != nil
	if err != nil && err != io.EOF && b.rep.result.Err == nil {
		b.rep.result.Err, b.rep.result.Kind = err, balance.KindConnect
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			b.rep.result.Kind = balance.KindTimeout
		}
		b.st.code = CodeAborted
	}
	if err == io.EOF {
		if tr := b.rep.res.Body.Trailer(); len(tr) > 0 {
			if ts, ok := b.w.(interface{ setTrailers(http.Header) }); ok {
				ts.setTrailers(tr)
				return n, err
			}
			h := b.w.Header()
			for k, vv := range tr {
				h[http.TrailerPrefix+k] = vv
			}
		}
	}
	return n, err
}

func (b *handedBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	if !b.ended {
		b.st.clientLeft() // the front stopped writing before the body ended
	}
	b.rep.finish()
	b.st.end()
	return nil
}

// extraCarrier injects trace context into the fast path's extra headers.
type extraCarrier struct{ r *forward.Request }

func (c extraCarrier) Get(key string) string {
	k := traceHeaderKey(key)
	for _, f := range c.r.Extra {
		if f.Name == k {
			return f.Value
		}
	}
	return ""
}

func (c extraCarrier) Set(key, value string) {
	k := traceHeaderKey(key)
	for i, f := range c.r.Extra {
		if f.Name == k {
			c.r.Extra[i].Value = value
			return
		}
	}
	c.r.Extra = append(c.r.Extra, forward.HeaderField{Name: k, Value: value})
}

func (c extraCarrier) Keys() []string {
	out := make([]string, len(c.r.Extra))
	for i, f := range c.r.Extra {
		out[i] = f.Name
	}
	return out
}

// serverSpan are the server span's start options, made once: a variadic
// option built per request is an allocation per request, sampled or not.
var serverSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}

// requestCarrier is propagation.HeaderCarrier over a request's header
// without the allocation of http.CanonicalHeaderKey for the keys that
// propagators ask for in lower case on every request (traceparent,
// tracestate, baggage).
type requestCarrier http.Header

func (c requestCarrier) Get(key string) string {
	if v := c[traceHeaderKey(key)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c requestCarrier) Set(key, value string) { propagation.HeaderCarrier(c).Set(key, value) }

func (c requestCarrier) Keys() []string { return propagation.HeaderCarrier(c).Keys() }

// traceHeaderKey is http.CanonicalHeaderKey(key), without an allocation for
// the W3C trace-context and baggage keys.
func traceHeaderKey(key string) string {
	switch key {
	case "traceparent":
		return "Traceparent"
	case "tracestate":
		return "Tracestate"
	case "baggage":
		return "Baggage"
	}
	return http.CanonicalHeaderKey(key)
}

package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/proxy/internal/balance"
	"github.com/sluicelb/sluice/proxy/internal/forward"
)

// transport is the RoundTripper of the shared ReverseProxy: it runs the
// attempts of one request (pick, forward, decide to retry) and returns the
// response to relay or a *genError. Everything here happens before a response
// byte reaches the client, which is what makes a retry possible at all.
type transport struct{}

func (transport) RoundTrip(out *http.Request) (*http.Response, error) {
	st := out.Context().Value(stateKey{}).(*reqState)
	return st.roundTrip(out)
}

// failure is one failed attempt.
type failure struct {
	kind   failKind
	unsent bool // failStale: no byte of the request reached the backend's socket
	err    error
	status int            // backend status for failStatus
	res    *http.Response // the backend's answer for failStatus (relayed if no retry follows)
}

type failKind uint8

const (
	failDial     failKind = iota + 1 // could not connect: nothing was sent
	failPoolFull                     // local connection cap: nothing was sent
	failTimeout                      // per-try or response-header timeout
	failUpstream                     // reset, EOF, protocol error after sending
	failStatus                       // the backend answered a policy.retry.on_status status
	failDeadline                     // the request's overall deadline passed
	failClient                       // the client went away
	failBody                         // the client's body failed (too large, broken)
	failStale                        // a reused keep-alive connection failed before any answer byte (forward.StaleConnError)
)

// tryAgain is the one place that decides whether a failed attempt may be
// retried (Caddy's tryAgain); every retry is an attempt of the selection, so
// 1 + retry_max + cross_retry bounds them all. Connection failures and the
// local pool limit are always retryable as long as no body byte left for a
// backend (nothing was sent). A reused keep-alive connection that failed
// before any answer byte (failStale: the backend closed it just as it was
// taken) is retried when the request is replayable, or when no byte of it
// reached the backend's socket and no body byte was taken from the client:
// a request that may have been read is never sent twice unless it is
// replayable. Anything else only when the request is replayable: no body or
// a buffered one, and an idempotent method unless the policy allows others.
// A response byte never reached the client here: retries happen before the
// answer is relayed.
func tryAgain(f *failure, replayable bool, bodySent bool) bool {
	switch f.kind {
	case failDial, failPoolFull:
		return replayable || !bodySent
	case failStale:
		return replayable || (f.unsent && !bodySent)
	case failTimeout, failUpstream, failStatus:
		return replayable
	default:
		return false
	}
}

func (st *reqState) roundTrip(out *http.Request) (*http.Response, error) {
	res, ge := attemptLoop[*http.Response](st, stdAttempter{st: st, out: out})
	if ge != nil {
		return nil, ge
	}
	return res, nil
}

// stdAttempter is one attempt over http.Transport (the std upstream client
// and upgrades).
type stdAttempter struct {
	st  *reqState
	out *http.Request
}

func (a stdAttempter) attempt(pick balance.Pick) (*http.Response, bool, *failure) {
	res, f := a.st.attempt(a.out, pick)
	switch {
	case f == nil:
		return res, false, nil
	case f.res != nil:
		return f.res, true, f
	}
	return nil, false, f
}

// release closes a kept answer's body, which reports that pick's Done.
func (stdAttempter) release(res *http.Response) { res.Body.Close() }

// next asks the selection for the next pick and records the decision.
func (st *reqState) next(last *failure) (balance.Pick, error) {
	var sp trace.Span
	if st.recording {
		_, sp = st.s.tracer.Start(st.ctx, "sluice.pick")
	}
	pick, err := st.sel.Next()
	c := st.c
	switch {
	case err == nil:
		st.attempts = pick.Attempt()
		st.subcluster, st.algorithm, st.reason = pick.SubCluster(), pick.Algorithm(), pick.Reason()
		st.instance = pick.Endpoint().AddrString()
		if pick.Attempt() == 1 {
			m := c.subs[st.subcluster]
			st.subName, st.subM = st.subcluster, m // finish's, unless a retry moves on
			if m != nil {
				m.picks.Inc()
			}
		} else if pick.Cross() {
			c.retryX.Inc()
		} else {
			c.retryIn.Inc()
		}
	case errors.Is(err, balance.ErrBlackhole):
		st.subcluster = config.Blackhole
		st.reason = "blackhole"
		c.subs[config.Blackhole].picks.Inc()
		c.bhDrops.Inc()
		c.stats.blackhole.Add(1)
	case errors.Is(err, balance.ErrRetryBudget):
		c.budget.Inc()
	}
	if sp != nil {
		if err == nil {
			sp.SetAttributes(
				attribute.Int64("sluice.snapshot.version", int64(st.rt.version)),
				attribute.String("sluice.cluster", c.name),
				attribute.String("sluice.subcluster", pick.SubCluster()),
				attribute.String("sluice.instance", st.instance),
				attribute.String("sluice.algorithm", pick.Algorithm()),
				attribute.String("sluice.pick.reason", pick.Reason()),
				attribute.Int("sluice.attempt", pick.Attempt()),
				attribute.Bool("sluice.cross", pick.Cross()))
		} else {
			code := st.giveUp(err, last).code
			sp.SetAttributes(attribute.String("sluice.cluster", c.name), attribute.String("sluice.error_code", code))
			if st.subcluster == config.Blackhole && st.attempts == 0 {
				sp.SetAttributes(attribute.String("sluice.subcluster", config.Blackhole))
			}
		}
		sp.End()
	}
	return pick, err
}

// giveUp turns the selection's refusal into the generated answer.
func (st *reqState) giveUp(err error, last *failure) *genError {
	switch {
	case errors.Is(err, balance.ErrBlackhole):
		return blackholeError(&st.c.policy)
	case errors.Is(err, balance.ErrRetryBudget):
		return &genError{status: http.StatusServiceUnavailable, code: CodeRetryBudget, err: err}
	case last != nil:
		return failError(last)
	default:
		return &genError{status: http.StatusServiceUnavailable, code: CodeNoAvailable, err: err}
	}
}

func failError(f *failure) *genError {
	switch f.kind {
	case failDial:
		return &genError{status: http.StatusBadGateway, code: CodeConnect, err: f.err}
	case failPoolFull:
		return &genError{status: http.StatusServiceUnavailable, code: CodeLocalLimit, err: f.err}
	case failTimeout:
		return &genError{status: http.StatusGatewayTimeout, code: CodeTimeout, err: f.err}
	case failDeadline:
		return &genError{status: http.StatusGatewayTimeout, code: CodeRequestTimeout, err: f.err}
	case failClient:
		return &genError{status: StatusClientClosed, code: CodeClientClosed, err: f.err}
	case failBody:
		return classifyBodyError(false, f.err) // classify made a gone client's failClient
	default:
		return &genError{status: http.StatusBadGateway, code: CodeUpstream, err: f.err}
	}
}

// attempt forwards the request to one pick. On success the response body
// reports the pick's Done when it is closed.
func (st *reqState) attempt(out *http.Request, pick balance.Pick) (*http.Response, *failure) {
	p := &st.c.policy
	ep := pick.Endpoint()
	up := st.s.pools.Cached(ep.Slot(), ep.Addr(), p.Pool, p.Timeouts)
	ctx := out.Context()
	cancel := context.CancelFunc(nop)
	if d := p.Timeouts.PerTry.D(); d > 0 {
		ctx, cancel = context.WithTimeout(ctx, d)
	}
	req := out
	if pick.Attempt() > 1 || ctx != out.Context() {
		req = out.WithContext(ctx)
		if pick.Attempt() > 1 {
			req.Header = out.Header.Clone()
		}
	}
	u := *out.URL
	u.Host = up.HostPort()
	req.URL = &u
	switch {
	case st.buf != nil:
		req.Body = io.NopCloser(bytes.NewReader(st.buf))
		req.ContentLength = int64(len(st.buf))
		buf := st.buf
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	case st.stream != nil:
		req.Body = st.stream
		req.GetBody = st.stream.again
	default:
		req.Body = http.NoBody
	}
	var sp trace.Span
	if st.s.tracing && !st.recording {
		st.inject(st.ctx, propagation.HeaderCarrier(req.Header))
	}
	if st.recording {
		var sctx context.Context
		sctx, sp = st.s.tracer.Start(st.ctx, "sluice.forward", trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(
				attribute.String("sluice.cluster", st.c.name),
				attribute.String("sluice.subcluster", pick.SubCluster()),
				attribute.String("sluice.instance", st.instance),
				attribute.Int("sluice.attempt", pick.Attempt()),
				attribute.String("server.address", st.instance)))
		st.s.prop.Inject(sctx, propagation.HeaderCarrier(req.Header))
	}
	start := time.Now()
	res, err := up.RoundTrip(req)
	lat := time.Since(start)
	if err != nil {
		f := st.classify(out.Context(), ctx, err)
		cancel()
		attemptFailed(pick, sp, err, f, lat)
		return nil, f
	}
	if sp != nil {
		sp.SetAttributes(attribute.Int("http.response.status_code", res.StatusCode))
	}
	if pick.SetCookie() != nil {
		res.Header.Add("Set-Cookie", pick.SetCookie().String())
	}
	// KindStatus lets the balancer match policy.health.outlier_status.
	result := balance.Result{Kind: balance.KindStatus, Status: res.StatusCode, Latency: lat}
	retryStatus := st.c.retryOnStatus(res.StatusCode)
	st.upstreamTime = lat
	db := &doneBody{pick: pick, result: result, cancel: cancel, span: sp, out: &st.bytesOut}
	if rwc, ok := res.Body.(io.ReadWriteCloser); ok && res.StatusCode == http.StatusSwitchingProtocols {
		res.Body = &doneConn{ReadWriteCloser: rwc, d: db}
	} else {
		db.rc = res.Body
		res.Body = db
	}
	if retryStatus {
		return nil, &failure{kind: failStatus, status: res.StatusCode, res: res, err: errStatus}
	}
	return res, nil
}

var errStatus = errors.New("backend answered a retry-on status")

func nop() {}

// classify names an attempt's error. reqCtx is the request's context (client
// and overall deadline), tryCtx the attempt's (per-try deadline).
func (st *reqState) classify(reqCtx, tryCtx context.Context, err error) *failure {
	var de *forward.DialError
	var se *forward.StaleConnError
	var rbe *forward.BodyReadError
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.Is(err, forward.ErrPoolFull):
		return &failure{kind: failPoolFull, err: err}
	case errors.As(err, &mbe):
		return &failure{kind: failBody, err: err}
	case reqCtx.Err() != nil:
		if errors.Is(reqCtx.Err(), context.DeadlineExceeded) {
			return &failure{kind: failDeadline, err: err}
		}
		return &failure{kind: failClient, err: err}
	case errors.As(err, &de):
		if tryCtx.Err() != nil {
			return &failure{kind: failTimeout, err: err}
		}
		return &failure{kind: failDial, err: err}
	case tryCtx.Err() != nil, errors.As(err, &ne) && ne.Timeout():
		return &failure{kind: failTimeout, err: err}
	case errors.As(err, &se):
		return &failure{kind: failStale, unsent: se.Unsent, err: err}
	case st.stream != nil && isBodyReadError(err):
		return &failure{kind: failBody, err: err}
	case errors.As(err, &rbe):
		return &failure{kind: failBody, err: err}
	default:
		return &failure{kind: failUpstream, err: err}
	}
}

func isBodyReadError(err error) bool {
	var mbe *http.MaxBytesError
	return errors.As(err, &mbe)
}

func resultKind(k failKind) balance.FailureKind {
	switch k {
	case failDial, failUpstream:
		return balance.KindConnect
	case failTimeout:
		return balance.KindTimeout
	case failStatus:
		return balance.KindStatus
	case failPoolFull:
		return balance.KindLocalLimit
	default:
		// The client went away, its body failed or the overall deadline
		// passed: neutral for the backend's health.
		return balance.KindNone
	}
}

// doneBody reports the pick's outcome when ReverseProxy closes the body. A
// read error other than EOF (the backend died mid-response) is reported as a
// failure; ReverseProxy then aborts the client connection.
type doneBody struct {
	rc     io.ReadCloser
	out    *int64 // the request's bytes_out (read on the request's goroutine)
	pick   balance.Pick
	result balance.Result
	cancel context.CancelFunc
	span   trace.Span
	done   atomic.Bool
}

func (b *doneBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	*b.out += int64(n)
	if err != nil && err != io.EOF && b.result.Err == nil {
		b.result.Err = err
		b.result.Kind = balance.KindConnect
		var ne net.Error
		switch {
		case errors.Is(err, context.Canceled):
			b.result.Kind = balance.KindNone // the client went away: neutral
		case errors.As(err, &ne) && ne.Timeout():
			b.result.Kind = balance.KindTimeout
		}
	}
	return n, err
}

func (b *doneBody) Close() error {
	var err error
	if b.rc != nil {
		err = b.rc.Close()
	}
	b.finish()
	return err
}

func (b *doneBody) finish() {
	if !b.done.CompareAndSwap(false, true) {
		return
	}
	b.pick.Done(b.result)
	b.cancel()
	if b.span != nil {
		if b.result.Err != nil {
			b.span.SetStatus(codes.Error, b.result.Err.Error())
		}
		b.span.End()
	}
}

// doneConn keeps an upgraded connection's Write visible to ReverseProxy.
type doneConn struct {
	io.ReadWriteCloser
	d *doneBody
}

func (c *doneConn) Close() error {
	err := c.ReadWriteCloser.Close()
	c.d.finish()
	return err
}

// attemptFailed reports a failed forward attempt to the balancer (passive
// health, EWMA) and ends its span with the error code.
func attemptFailed(pick balance.Pick, sp trace.Span, err error, f *failure, lat time.Duration) {
	pick.Done(balance.Result{Err: err, Kind: resultKind(f.kind), Latency: lat})
	if sp != nil {
		sp.SetAttributes(attribute.String("sluice.error_code", failError(f).code))
		sp.SetStatus(codes.Error, err.Error())
		sp.End()
	}
}

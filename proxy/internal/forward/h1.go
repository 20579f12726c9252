package forward

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/sluicelb/sluice/proxy/internal/deadline"
	"github.com/sluicelb/sluice/proxy/internal/sockio"
)

// This file is the purpose-built HTTP/1.1 upstream client (Upstream.Do): one
// exchange at a time per pooled connection, no per-connection goroutines, the
// response header parsed straight into the caller's header map. It replaces
// http.Transport on the hot path (docs/performance.md: Transport's reader/writer
// goroutines and channel hand-offs are most of Go's gap to nginx). Upgrades
// keep going through Upstream.RoundTrip (http.Transport).

// HeaderField is one request header line added by the caller.
type HeaderField struct{ Name, Value string }

// Request is one request for Upstream.Do. Do does not keep it.
type Request struct {
	// Method, URI (origin form, "/p?q") and Host of the request line and
	// Host header. They must be valid (the front server checked them).
	Method, URI, Host string
	// Header are the client's headers, copied as they are except hop-by-hop
	// headers (Connection and the names it lists, Keep-Alive,
	// Proxy-Connection, Proxy-Authenticate, Proxy-Authorization, TE other
	// than "trailers", Trailer, Transfer-Encoding, Upgrade), Content-Length
	// and Expect (Do frames the body itself), and every name in Extra or Skip.
	Header http.Header
	// Fields, when not nil, are Header's fields one by one, in the order
	// the client sent them (a name as often as it came): Do writes them,
	// under Header's rules, and does not read Header (ranging over a map
	// costs a randomized iteration, and Connection a lookup).
	Fields []HeaderField
	// Skip lists canonical header names not copied from Header.
	Skip []string
	// Extra headers are sent after Header (forwarding headers, trace context).
	// Names must be canonical.
	Extra []HeaderField
	// BodyBytes is a buffered (replayable) body; nil for none unless Body is set.
	BodyBytes []byte
	// Body is a streamed body of BodyLength bytes (-1: unknown, sent chunked).
	// Read errors are returned wrapped in *BodyReadError.
	Body       io.Reader
	BodyLength int64
	// Trailer, when set, is called after Body reached EOF; the fields it
	// returns are sent as trailers of a chunked body.
	Trailer func() http.Header
	// ExpectContinue sends "Expect: 100-continue" before a streamed Body and
	// waits up to ContinueTimeout for the backend's 100 (a final answer
	// instead means the body is never read from the client).
	ExpectContinue bool
	// Start is when the attempt began (zero: now); it saves Do a clock
	// read for the response-header timeout and the idle-connection check.
	Start time.Time
}

// ContinueTimeout is how long Do waits for "100 Continue" before sending the
// body anyway (http.Transport.ExpectContinueTimeout in the std path).
const ContinueTimeout = time.Second

// Response is the backend's answer to Do.
type Response struct {
	Status int
	// Header is the answer's header, hop-by-hop fields removed: views of
	// the connection's buffers, valid until Body is closed or has read a
	// trailer (Fields). Do also added them to the map given it, if any.
	Header Fields
	// ContentLength is the body length, -1 when unknown (chunked or
	// close-delimited).
	ContentLength int64
	// Body is never nil. It must be closed exactly once and not used after.
	Body *Body
	// Connect is how long connecting took when the exchange needed a new
	// connection, 0 on a reused one.
	Connect time.Duration
}

// BodyReadError wraps a failure to read the request body given to Do.
type BodyReadError struct{ Err error }

func (e *BodyReadError) Error() string { return "read request body: " + e.Err.Error() }
func (e *BodyReadError) Unwrap() error { return e.Err }

// StaleConnError is an exchange that failed on a reused keep-alive
// connection before any byte of the answer arrived: the backend may have
// closed the connection just as it was taken (Do checks idle connections
// before reuse, so only that race is left). Do never resends by itself: a
// resend is another attempt, the caller's decision (is the request
// replayable, did a body byte leave?).
type StaleConnError struct {
	Err error
	// Unsent: no byte of the request reached the socket (the first write
	// failed), so the backend cannot have seen any of it.
	Unsent bool
}

func (e *StaleConnError) Error() string {
	return "reused connection failed before the answer: " + e.Err.Error()
}
func (e *StaleConnError) Unwrap() error { return e.Err }

// ErrProtocol wraps every malformed backend response.
var ErrProtocol = errors.New("forward: malformed backend response")

func protoErr(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, a...)...)
}

// maxHeaderBytes caps a response header (http.Transport's default).
const maxHeaderBytes = 1 << 20

var aLongTimeAgo = time.Unix(1, 0)

// conn is one pooled connection. It serves one exchange at a time; its Body
// is reused by the next exchange.
type conn struct {
	nc      net.Conn
	br      *bufio.Reader
	bw      *bufio.Writer // writes through sockWriter
	await   bool          // the next flush is a whole request (see sockWriter)
	seen    fieldBits     // the fieldBits of the names the last readFields read (finishHead)
	rdl     time.Time     // read deadline last set on nc
	wdl     time.Time     // write deadline last set on nc
	u       *Upstream
	idleAt  time.Time
	sent    int64         // bytes written to nc over its life
	dialed  time.Duration // connect time, until the first exchange reports it
	reused  bool          // served an exchange before this one
	stop    func() bool
	body    Body
	line    []byte // scratch for header lines longer than the read buffer
	head    []byte // scratch for request heads longer than the write buffer (writeHead)
	fields  []field
	vals    []byte // readFields' scratch: the values of one header, back to back
	chunked bodyWriter

	// interrupt, made once with the conn, is what a cancelled exchange
	// context runs (context.AfterFunc): a closure made per exchange was one
	// more allocation per request
	interrupt func()
}

// field is one header field read: its value is vals[start:end] of the
// conn's value scratch.
type field struct {
	k          string
	start, end int
	bits       fieldBits // bitsOf(k)
}

func (c *conn) close() { c.nc.Close() }

// Do sends req to the backend over a pooled connection and returns the
// response once its header arrived. ctx bounds the whole exchange, body
// included (its deadline becomes the connection's; cancelling it interrupts
// I/O). Over the connection cap it waits up to the queue timeout for a slot
// and then fails with ErrPoolFull. Failures to connect are *DialError. The
// slot and connection are held until Response.Body is closed. The answer's
// header is Response.Header; when dst is not nil, Do adds a copy of its
// fields to dst too.
func (u *Upstream) Do(ctx context.Context, req *Request, dst http.Header) (Response, error) {
	if u.slots != nil {
		if err := u.acquire(ctx); err != nil {
			return Response{}, err
		}
	}
	now := req.Start
	if now.IsZero() {
		now = time.Now()
	}
	c, err := u.getConn(ctx, now)
	if err != nil {
		u.releaseSlot()
		return Response{}, err
	}
	sent := c.sent
	res, st, err := c.exchange(ctx, req, now)
	if err == nil {
		res.Connect, c.dialed = c.dialed, 0
		res.Header = c.header()
		if dst != nil {
			res.Header.AddTo(dst)
		}
		return res, nil
	}
	c.stopWatch()
	c.close()
	u.releaseSlot()
	var rbe *BodyReadError
	if c.reused && st.noResponse && ctx.Err() == nil && !isTimeout(err) && !errors.As(err, &rbe) {
		err = &StaleConnError{Err: err, Unsent: c.sent == sent}
	}
	return Response{}, err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

type exchangeState struct {
	noResponse bool // no response byte was read
}

func (c *conn) stopWatch() bool {
	if c.stop == nil {
		return true
	}
	ok := c.stop()
	c.stop = nil
	return ok
}

func (c *conn) exchange(ctx context.Context, req *Request, now time.Time) (Response, exchangeState, error) {
	st := exchangeState{noResponse: true}
	deadline, hasDeadline := ctx.Deadline()
	streamed := req.BodyBytes == nil && req.Body != nil
	// A whole request (no streamed body) has its response-header timeout
	// armed before it is written: one deadline change per exchange. A
	// streamed one gets it once the body is sent.
	rd := deadline
	var headerBy time.Time
	if c.u.rht > 0 {
		headerBy = now.Add(c.u.rht)
		if hasDeadline && deadline.Before(headerBy) {
			headerBy = deadline
		}
		if !streamed {
			rd = headerBy
		}
	}
	if err := c.setDeadlines(rd, deadline); err != nil {
		return Response{}, st, err
	}
	if ctx.Done() != nil {
		c.stop = context.AfterFunc(ctx, c.interrupt)
	}
	expect := streamed && req.ExpectContinue
	c.writeHead(req, expect)
	var werr error
	switch {
	case !streamed && len(req.BodyBytes) > c.bw.Available():
		c.bw.Write(req.BodyBytes)
		werr = c.bw.Flush()
	case !streamed:
		c.bw.Write(req.BodyBytes)
		c.await = c.br.Buffered() == 0
		werr = c.bw.Flush()
		c.await = false
	case expect:
		if werr = c.bw.Flush(); werr != nil {
			break
		}
		// Wait for 100 Continue, a final answer (the body is then never
		// sent) or the continue timeout.
		wait := time.Now().Add(ContinueTimeout)
		if hasDeadline && deadline.Before(wait) {
			wait = deadline
		}
		c.setReadDeadline(wait)
		_, err := c.br.Peek(1)
		c.setReadDeadline(deadline)
		if err == nil {
			st.noResponse = false
			status, err := c.readHead()
			if err != nil {
				return Response{}, st, err
			}
			if status != http.StatusContinue {
				res, err := c.finishHead(req, status, false)
				return res, st, err
			}
		} else if !isTimeout(err) || ctx.Err() != nil {
			return Response{}, st, err
		}
		werr = c.writeBody(req)
	default:
		werr = c.writeBody(req)
	}
	if werr != nil {
		// (rbe is on the heap: declared here, it costs only a failed write
		// its allocation, not every exchange)
		var rbe *BodyReadError
		if errors.As(werr, &rbe) {
			return Response{}, st, werr
		}
	}
	// After a write error the backend may still have answered (an early
	// 413, say): read what it sent; without an answer the write error wins.
	if streamed && c.u.rht > 0 {
		c.setReadDeadline(time.Now().Add(c.u.rht))
		if hasDeadline && deadline.Before(c.rdl) {
			c.setReadDeadline(deadline)
		}
	}
	if _, err := c.br.Peek(1); err != nil {
		if werr != nil {
			return Response{}, st, werr
		}
		return Response{}, st, err
	}
	st.noResponse = false
	status, err := c.readHead()
	for err == nil && status >= 100 && status < 200 {
		if status == http.StatusSwitchingProtocols {
			return Response{}, st, protoErr("101 Switching Protocols to a request without Upgrade")
		}
		status, err = c.readHead() // 1xx informational answers are not relayed
	}
	if err != nil {
		return Response{}, st, err
	}
	res, err := c.finishHead(req, status, werr == nil)
	// The body is read under the exchange's deadline, not the header
	// timeout — unless it is all buffered already and never touches the
	// socket (the next exchange sets its own deadlines).
	if c.u.rht > 0 && err == nil && !(res.ContentLength >= 0 && int64(c.br.Buffered()) >= res.ContentLength) {
		c.setReadDeadline(deadline)
	}
	return res, st, err
}

// setDeadlines sets the read and write deadlines of nc, each only when it
// really moves (deadline.Skip): a deadline change is a runtime timer update.
func (c *conn) setDeadlines(read, write time.Time) error {
	if !deadline.Skip(c.wdl, write) {
		if err := c.nc.SetWriteDeadline(write); err != nil {
			return err
		}
		c.wdl = write
	}
	return c.setReadDeadline(read)
}

func (c *conn) setReadDeadline(t time.Time) error {
	if deadline.Skip(c.rdl, t) {
		return nil
	}
	if err := c.nc.SetReadDeadline(t); err != nil {
		return err
	}
	c.rdl = t
	return nil
}

// sockWriter is the writer under conn.bw. A flush of a whole request
// (conn.await set, nothing unread from the backend) goes through
// sockio.Conn.WriteAwait: the runtime then waits for the answer before the
// first read, instead of that read failing with EAGAIN first. Anything
// else, and a connection sockio did not wrap, is a plain Write.
type sockWriter struct{ c *conn }

func (w sockWriter) Write(p []byte) (n int, err error) {
	if w.c.await {
		if sc, ok := w.c.nc.(*sockio.Conn); ok {
			n, err = sc.WriteAwait(p)
			w.c.sent += int64(n)
			return n, err
		}
	}
	n, err = w.c.nc.Write(p)
	w.c.sent += int64(n)
	return n, err
}

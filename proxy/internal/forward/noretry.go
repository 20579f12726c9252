package forward

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"

	"github.com/sluicelb/sluice/proxy/internal/sockio"
)

// The std upstream (http.Transport) resends a request by itself when a
// reused keep-alive connection fails: net/http's persistConn.shouldRetryRequest
// retries on a new connection when nothing was written and the body is
// empty or rewindable (GetBody), and when the request is "replayable"
// (Request.isReplayable: no body or GetBody set, and GET, HEAD, OPTIONS or
// TRACE, or an Idempotency-Key header) after a read error or EOF before the
// first answer byte. Those resends are invisible to the proxy's attempt loop:
// one attempt of the selection reached the backend twice, beyond
// 1 + retry_max + cross_retry (issue 17).
//
// transportRequest makes every request unreplayable in net/http's eyes, so
// the Transport never resends: GetBody is cleared, and a request without a
// body gets an empty, non-NoBody body (outgoingLength -1: "nothing written"
// no longer qualifies) with TransferEncoding "identity", which keeps the
// Transport from probing it or sending it chunked: the wire is what it
// was, no Content-Length and no Transfer-Encoding (except that POST, PUT and
// PATCH without a body no longer carry "Content-Length: 0": a request
// without either has no body, RFC 9112 §6.3). The attempt loop decides
// instead, from the StaleConnError RoundTrip returns for a failure on a
// reused connection before any answer byte.
//
// The Transport learns that the backend closed an idle connection from
// that connection's background read, which may not have run yet when the
// connection is taken for the next request (a loaded machine, a backend
// restart). So GotConn peeks at a reused connection itself
// (sockio.Conn.Gone), and again at the request's first write, which the
// Transport's write loop may make much later: the window left is that of
// the fast client, one peek before one write. When the backend closed or
// reset it, the connection writes nothing (countConn.refuse): not a byte
// of the request leaves, and Upstream.roundTrip tries again on another
// connection or dials (connTrace.foundGone), as Do's getConn passes over
// an idle connection that is not usable: the attempt does not fail for a
// connection the backend had closed before it was used. That takes the
// body again: none, or GetBody's. Without GetBody (or when it fails) the
// attempt fails Unsent and the attempt loop decides. A streamed body is untouched then: net/http flushes the head
// before it reads a body it cannot see in memory, and that flush is the
// refused write. (A buffered body may have been read into the
// Transport's buffer first; it is replayable.)
func transportRequest(req *http.Request) (*http.Request, *connTrace) {
	ct := &connTrace{}
	ctx := httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: ct.gotConn})
	r := req.WithContext(ctx)
	r.GetBody = nil
	if r.Body == nil || r.Body == http.NoBody {
		r.Body, r.ContentLength = emptyBody{}, 0
		r.TransferEncoding = []string{"identity"}
	}
	return r, ct
}

// ErrBackendGone is the write error of a reused connection the backend
// had already closed when the Transport took it.
var ErrBackendGone = errors.New("the backend closed the reused connection before the request was written")

// emptyBody is a request body with nothing in it that net/http does not
// recognise as none.
type emptyBody struct{}

func (emptyBody) Read([]byte) (int, error) { return 0, io.EOF }
func (emptyBody) Close() error             { return nil }

// WriteTo keeps net/http's body copy from allocating a 32 KiB buffer for
// nothing (io.Copy uses it before anything else).
func (emptyBody) WriteTo(io.Writer) (int64, error) { return 0, nil }

// connTrace records the connection the Transport used for the request and
// its byte counts when it was taken.
type connTrace struct {
	reused        bool
	conn          *countConn
	wrote0, read0 int64
}

// gotConn records the connection; a reused one is checked now and again
// at the request's first write (the Transport's write loop may write it
// much later on a loaded machine).
func (t *connTrace) gotConn(info httptrace.GotConnInfo) {
	t.reused = info.Reused
	c, ok := info.Conn.(*countConn)
	if !ok {
		return
	}
	t.conn, t.wrote0, t.read0 = c, c.wrote.Load(), c.read.Load()
	if info.Reused {
		c.checkGone()
		c.verify.Store(true)
	}
}

// foundGone reports whether the connection was a reused one its check
// found closed by the backend (at the take or at the first write), so that
// not a byte of the request was written on it.
func (t *connTrace) foundGone() bool {
	return t.reused && t.conn != nil && t.conn.refuse.Load() && t.conn.wrote.Load() == t.wrote0
}

// classify wraps a RoundTrip error on a reused connection that had not
// received a byte of the answer in a StaleConnError (Unsent: not a byte of
// the request reached the socket either). Timeouts and cancellations are
// left as they are.
func (t *connTrace) classify(ctx context.Context, err error) error {
	var ne net.Error
	if !t.reused || t.conn == nil || ctx.Err() != nil || (errors.As(err, &ne) && ne.Timeout()) {
		return err
	}
	if t.conn.read.Load() != t.read0 {
		return err // part of an answer arrived: a protocol error, not a stale connection
	}
	return &StaleConnError{Err: err, Unsent: t.conn.wrote.Load() == t.wrote0}
}

// countConn counts the bytes a Transport connection wrote and read. Once
// refuse is set (the backend had closed it before the request was
// written) it writes nothing more.
type countConn struct {
	net.Conn
	wrote, read atomic.Int64
	verify      atomic.Bool // check the connection at the next write (a reused one was taken)
	refuse      atomic.Bool
}

// checkGone sets refuse when the backend closed or reset the connection
// (one non-blocking peek, sockio.Conn.Gone).
func (c *countConn) checkGone() {
	if sc, ok := c.Conn.(*sockio.Conn); ok && sc.Gone() != nil {
		c.refuse.Store(true)
	}
}

func (c *countConn) Write(p []byte) (int, error) {
	if c.verify.Swap(false) {
		c.checkGone()
	}
	if c.refuse.Load() {
		return 0, ErrBackendGone
	}
	n, err := c.Conn.Write(p)
	c.wrote.Add(int64(n))
	return n, err
}

func (c *countConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

package forward

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
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
	// RetryStale decides whether an exchange that failed on a reused
	// keep-alive connection before any response byte arrived (the backend
	// closed it meanwhile) is redone on another connection; written reports
	// whether a body byte had been written. nil means never.
	RetryStale func(written bool) bool
}

// ContinueTimeout is how long Do waits for "100 Continue" before sending the
// body anyway (http.Transport.ExpectContinueTimeout in the std path).
const ContinueTimeout = time.Second

// Response is the backend's answer to Do. Its header fields were added to the
// map given to Do.
type Response struct {
	Status int
	// ContentLength is the body length, -1 when unknown (chunked or
	// close-delimited).
	ContentLength int64
	// Body is never nil. It must be closed exactly once and not used after.
	Body *Body
}

// BodyReadError wraps a failure to read the request body given to Do.
type BodyReadError struct{ Err error }

func (e *BodyReadError) Error() string { return "read request body: " + e.Err.Error() }
func (e *BodyReadError) Unwrap() error { return e.Err }

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
	rdl     time.Time     // read deadline last set on nc
	wdl     time.Time     // write deadline last set on nc
	u       *Upstream
	idleAt  time.Time
	reused  bool // served an exchange before this one
	stop    func() bool
	body    Body
	line    []byte // scratch for header lines longer than the read buffer
	fields  []field
	chunked bodyWriter
}

type field struct{ k, v string }

func (c *conn) close() { c.nc.Close() }

// Do sends req to the backend over a pooled connection and returns the
// response once its header arrived. ctx bounds the whole exchange, body
// included (its deadline becomes the connection's; cancelling it interrupts
// I/O). Over the connection cap it waits up to the queue timeout for a slot
// and then fails with ErrPoolFull. Failures to connect are *DialError. The
// slot and connection are held until Response.Body is closed.
func (u *Upstream) Do(ctx context.Context, req *Request, dst http.Header) (Response, error) {
	if u.slots != nil {
		if err := u.acquire(ctx); err != nil {
			return Response{}, err
		}
	}
	now := req.Start
	if now.IsZero() {
		now = u.now()
	}
	for {
		c, err := u.getConn(ctx, now)
		if err != nil {
			u.releaseSlot()
			return Response{}, err
		}
		res, st, err := c.exchange(ctx, req, dst, now)
		if err == nil {
			return res, nil
		}
		c.stopWatch()
		c.close()
		if c.reused && st.noResponse && ctx.Err() == nil && !isTimeout(err) &&
			req.RetryStale != nil && req.RetryStale(st.written) {
			continue
		}
		u.releaseSlot()
		return Response{}, err
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

type exchangeState struct {
	written    bool // a body byte was written
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

func (c *conn) exchange(ctx context.Context, req *Request, dst http.Header, now time.Time) (Response, exchangeState, error) {
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
		nc := c.nc
		c.stop = context.AfterFunc(ctx, func() { nc.SetDeadline(aLongTimeAgo) })
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
			status, err := c.readHead(dst)
			if err != nil {
				return Response{}, st, err
			}
			if status != http.StatusContinue {
				res, err := c.finishHead(req, status, dst, false)
				return res, st, err
			}
			clear(dst)
		} else if !isTimeout(err) || ctx.Err() != nil {
			return Response{}, st, err
		}
		st.written = true
		werr = c.writeBody(req)
	default:
		st.written = true
		werr = c.writeBody(req)
	}
	var rbe *BodyReadError
	if errors.As(werr, &rbe) {
		return Response{}, st, werr
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
	status, err := c.readHead(dst)
	for err == nil && status >= 100 && status < 200 {
		if status == http.StatusSwitchingProtocols {
			return Response{}, st, protoErr("101 Switching Protocols to a request without Upgrade")
		}
		clear(dst) // 1xx informational answers are not relayed
		status, err = c.readHead(dst)
	}
	if err != nil {
		return Response{}, st, err
	}
	res, err := c.finishHead(req, status, dst, werr == nil)
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

func (w sockWriter) Write(p []byte) (int, error) {
	if w.c.await {
		if sc, ok := w.c.nc.(*sockio.Conn); ok {
			return sc.WriteAwait(p)
		}
	}
	return w.c.nc.Write(p)
}

// writeHead buffers the request line and header.
func (c *conn) writeHead(req *Request, expect bool) {
	w := c.bw
	w.WriteString(req.Method)
	w.WriteByte(' ')
	w.WriteString(req.URI)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(req.Host)
	w.WriteString("\r\n")
	conn := req.Header["Connection"]
	for k, vv := range req.Header {
		if skipRequestHeader(k, conn) || listed(k, req.Skip) || extra(k, req.Extra) {
			continue
		}
		if k == "Te" {
			if hasToken(vv, "trailers") {
				w.WriteString("Te: trailers\r\n")
			}
			continue
		}
		for _, v := range vv {
			w.WriteString(k)
			w.WriteString(": ")
			w.WriteString(v)
			w.WriteString("\r\n")
		}
	}
	for _, f := range req.Extra {
		w.WriteString(f.Name)
		w.WriteString(": ")
		w.WriteString(f.Value)
		w.WriteString("\r\n")
	}
	switch {
	case req.BodyBytes != nil:
		writeContentLength(w, int64(len(req.BodyBytes)))
	case req.Body != nil && req.BodyLength >= 0:
		writeContentLength(w, req.BodyLength)
	case req.Body != nil:
		w.WriteString("Transfer-Encoding: chunked\r\n")
	case methodWantsLength(req.Method):
		w.WriteString("Content-Length: 0\r\n")
	}
	if expect {
		w.WriteString("Expect: 100-continue\r\n")
	}
	if c.u.noKeepAlive {
		w.WriteString("Connection: close\r\n")
	}
	w.WriteString("\r\n")
}

// methodWantsLength mirrors net/http: a body-less POST/PUT/PATCH still says
// "Content-Length: 0".
func methodWantsLength(m string) bool {
	return m == http.MethodPost || m == http.MethodPut || m == http.MethodPatch
}

func writeContentLength(w *bufio.Writer, n int64) {
	var b [20]byte
	w.WriteString("Content-Length: ")
	w.Write(strconv.AppendInt(b[:0], n, 10))
	w.WriteString("\r\n")
}

func listed(k string, names []string) bool {
	for _, n := range names {
		if n == k {
			return true
		}
	}
	return false
}

func extra(k string, fs []HeaderField) bool {
	for _, f := range fs {
		if f.Name == k {
			return true
		}
	}
	return false
}

// skipRequestHeader reports the request headers Do never copies.
func skipRequestHeader(k string, connection []string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Trailer", "Transfer-Encoding", "Upgrade", "Content-Length", "Expect", "Host":
		return true
	}
	return len(connection) > 0 && hasToken(connection, k)
}

// hasToken reports whether the comma-separated lists vv hold token t
// (case-insensitively).
func hasToken(vv []string, t string) bool {
	for _, v := range vv {
		for len(v) > 0 {
			var tok string
			if i := indexByte(v, ','); i >= 0 {
				tok, v = v[:i], v[i+1:]
			} else {
				tok, v = v, ""
			}
			if equalFoldTrim(tok, t) {
				return true
			}
		}
	}
	return false
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

func equalFoldTrim(s, t string) bool {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		a, b := s[i], t[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

// writeBody streams req.Body and flushes.
func (c *conn) writeBody(req *Request) error {
	buf := getBuf()
	defer putBuf(buf)
	if req.BodyLength >= 0 {
		n, err := copyBody(c.bw, req.Body, req.BodyLength, *buf)
		if err != nil {
			return err
		}
		if n != req.BodyLength {
			return &BodyReadError{Err: fmt.Errorf("body ended after %d of %d bytes: %w", n, req.BodyLength, io.ErrUnexpectedEOF)}
		}
		return c.bw.Flush()
	}
	c.chunked.w = c.bw
	if _, err := copyBody(&c.chunked, req.Body, -1, *buf); err != nil {
		return err
	}
	c.bw.WriteString("0\r\n")
	if req.Trailer != nil {
		for k, vv := range req.Trailer() {
			for _, v := range vv {
				c.bw.WriteString(k)
				c.bw.WriteString(": ")
				c.bw.WriteString(v)
				c.bw.WriteString("\r\n")
			}
		}
	}
	c.bw.WriteString("\r\n")
	return c.bw.Flush()
}

// copyBody copies up to limit bytes (-1: all) of r to w, telling read
// errors (*BodyReadError) from write errors.
func copyBody(w io.Writer, r io.Reader, limit int64, buf []byte) (int64, error) {
	var n int64
	for limit < 0 || n < limit {
		p := buf
		if limit >= 0 && int64(len(p)) > limit-n {
			p = p[:limit-n]
		}
		m, rerr := r.Read(p)
		if m > 0 {
			if _, err := w.Write(p[:m]); err != nil {
				return n, err
			}
			n += int64(m)
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, &BodyReadError{Err: rerr}
		}
	}
	return n, nil
}

// bodyWriter writes chunks of a chunked body (without the last chunk).
type bodyWriter struct{ w *bufio.Writer }

func (b *bodyWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var h [20]byte
	b.w.Write(strconv.AppendInt(h[:0], int64(len(p)), 16))
	b.w.WriteString("\r\n")
	b.w.Write(p)
	_, err := b.w.WriteString("\r\n")
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// readLine returns one line without its CRLF. The slice is valid until the
// next read.
func (c *conn) readLine(total *int) ([]byte, error) {
	line, err := c.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		c.line = append(c.line[:0], line...)
		for err == bufio.ErrBufferFull {
			if len(c.line) > maxHeaderBytes {
				return nil, protoErr("header over %d bytes", maxHeaderBytes)
			}
			line, err = c.br.ReadSlice('\n')
			c.line = append(c.line, line...)
		}
		line = c.line
	}
	if err != nil {
		if err == io.EOF && *total > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	*total += len(line)
	if *total > maxHeaderBytes {
		return nil, protoErr("header over %d bytes", maxHeaderBytes)
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// readHead reads a status line and header fields into dst.
func (c *conn) readHead(dst http.Header) (int, error) {
	total := 0
	line, err := c.readLine(&total)
	if err != nil {
		return 0, err
	}
	// "HTTP/1.x NNN reason"
	if len(line) < 12 || string(line[:7]) != "HTTP/1." || (line[7] != '0' && line[7] != '1') || line[8] != ' ' ||
		(len(line) > 12 && line[12] != ' ') {
		return 0, protoErr("status line %q", trim(line))
	}
	c.body.http10 = line[7] == '0'
	status := 0
	for _, d := range line[9:12] {
		if d < '0' || d > '9' {
			return 0, protoErr("status line %q", trim(line))
		}
		status = status*10 + int(d-'0')
	}
	if status < 100 {
		return 0, protoErr("status %d", status)
	}
	if err := c.readFields(dst, &total); err != nil {
		return 0, err
	}
	return status, nil
}

func trim(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// readFields reads header (or trailer) fields up to the empty line into dst,
// values of one key in one shared backing array like net/textproto.
func (c *conn) readFields(dst http.Header, total *int) error {
	c.fields = c.fields[:0]
	for {
		line, err := c.readLine(total)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			break
		}
		i := 0
		for i < len(line) && line[i] != ':' {
			if !isTokenByte(line[i]) {
				return protoErr("header line %q", trim(line))
			}
			i++
		}
		if i == 0 || i == len(line) {
			return protoErr("header line %q", trim(line))
		}
		k := canonicalKey(line[:i])
		v := line[i+1:]
		for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
			v = v[1:]
		}
		for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
			v = v[:len(v)-1]
		}
		for _, b := range v {
			if (b < ' ' && b != '\t') || b == 0x7f {
				return protoErr("header %s value has a control byte", k)
			}
		}
		c.fields = append(c.fields, field{k, string(v)})
	}
	strs := make([]string, len(c.fields))
	for i, f := range c.fields {
		strs[i] = f.v
		if vv, ok := dst[f.k]; ok {
			dst[f.k] = append(vv, f.v)
		} else {
			dst[f.k] = strs[i : i+1 : i+1]
		}
	}
	return nil
}

func isTokenByte(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	}
	switch b {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// commonKeys interns the canonical form of frequent response header names, so
// that parsing them allocates nothing.
var commonKeys = func() map[string]string {
	m := make(map[string]string)
	for _, k := range []string{"Accept-Ranges", "Age", "Cache-Control", "Connection", "Content-Encoding",
		"Content-Language", "Content-Length", "Content-Type", "Date", "Etag", "Expires", "Keep-Alive",
		"Last-Modified", "Location", "Server", "Set-Cookie", "Trailer", "Transfer-Encoding", "Vary",
		"Via", "X-Content-Type-Options", "X-Frame-Options", "Strict-Transport-Security", "Upgrade",
		"Proxy-Connection", "Te", "Retry-After", "Content-Security-Policy", "Access-Control-Allow-Origin",
		"X-Request-Id", "Traceparent", "Tracestate", "Www-Authenticate", "Proxy-Authenticate", "Link",
		"Content-Disposition", "Pragma", "Alt-Svc"} {
		m[k] = k
		if l := toLower(k); l != k {
			m[l] = k
		}
	}
	return m
}()

func toLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func canonicalKey(b []byte) string {
	if k, ok := commonKeys[string(b)]; ok {
		return k
	}
	return http.CanonicalHeaderKey(string(b))
}

// finishHead removes the hop-by-hop fields of a response header and sets up
// its body. reusable is false when the request was not fully written.
func (c *conn) finishHead(req *Request, status int, h http.Header, reusable bool) (Response, error) {
	b := &c.body
	*b = Body{c: c, http10: b.http10}
	keep := reusable && !c.u.noKeepAlive
	connHdr := h["Connection"]
	if hasToken(connHdr, "close") {
		keep = false
	}
	if b.http10 && !hasToken(connHdr, "keep-alive") {
		keep = false
	}
	for _, name := range connHdr {
		for _, t := range splitTokens(name) {
			if t != "" {
				delete(h, http.CanonicalHeaderKey(t))
			}
		}
	}
	te := h["Transfer-Encoding"]
	cl := h["Content-Length"]
	delete(h, "Connection")
	delete(h, "Keep-Alive")
	delete(h, "Proxy-Connection")
	delete(h, "Transfer-Encoding")
	delete(h, "Upgrade")
	delete(h, "Te")
	b.keep = keep
	res := Response{Status: status, ContentLength: -1, Body: b}
	switch {
	case req.Method == http.MethodHead || status == http.StatusNoContent || status == http.StatusNotModified:
		b.mode = modeNone
		if status == http.StatusNoContent {
			delete(h, "Content-Length")
		}
		if len(cl) == 1 {
			if n, err := parseLength(cl[0]); err == nil {
				res.ContentLength = n
			}
		}
		if status != http.StatusOK || req.Method != http.MethodHead {
			res.ContentLength = 0
		}
		return res, nil
	case len(te) > 0:
		if len(te) != 1 || !equalFoldTrim(te[0], "chunked") {
			return Response{}, protoErr("unsupported Transfer-Encoding %q", te)
		}
		delete(h, "Content-Length") // chunked wins (RFC 9112 6.3)
		b.mode = modeChunked
		b.cr = httputil.NewChunkedReader(c.br)
		return res, nil
	case len(cl) > 0:
		n, err := parseLength(cl[0])
		for _, v := range cl[1:] {
			if m, err2 := parseLength(v); err2 != nil || m != n {
				err = protoErr("conflicting Content-Length %q", cl)
			}
		}
		if err != nil {
			return Response{}, err
		}
		h["Content-Length"] = cl[:1]
		b.mode, b.remaining, res.ContentLength = modeLength, n, n
		if n == 0 {
			b.mode = modeNone
		}
		return res, nil
	default:
		b.mode = modeEOF
		b.keep = false
		return res, nil
	}
}

func splitTokens(s string) []string {
	var out []string
	for len(s) > 0 {
		var tok string
		if i := indexByte(s, ','); i >= 0 {
			tok, s = s[:i], s[i+1:]
		} else {
			tok, s = s, ""
		}
		for len(tok) > 0 && (tok[0] == ' ' || tok[0] == '\t') {
			tok = tok[1:]
		}
		for len(tok) > 0 && (tok[len(tok)-1] == ' ' || tok[len(tok)-1] == '\t') {
			tok = tok[:len(tok)-1]
		}
		out = append(out, tok)
	}
	return out
}

func parseLength(s string) (int64, error) {
	if s == "" {
		return 0, protoErr("empty Content-Length")
	}
	var n int64
	for i := 0; i < len(s); i++ {
		d := s[i]
		if d < '0' || d > '9' || n > (1<<62)/10 {
			return 0, protoErr("Content-Length %q", s)
		}
		n = n*10 + int64(d-'0')
	}
	return n, nil
}

type bodyMode uint8

const (
	modeNone bodyMode = iota
	modeLength
	modeChunked
	modeEOF
)

// Body is a response body. Read it to io.EOF and Close it to give the
// connection back to the pool; Close before EOF closes the connection.
// Not safe for concurrent use.
type Body struct {
	c         *conn
	mode      bodyMode
	http10    bool
	keep      bool
	eof       bool
	closed    bool
	remaining int64
	cr        io.Reader
	err       error
	trailer   http.Header
}

// Read reads the body. An error other than io.EOF means the backend broke
// the exchange (truncated body, reset, timeout, bad chunk).
func (b *Body) Read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	if b.err != nil {
		return 0, b.err
	}
	var n int
	var err error
	switch b.mode {
	case modeNone:
		b.eof = true
		return 0, io.EOF
	case modeLength:
		if int64(len(p)) > b.remaining {
			p = p[:b.remaining]
		}
		n, err = b.c.br.Read(p)
		b.remaining -= int64(n)
		if b.remaining == 0 {
			b.eof = true
			return n, io.EOF
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
	case modeChunked:
		n, err = b.cr.Read(p)
		if err == io.EOF {
			tr := make(http.Header)
			total := 0
			if terr := b.c.readFields(tr, &total); terr != nil {
				b.err = terr
				return n, terr
			}
			if len(tr) > 0 {
				b.trailer = tr
			}
			b.eof = true
			return n, io.EOF
		}
	case modeEOF:
		n, err = b.c.br.Read(p)
		if err == io.EOF {
			b.eof = true
			return n, io.EOF
		}
	}
	if err != nil {
		b.err = err
	}
	return n, err
}

// Trailer returns the trailer fields of a chunked body once Read returned
// io.EOF (nil when there were none).
func (b *Body) Trailer() http.Header { return b.trailer }

// Close ends the exchange: the connection returns to the pool when the body
// was read to its end and may be reused, and is closed otherwise. The slot is
// released either way.
func (b *Body) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	c := b.c
	u := c.u
	intact := c.stopWatch()
	if b.eof && b.keep && intact && c.br.Buffered() == 0 {
		c.reused = true
		u.putIdle(c)
	} else {
		c.close()
	}
	u.releaseSlot()
	return nil
}

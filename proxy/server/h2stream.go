package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2stream is one request and its answer. Fields below mu are c.mu's.
type h2stream struct {
	c      *h2conn
	id     uint32
	ctx    context.Context
	cancel context.CancelFunc
	cond   sync.Cond // c.mu: body bytes, window, reset, deadline

	sendWin    int64 // what we may still send (the peer's stream window)
	recvWin    int64 // what the peer may still send
	recvUnack  int64
	declLen    int64 // the request's content-length, -1: none
	got        int64
	body       []byte // received, not yet read
	bodyEOF    bool
	bodyClosed bool // the handler closed the request body
	remoteDone bool // END_STREAM received (half-closed remote)
	closed     bool // reset, connection gone, or answered and done
	closeErr   error
	trailer    http.Header // the request's declared trailers
	readDL     *time.Timer
	readTO     bool
	writeDL    *time.Timer
	writeTO    bool
	endSent    bool // END_STREAM written
}

// processHeaders opens a stream, or takes a stream's trailers.
func (c *h2conn) processHeaders(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	if id%2 != 1 {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if f.HasPriority() && f.Priority.StreamDep == id {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	c.mu.Lock()
	st := c.streams[id]
	c.mu.Unlock()
	if st != nil {
		return c.processTrailers(st, f)
	}
	if id <= c.maxClientID {
		if c.drainFrame(id, f.StreamEnded()) {
			return nil // a draining stream's trailers
		}
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	c.mu.Lock()
	c.maxClientID = id
	open, running := len(c.streams), c.running
	c.mu.Unlock()
	if open >= c.srv.maxStreams {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	if running >= h2MaxHandlersMul*c.srv.maxStreams {
		return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
	}
	req, err := c.newRequest(f)
	if err != nil {
		return err
	}
	if checkH2RequestHeaders(req.Header) != nil {
		// connection-specific fields: a malformed request (RFC 9113
		// 8.2.2; net/http answers 400 instead)
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	ctx, cancel := context.WithCancel(c.ctx)
	st = &h2stream{c: c, id: id, ctx: ctx, cancel: cancel, declLen: req.ContentLength, remoteDone: f.StreamEnded()}
	st.cond.L = &c.mu
	handler := c.srv.handler.ServeHTTP
	if f.Truncated {
		handler = func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusRequestHeaderFieldsTooLarge) }
	}
	if st.remoteDone {
		req.Body = http.NoBody
		st.bodyEOF = true
	} else {
		req.Body = &h2body{st: st}
		if req.Trailer != nil {
			st.trailer = req.Trailer
		}
	}
	req = req.WithContext(ctx)
	c.mu.Lock()
	st.sendWin = int64(c.peerWin)
	st.recvWin = c.srv.streamWin
	if c.streams == nil {
		c.streams = make(map[uint32]*h2stream, 1)
	}
	c.streams[id] = st
	c.running++
	if len(c.streams) == 1 {
		c.idleDeadlineLocked()
		if !c.active {
			c.active = true
			c.state(http.StateActive)
		}
	}
	c.mu.Unlock()
	w := &h2writer{st: st, req: req, head: req.Method == http.MethodHead}
	if d := c.srv.readTimeout; d > 0 && !st.remoteDone {
		_ = w.SetReadDeadline(time.Now().Add(d))
	}
	if d := c.srv.writeTimeout; d > 0 {
		_ = w.SetWriteDeadline(time.Now().Add(d))
	}
	c.handlers.Add(1)
	go w.run(handler)
	return nil
}

func (c *h2conn) processTrailers(st *h2stream, f *http2.MetaHeadersFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.remoteDone {
		return http2.StreamError{StreamID: st.id, Code: http2.ErrCodeStreamClosed}
	}
	if !f.StreamEnded() || len(f.PseudoFields()) > 0 {
		return http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
	}
	if st.declLen >= 0 && st.got != st.declLen {
		return http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
	}
	if st.trailer != nil {
		for _, hf := range f.RegularFields() {
			k := http.CanonicalHeaderKey(hf.Name)
			if _, ok := st.trailer[k]; ok {
				st.trailer[k] = append(st.trailer[k], hf.Value)
			}
		}
	}
	st.remoteDone, st.bodyEOF = true, true
	st.cond.Broadcast()
	return nil
}

// newRequest builds the request of a HEADERS frame (RFC 9113 8.3.1).
func (c *h2conn) newRequest(f *http2.MetaHeadersFrame) (*http.Request, error) {
	method, scheme := f.PseudoValue("method"), f.PseudoValue("scheme")
	authority, path := f.PseudoValue("authority"), f.PseudoValue("path")
	bad := http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol}
	if f.PseudoValue("protocol") != "" {
		return nil, bad
	}
	isConnect := method == http.MethodConnect
	if isConnect {
		if path != "" || scheme != "" || authority == "" {
			return nil, bad
		}
	} else if method == "" || path == "" || (scheme != "https" && scheme != "http") {
		return nil, bad
	}
	fields := f.RegularFields()
	h := make(http.Header, len(fields))
	var cookies []string
	for _, hf := range fields {
		k := http.CanonicalHeaderKey(hf.Name)
		if k == "Cookie" {
			cookies = append(cookies, hf.Value)
			continue
		}
		h[k] = append(h[k], hf.Value)
	}
	if len(cookies) > 0 { // RFC 9113 8.2.3: one Cookie for HTTP/1.1
		h["Cookie"] = []string{strings.Join(cookies, "; ")}
	}
	if authority == "" {
		authority = h.Get("Host")
	}
	r := &http.Request{
		Method: method, Proto: "HTTP/2.0", ProtoMajor: 2, Header: h, Host: authority,
		RemoteAddr: c.remote, RequestURI: path, ContentLength: -1,
	}
	if scheme == "https" {
		r.TLS = &c.tlsCS
	}
	var err error
	if isConnect {
		r.URL = &url.URL{Host: authority}
		r.RequestURI = authority
	} else if r.URL, err = url.ParseRequestURI(path); err != nil {
		return nil, bad
	}
	if f.StreamEnded() {
		r.ContentLength = 0
	} else if vv, ok := h["Content-Length"]; ok {
		n, err := strconv.ParseUint(vv[0], 10, 63)
		if err != nil {
			return nil, bad
		}
		r.ContentLength = int64(n)
	}
	for _, v := range h["Trailer"] {
		for _, k := range strings.Split(v, ",") {
			k = http.CanonicalHeaderKey(textproto(k))
			switch k {
			case "Transfer-Encoding", "Trailer", "Content-Length":
				return nil, bad
			}
			if r.Trailer == nil {
				r.Trailer = make(http.Header)
			}
			r.Trailer[k] = nil
		}
	}
	delete(h, "Trailer")
	return r, nil
}

func textproto(s string) string { return strings.TrimSpace(s) }

var h2ConnHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade"}

// checkH2RequestHeaders is net/http's check: connection-specific fields
// are not HTTP/2.
func checkH2RequestHeaders(h http.Header) error {
	for _, k := range h2ConnHeaders {
		if _, ok := h[k]; ok {
			return fmt.Errorf("request header %q is not valid in HTTP/2", k)
		}
	}
	if te := h["Te"]; len(te) > 0 && (len(te) > 1 || (te[0] != "trailers" && te[0] != "")) {
		return errors.New(`request header "TE" may only be "trailers" in HTTP/2`)
	}
	return nil
}

// closeLocked ends the stream: its handler's context is canceled, its
// body reads and writes fail with err; it leaves the connection's table.
func (st *h2stream) closeLocked(err error) {
	if st.closed {
		return
	}
	st.closed, st.closeErr = true, err
	if err == nil {
		st.closeErr = errStreamDone
	}
	c := st.c
	delete(c.streams, st.id)
	if len(c.streams) == 0 {
		c.streams = nil // an idle connection holds no map
	}
	if st.readDL != nil {
		st.readDL.Stop()
	}
	if st.writeDL != nil {
		st.writeDL.Stop()
	}
	if err != nil {
		st.cancel()
	}
	if n := int64(len(st.body)); n > 0 { // unread body: the connection's share comes back
		st.body = nil
		c.giveBackLocked(n, nil, 0)
		c.flushLocked()
	}
	st.cond.Broadcast()
	if len(c.streams) == 0 && !c.dead {
		c.idleDeadlineLocked()
		if c.active {
			c.active = false
			c.state(http.StateIdle)
		}
	}
}

var errStreamDone = errors.New("http2: stream closed")

// h2body is a request's body as the handler reads it.
type h2body struct {
	st *h2stream
}

func (b *h2body) Read(p []byte) (int, error) {
	st := b.st
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(st.body) == 0 && !st.bodyEOF && !st.closed && !st.readTO && !st.bodyClosed {
		st.cond.Wait()
	}
	switch {
	case st.bodyClosed:
		return 0, http.ErrBodyReadAfterClose
	case len(st.body) > 0:
	case st.readTO:
		return 0, os.ErrDeadlineExceeded
	case st.bodyEOF:
		return 0, io.EOF
	default:
		return 0, st.closeErr
	}
	n := copy(p, st.body)
	st.body = st.body[n:]
	if len(st.body) == 0 {
		st.body = st.body[:0:0]
	}
	c.giveBackLocked(int64(n), st, int64(n))
	c.flushLocked()
	if len(st.body) == 0 && st.bodyEOF {
		return n, io.EOF
	}
	return n, nil
}

func (b *h2body) Close() error {
	st := b.st
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if !st.bodyClosed {
		st.bodyClosed = true
		if n := int64(len(st.body)); n > 0 {
			st.body = nil
			c.giveBackLocked(n, nil, 0)
			c.flushLocked()
		}
		st.cond.Broadcast()
	}
	return nil
}

// h2writer is a stream's http.ResponseWriter; only its handler's goroutine
// uses it.
type h2writer struct {
	st          *h2stream
	req         *http.Request
	h           http.Header
	status      int
	wroteHeader bool
	sentHeader  bool
	head        bool
	done        bool // the handler returned
	buf         []byte
	written     int64
	declared    int64 // the answer's Content-Length, -1: none
	trailers    []string
}

func (w *h2writer) Header() http.Header {
	if w.h == nil {
		w.h = make(http.Header)
	}
	return w.h
}

func (w *h2writer) WriteHeader(code int) {
	if w.wroteHeader || w.done {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		// informational: its own HEADERS now
		_ = w.sendFrames(code, w.h, nil, false, true)
		return
	}
	w.wroteHeader, w.status = true, code
	w.declared = -1
	if w.h != nil {
		if vv := w.h["Content-Length"]; len(vv) > 0 {
			if n, err := strconv.ParseInt(vv[0], 10, 64); err == nil && n >= 0 {
				w.declared = n
			} else {
				delete(w.h, "Content-Length")
			}
		}
		for _, v := range w.h["Trailer"] {
			for _, k := range strings.Split(v, ",") {
				if k = http.CanonicalHeaderKey(strings.TrimSpace(k)); k != "" {
					w.trailers = append(w.trailers, k)
				}
			}
		}
	}
}

func (w *h2writer) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.declared >= 0 && w.written+int64(len(p)) > w.declared {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if w.head {
		return len(p), nil
	}
	if len(w.buf)+len(p) <= h2BodyChunk {
		if w.buf == nil {
			w.buf = getH2Buf()
		}
		w.buf = append(w.buf, p...)
		return len(p), nil
	}
	if err := w.send(p, false); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (w *h2writer) WriteString(s string) (int, error) {
	if len(w.buf)+len(s) <= h2BodyChunk && w.wroteHeader && bodyAllowed(w.status) && !w.head &&
		(w.declared < 0 || w.written+int64(len(s)) <= w.declared) {
		if w.buf == nil {
			w.buf = getH2Buf()
		}
		w.buf = append(w.buf, s...)
		w.written += int64(len(s))
		return len(s), nil
	}
	return w.Write([]byte(s))
}

// Flush sends the head and what the body has so far.
func (w *h2writer) Flush() { _ = w.FlushError() }

func (w *h2writer) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.send(nil, false)
}

// send writes the head (once), the buffered body, then p; end adds
// END_STREAM (after the trailers, if any).
func (w *h2writer) send(p []byte, end bool) error {
	var h http.Header
	if !w.sentHeader {
		h = w.h
		if h == nil {
			h = http.Header{}
		}
		w.sentHeader = true
		if v, ok := h["Connection"]; ok {
			delete(h, "Connection")
			if len(v) > 0 && v[0] == "close" {
				w.st.c.startGracefulShutdown()
			}
		}
		if _, ok := h["Date"]; !ok {
			h["Date"] = []string{h2Date()}
		}
		body := w.buf
		if len(body) == 0 {
			body = p
		}
		if _, ok := h["Content-Type"]; !ok && bodyAllowed(w.status) && len(body) > 0 && !w.head {
			h["Content-Type"] = []string{http.DetectContentType(body)}
		}
		if end && w.declared < 0 && bodyAllowed(w.status) && !(w.head && w.written == 0) &&
			len(w.trailers) == 0 && !hasPrefixedTrailer(w.h) {
			h["Content-Length"] = []string{strconv.FormatInt(w.written, 10)}
		}
	}
	var tr http.Header
	if end {
		tr = w.trailerValues()
	}
	status := 0
	if h != nil {
		status = w.status
	}
	err := w.sendFrames(status, h, w.buf, end && tr == nil, false, p)
	if w.buf != nil {
		putH2Buf(w.buf)
		w.buf = nil
	}
	if err == nil && tr != nil {
		err = w.sendFrames(-1, tr, nil, true, false)
	}
	return err
}

func hasPrefixedTrailer(h http.Header) bool {
	for k := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return true
		}
	}
	return false
}

// trailerValues are the trailers to send: the declared ones set and the
// TrailerPrefix ones (nil: none).
func (w *h2writer) trailerValues() http.Header {
	var tr http.Header
	for _, k := range w.trailers {
		if vv := w.h[k]; len(vv) > 0 {
			if tr == nil {
				tr = make(http.Header)
			}
			tr[k] = vv
		}
	}
	for k, vv := range w.h {
		if strings.HasPrefix(k, http.TrailerPrefix) && len(vv) > 0 {
			if tr == nil {
				tr = make(http.Header)
			}
			tr[http.CanonicalHeaderKey(k[len(http.TrailerPrefix):])] = vv
		}
	}
	return tr
}

// sendFrames queues a HEADERS (status > 0: a head; -1: trailers; 0: none)
// and the DATA of the body parts, within the peer's windows, and writes
// them. endData puts END_STREAM on the last frame (on HEADERS when there
// is no data, and always on trailers).
func (w *h2writer) sendFrames(status int, h http.Header, a []byte, end, info bool, more ...[]byte) error {
	st := w.st
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := st.writeErrLocked(); err != nil {
		return err
	}
	total := len(a)
	for _, m := range more {
		total += len(m)
	}
	if status != 0 {
		enc := h2encPool.Get().(*h2Encoder)
		enc.buf.b = enc.buf.b[:0]
		if status > 0 {
			_ = enc.enc.WriteField(hpack.HeaderField{Name: ":status", Value: statusText(status)})
		}
		encodeH2Headers(enc.enc, h, status > 0)
		hdrEnd := (end && total == 0) || status < 0
		c.appendHeadersLocked(st.id, enc.buf.b, hdrEnd)
		if cap(enc.buf.b) <= 16<<10 {
			h2encPool.Put(enc)
		}
		if hdrEnd {
			st.endSent = true
		}
		if info || total == 0 {
			if hdrEnd {
				st.finishLocked()
			}
			c.flushLocked()
			return c.werrLocked()
		}
	}
	if total == 0 && end {
		c.wbuf = appendFrameHeader(c.wbuf, 0, http2.FrameData, http2.FlagDataEndStream, st.id)
		st.endSent = true
		st.finishLocked()
		c.flushLocked()
		return c.werrLocked()
	}
	left := int64(total)
	for _, p := range append([][]byte{a}, more...) {
		for len(p) > 0 {
			for {
				if err := st.writeErrLocked(); err != nil {
					return err
				}
				if st.sendWin > 0 && c.sendWin > 0 && !(c.flushing && len(c.wbuf) >= h2WriteHigh) {
					break
				}
				if st.sendWin <= 0 || c.sendWin <= 0 {
					if len(c.wbuf) > 0 && !c.flushing {
						c.flushLocked() // what is queued goes out while we wait (c.mu released: look again)
						continue
					}
					st.cond.Wait()
				} else {
					c.wcond.Wait()
				}
			}
			n := min(int64(len(p)), st.sendWin, c.sendWin, int64(c.peerFrame))
			left -= n
			last := end && left == 0
			var fl http2.Flags
			if last {
				fl = http2.FlagDataEndStream
			}
			c.wbuf = appendFrameHeader(c.wbuf, int(n), http2.FrameData, fl, st.id)
			c.wbuf = append(c.wbuf, p[:n]...)
			st.sendWin -= n
			c.sendWin -= n
			p = p[n:]
			if last {
				st.endSent = true
				st.finishLocked()
			}
		}
	}
	c.flushLocked()
	return c.werrLocked()
}

func (c *h2conn) werrLocked() error {
	if c.werr != nil {
		return c.werr
	}
	return nil
}

// appendHeadersLocked queues a header block as HEADERS and CONTINUATIONs.
func (c *h2conn) appendHeadersLocked(id uint32, block []byte, end bool) {
	t := http2.FrameHeaders
	for first := true; first || len(block) > 0; first = false {
		n := min(len(block), c.peerFrame)
		var fl http2.Flags
		if n == len(block) {
			fl |= http2.FlagHeadersEndHeaders
		}
		if first && end {
			fl |= http2.FlagHeadersEndStream
		}
		c.wbuf = appendFrameHeader(c.wbuf, n, t, fl, id)
		c.wbuf = append(c.wbuf, block[:n]...)
		block = block[n:]
		t = http2.FrameContinuation
	}
}

// writeErrLocked: why the stream may not be written any more (nil: it may).
func (st *h2stream) writeErrLocked() error {
	switch {
	case st.writeTO:
		return os.ErrDeadlineExceeded
	case st.c.dead:
		return errClientDisconnected
	case st.endSent:
		return errors.New("http2: stream answered")
	case st.closed:
		return st.closeErr
	}
	return nil
}

// finishLocked: END_STREAM is queued. A request whose body was not all
// sent is told to stop (RST_STREAM NO_ERROR, RFC 9113 8.1), but not in the
// answer's write: the stream drains first (drainLocked).
func (st *h2stream) finishLocked() {
	if !st.remoteDone {
		st.c.drainLocked(st.id)
	}
	st.closeLocked(nil)
}

func statusText(code int) string {
	switch code {
	case 200:
		return "200"
	case 404:
		return "404"
	case 502:
		return "502"
	case 503:
		return "503"
	}
	return strconv.Itoa(code)
}

// encodeH2Headers writes h's fields in lower case, without the
// connection-specific ones (and the TrailerPrefix ones in a head).
func encodeH2Headers(enc *hpack.Encoder, h http.Header, head bool) {
	for k, vv := range h {
		if head && strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		lk := lowerHeader(k)
		switch lk {
		case "connection", "proxy-connection", "transfer-encoding", "upgrade", "keep-alive":
			continue
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				continue
			}
			if lk == "te" && v != "trailers" {
				continue
			}
			_ = enc.WriteField(hpack.HeaderField{Name: lk, Value: v})
		}
	}
}

func bodyAllowed(status int) bool {
	switch {
	case status >= 100 && status <= 199:
		return false
	case status == 204, status == 304:
		return false
	}
	return true
}

// run calls the handler, then ends the answer: everything not sent yet in
// one write where it fits the windows.
func (w *h2writer) run(handler http.HandlerFunc) {
	st := w.st
	c := st.c
	defer c.handlers.Done()
	defer func() {
		c.mu.Lock()
		c.running--
		c.mu.Unlock()
	}()
	didPanic := true
	defer func() {
		if !didPanic {
			return
		}
		p := recover()
		if p != nil && p != http.ErrAbortHandler {
			buf := make([]byte, 64<<10)
			buf = buf[:goruntime.Stack(buf, false)]
			c.logf("http2: panic serving %v: %v\n%s", c.remote, p, buf)
		}
		if w.buf != nil {
			putH2Buf(w.buf)
			w.buf = nil
		}
		c.mu.Lock()
		if !st.closed {
			c.wbuf = appendRST(c.wbuf, st.id, http2.ErrCodeInternal)
			st.closeLocked(errStreamReset)
			c.flushLocked()
		}
		c.mu.Unlock()
		st.cancel()
	}()
	handler(w, w.req)
	didPanic = false
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.done = true
	c.mu.Lock()
	answered := st.endSent || st.closed
	c.mu.Unlock()
	if answered && !w.sentHeader && w.h != nil && len(w.h["Connection"]) > 0 && w.h["Connection"][0] == "close" {
		// a reset stream's answer is not sent, its "Connection: close"
		// still holds (as net/http: the rapid-reset guard's)
		c.startGracefulShutdown()
	}
	if !answered {
		_ = w.send(nil, true)
	}
	if w.buf != nil {
		putH2Buf(w.buf)
		w.buf = nil
	}
	c.mu.Lock()
	st.closeLocked(nil)
	c.mu.Unlock()
	st.cancel()
}

// SetReadDeadline bounds the request body's reads (http.ResponseController).
func (w *h2writer) SetReadDeadline(t time.Time) error {
	st := w.st
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	st.readTO = false
	st.setDeadlineLocked(&st.readDL, t, func() {
		st.readTO = true
		st.cond.Broadcast()
	})
	return nil
}

// SetWriteDeadline bounds the answer: past it, the stream is reset.
func (w *h2writer) SetWriteDeadline(t time.Time) error {
	st := w.st
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	st.setDeadlineLocked(&st.writeDL, t, func() {
		st.writeTO = true
		if !st.closed {
			c.wbuf = appendRST(c.wbuf, st.id, http2.ErrCodeInternal)
			st.closeLocked(os.ErrDeadlineExceeded)
			c.flushLocked()
		}
	})
	return nil
}

// setDeadlineLocked runs expire (under c.mu) at t, now if t has passed;
// the zero t only stops the timer.
func (st *h2stream) setDeadlineLocked(timer **time.Timer, t time.Time, expire func()) {
	if *timer != nil {
		(*timer).Stop()
	}
	if t.IsZero() || st.closed {
		return
	}
	d := time.Until(t)
	if d <= 0 {
		expire()
		return
	}
	*timer = time.AfterFunc(d, func() {
		st.c.mu.Lock()
		expire()
		st.c.mu.Unlock()
	})
}

var h2BufPool = sync.Pool{New: func() any { b := make([]byte, 0, h2BodyChunk); return &b }}

func getH2Buf() []byte { return (*h2BufPool.Get().(*[]byte))[:0] }

func putH2Buf(b []byte) {
	if cap(b) == h2BodyChunk {
		b = b[:0]
		h2BufPool.Put(&b)
	}
}

// h2Date is the Date header's value, formatted once a second.
func h2Date() string {
	now := time.Now().Unix()
	d := h2DateCache.Load()
	if d != nil && d.sec == now {
		return d.s
	}
	nd := &dateText{sec: now, s: time.Unix(now, 0).UTC().Format(http.TimeFormat)}
	h2DateCache.Store(nd)
	return nd.s
}

var h2DateCache atomic.Pointer[dateText]

type dateText struct {
	sec int64
	s   string
}

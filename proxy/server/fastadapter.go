package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/net/http/httpguts"

	"github.com/valyala/fasthttp"

	"github.com/sluicelb/sluice/proxy/internal/forward"
)

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
	in     http.Header    // request header
	h      http.Header    // response header
	up     forward.Fields // the backend's response header (setUpstreamHeader)
	conn   *addrConn      // the request's connection, when the front wrapped it (remoteAddrPort)
	status int
	wrote  bool
	handed bool // the body was handed to fasthttp: release on its Close
	body   bodyReader

	// reset's scratch, kept with the pooled adapter: the request's text
	// (target, host, header values) back to back before it becomes one
	// string, the header fields being read, and the backing array of the
	// request header's value slices (a.in's, so no longer-lived than it)
	text   []byte
	fields []inField
	vals   []string
	// the request header field by field, in the client's order: a.in's
	// fields, which forward writes from (requestFields)
	hf []forward.HeaderField

	// the HeaderReceived hook's over-limit mark, as reset found it: the
	// declared length is text[over[0]:over[1]]
	overLimit bool
	over      [2]int
	// the request has an Upgrade field (upgradeField)
	upgrade bool
}

// inField is one request header field reset read: its canonical name and
// where its value lies in the adapter's text.
type inField struct {
	key        string
	start, end int
}

func (a *fastAdapter) release() {
	a.ctx, a.conn = nil, nil
	a.req = http.Request{}
	a.body = bodyReader{}
	clear(a.in)
	clear(a.h)
	a.up = forward.Fields{}
	a.status, a.wrote, a.handed = 0, false, false
	adapters.Put(a)
}

// reset builds the *http.Request of ctx's request as net/http would.
func (a *fastAdapter) reset(ctx *fasthttp.RequestCtx) error {
	a.ctx = ctx
	rh := &ctx.Request.Header
	r := &a.req
	r.Method = internMethod(rh.Method())
	// The target, the host and the header values are copied into one
	// string (one allocation, not one each): none is a view of fasthttp's
	// buffers, which the connection reuses.
	a.text = append(a.text[:0], rh.RequestURI()...)
	uriEnd := len(a.text)
	a.text = append(a.text, rh.Host()...)
	hostEnd := len(a.text)
	chunked := rh.ContentLength() == -1
	hosts := 0
	a.fields = a.fields[:0]
	a.overLimit, a.upgrade = false, false
	for k, v := range rh.All() {
		if ours, client := overLimitField(k); ours || client {
			if ours {
				start := len(a.text)
				a.text = append(a.text, v...)
				a.overLimit, a.over = true, [2]int{start, len(a.text)}
			}
			continue // a client's copy is never forwarded
		}
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
		case "Upgrade":
			a.upgrade = true
		}
		start := len(a.text)
		a.text = append(a.text, v...)
		a.fields = append(a.fields, inField{key, start, len(a.text)})
	}
	text := string(a.text)
	r.RequestURI = text[:uriEnd]
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
	r.TLS = nil
	if ac, ok := ctx.Conn().(*addrConn); ok {
		r.TLS = ac.tls
	}
	r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.1", 1, 1
	if !rh.IsHTTP11() {
		r.Proto, r.ProtoMinor = "HTTP/1.0", 0
	}
	a.vals = a.vals[:0]
	for _, f := range a.fields {
		a.vals = append(a.vals, text[f.start:f.end])
	}
	a.hf = a.hf[:0]
	for i, f := range a.fields {
		a.hf = append(a.hf, forward.HeaderField{Name: f.key, Value: a.vals[i]})
		if vv, ok := a.in[f.key]; ok {
			a.in[f.key] = append(vv, a.vals[i]) // a repeated field: copied out
		} else {
			a.in[f.key] = a.vals[i : i+1 : i+1]
		}
	}
	if rh.ConnectionClose() && len(a.in["Connection"]) == 0 {
		a.in["Connection"] = []string{"close"}
		a.hf = append(a.hf, forward.HeaderField{Name: "Connection", Value: "close"})
		r.Close = true
	}
	r.Header = a.in
	if u.Host != "" {
		r.Host = u.Host
	} else {
		r.Host = text[uriEnd:hostEnd]
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
	if a.overLimit {
		// Marked by overBodyLimit: the declared length back, no body (none
		// was read), and the connection ends after the 413.
		if n, err := strconv.ParseInt(text[a.over[0]:a.over[1]], 10, 64); err == nil {
			r.ContentLength = n
		}
		r.Body = http.NoBody
		r.Close = true
	}
	if yc, ok := ctx.Conn().(*addrConn); ok {
		r.RemoteAddr = yc.remoteAddr() // formatted (and parsed) once per connection
		a.conn = yc
	} else {
		r.RemoteAddr = ctx.RemoteAddr().String()
		a.conn = nil
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

// setUpstreamHeader takes the backend's fields, which WriteHeader writes
// into the fasthttp response before a.h's (relay; upstreamHeader).
func (a *fastAdapter) setUpstreamHeader(f forward.Fields) { a.up = f }

// WriteHeader copies the status and header into the fasthttp response: the
// backend's fields (setUpstreamHeader) in their order, then a.h's.
func (a *fastAdapter) WriteHeader(code int) {
	if a.wrote || code < 200 {
		return
	}
	a.wrote, a.status = true, code
	a.ctx.SetStatusCode(code)
	hw := headerWriter{a: a, rh: &a.ctx.Response.Header, canon: true}
	up := a.up
	n := up.Len()
	var length []byte // the backend's Content-Length (HEAD)
	for i := 0; i < n; i++ {
		k, v := up.Field(i)
		if k == "Content-Length" {
			length = v
		}
		// A name's first field may be set (it appends); a later one of
		// the same name is added. Over 16 fields every one is added
		// (no quadratic search for earlier names).
		hw.put(k, v, n <= 16 && !up.Earlier(i))
	}
	for k, vv := range a.h {
		if k == "Content-Length" && len(vv) == 1 {
			length = bytesOf(vv[0])
		}
		// After the backend's fields a name may be one of theirs: added.
		for _, v := range vv {
			hw.put(k, bytesOf(v), n == 0 && len(vv) == 1)
		}
	}
	if a.req.Method == http.MethodHead && length != nil {
		// No body follows; announce the backend's length as net/http does.
		if n, err := strconv.Atoi(string(length)); err == nil && n >= 0 {
			a.ctx.Response.SkipBody = true
			hw.rh.SetContentLength(n)
		}
	}
}

// bytesOf is a view of s as bytes (fasthttp copies what it is given).
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// headerWriter puts response header fields into a fasthttp response header
// as net/http would send them.
type headerWriter struct {
	a  *fastAdapter
	rh *fasthttp.ResponseHeader
	// announced: a Trailer field went before
	announced bool
	// canon: every name given to fasthttp so far was its own canonical
	// form, so no two of them are one name once normalized
	canon bool
}

// put writes the field k: v. first says that no field named k went to
// fasthttp before: setting it then appends, as adding would, without
// normalizing the name.
func (hw *headerWriter) put(k string, v []byte, first bool) {
	rh := hw.rh
	switch k {
	case "Content-Type":
		// What Add does with it (fasthttp never takes it for a trailer),
		// without copying and normalizing the name first.
		rh.SetContentTypeBytes(v)
		return
	case "Date":
		// fasthttp writes its own Date and ignores one added, unless a
		// Trailer field before announced it: only then is Add asked.
		if !hw.announced {
			return
		}
	case "Trailer":
		hw.announced = true
		// Announced trailers: fasthttp sends them after a chunked body
		// (values set by setTrailers once the backend's body ended).
		for len(v) > 0 {
			var name []byte
			if i := bytes.IndexByte(v, ','); i >= 0 {
				name, v = v[:i], v[i+1:]
			} else {
				name, v = v, nil
			}
			if name = bytes.TrimSpace(name); len(name) > 0 {
				_ = rh.AddTrailerBytes(name) // forbidden names are dropped
			}
		}
		return
	case "Transfer-Encoding", "Content-Length":
		// fasthttp frames the body itself (Content-Length from the
		// buffered body or StreamBody's length, chunked otherwise).
		return
	case "Connection":
		if httpguts.HeaderValuesContainsToken([]string{string(v)}, "close") {
			hw.a.ctx.SetConnectionClose()
		}
		return
	}
	if len(k) > len(http.TrailerPrefix) && k[:len(http.TrailerPrefix)] == http.TrailerPrefix {
		return
	}
	if hw.canon && first && fastCanonical(k) {
		// What Add does, without copying and normalizing the name: a name
		// fasthttp holds no field of yet (a fresh response header, and
		// every name before a different canonical one), so setting it
		// appends, as adding would.
		rh.SetCanonical(bytesOf(k), v)
		return
	}
	hw.canon = hw.canon && fastCanonical(k)
	rh.AddBytesV(k, v)
}

// fastCanonical reports whether fasthttp's normalization leaves the header
// name k as it is: a non-empty token with an upper-case letter (or none)
// first and after each '-' and lower-case letters (or none) elsewhere.
func fastCanonical(k string) bool {
	if k == "" {
		return false
	}
	upper := true
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch keyClass[c] {
		case keyInvalid:
			return false
		case keyLower:
			if upper {
				return false
			}
		case keyUpper:
			if !upper {
				return false
			}
		}
		upper = c == '-'
	}
	return true
}

const (
	keyInvalid = iota // not a token byte
	keyOther          // a token byte that is not a letter
	keyLower
	keyUpper
)

var keyClass = func() (t [256]uint8) {
	for c := range t {
		switch {
		case !httpguts.IsTokenRune(rune(c)):
			t[c] = keyInvalid
		case c >= 'a' && c <= 'z':
			t[c] = keyLower
		case c >= 'A' && c <= 'Z':
			t[c] = keyUpper
		default:
			t[c] = keyOther
		}
	}
	return t
}()

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

// requestKeySlots holds every name of commonRequestKeys in the slot
// requestKeySlot gives it: internKey finds a common name (fasthttp hands
// them over in canonical form) with one comparison, not a map access that
// hashes it. The constants put no two of them in one slot
// (TestRequestKeysInTheirSlots); were a slot taken, its second name would
// still be found through the map.
var requestKeySlots = func() *[256]string {
	var t [256]string
	for k := range commonRequestKeys {
		if s := &t[requestKeySlot([]byte(k))]; *s == "" {
			*s = k
		}
	}
	return &t
}()

// requestKeySlot is a header name's slot in requestKeySlots: a mix of its
// length and its first, middle and last bytes. b is not empty.
func requestKeySlot(b []byte) uint8 {
	n := len(b)
	return uint8(n + int(b[0])*3 + int(b[n-1])*4 + int(b[n/2]))
}

func internKey(b []byte) string {
	if len(b) > 0 {
		if k := requestKeySlots[requestKeySlot(b)]; k == string(b) {
			return k
		}
	}
	if k, ok := commonRequestKeys[string(b)]; ok {
		return k
	}
	return http.CanonicalHeaderKey(string(b))
}

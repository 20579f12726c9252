package forward

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net/http"
	"net/http/httputil"

	"golang.org/x/net/http/httpguts"
)

// The response side of Upstream.Do: status line and header parsing, body
// framing and the pooled connection's Body.

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
	c.fields, c.vals = c.fields[:0], c.vals[:0]
	// What finishHead may find: the names read, and, with dst not empty,
	// whatever it held already.
	c.seen = 0
	if len(dst) != 0 {
		c.seen = fieldAll
	}
	for {
		line, err := c.readLine(total)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			break
		}
		// The name: token bytes up to the colon (which is none).
		i := 0
		for i < len(line) && tokenByte[line[i]] {
			i++
		}
		if i == 0 || i == len(line) || line[i] != ':' {
			return protoErr("header line %q", trim(line))
		}
		k, bits := canonicalKey(line[:i])
		c.seen |= bits
		v := line[i+1:]
		for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
			v = v[1:]
		}
		for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
			v = v[:len(v)-1]
		}
		if !plainValue(v) {
			return protoErr("header %s value has a control byte", k)
		}
		start := len(c.vals)
		c.vals = append(c.vals, v...)
		c.fields = append(c.fields, field{k, start, len(c.vals)})
	}
	if len(c.fields) == 0 {
		return nil
	}
	// One string holds all the values (one allocation, not one a field);
	// each value is a slice of it.
	all := string(c.vals)
	c.vals = c.vals[:0]
	strs := make([]string, len(c.fields))
	// Into an empty map, a name that no earlier field had is new: no
	// lookup for it (a few fields compared, not hashed; a long header is
	// looked up, so the comparisons stay few).
	fresh := len(dst) == 0 && len(c.fields) <= 16
	for i, f := range c.fields {
		v := all[f.start:f.end]
		strs[i] = v
		if fresh && !nameIn(c.fields[:i], f.k) {
			dst[f.k] = strs[i : i+1 : i+1]
			continue
		}
		if vv, ok := dst[f.k]; ok {
			dst[f.k] = append(vv, v)
		} else {
			dst[f.k] = strs[i : i+1 : i+1]
		}
	}
	return nil
}

// tokenByte is httpguts.IsTokenRune for a byte.
var tokenByte = func() (t [256]bool) {
	for c := range t {
		t[c] = httpguts.IsTokenRune(rune(c))
	}
	return t
}()

// plainValue reports whether a field value has no control byte but tab
// (nor DEL). Eight bytes at a time: a word with a byte below 0x20 or equal
// to 0x7f (tab included) is looked at byte by byte, with the rest.
func plainValue(v []byte) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for len(v) >= 8 {
		x := binary.LittleEndian.Uint64(v)
		del := x ^ 0x7f*ones
		if ((x-0x20*ones)&^x|(del-ones)&^del)&highs != 0 {
			break
		}
		v = v[8:]
	}
	for _, b := range v {
		if (b < ' ' && b != '\t') || b == 0x7f {
			return false
		}
	}
	return true
}

// nameIn reports whether one of fs has the name k.
func nameIn(fs []field, k string) bool {
	for _, f := range fs {
		if f.k == k {
			return true
		}
	}
	return false
}

// fieldBits flags the response header names finishHead looks up or
// deletes: it skips those a header lacks.
type fieldBits uint8

const (
	fieldConnection fieldBits = 1 << iota
	fieldTransferEncoding
	fieldContentLength
	// Connection, Keep-Alive, Proxy-Connection, Transfer-Encoding, Upgrade
	// and Te: the names finishHead deletes
	fieldHopByHop

	fieldAll = fieldConnection | fieldTransferEncoding | fieldContentLength | fieldHopByHop
)

// bitsOf is the fieldBits of the canonical name k.
func bitsOf(k string) fieldBits {
	switch k {
	case "Connection":
		return fieldConnection | fieldHopByHop
	case "Transfer-Encoding":
		return fieldTransferEncoding | fieldHopByHop
	case "Content-Length":
		return fieldContentLength
	case "Keep-Alive", "Proxy-Connection", "Upgrade", "Te":
		return fieldHopByHop
	}
	return 0
}

// commonName is a frequent response header name in canonical form, with
// its fieldBits.
type commonName struct {
	k    string
	bits fieldBits
}

// commonNames are frequent response header names in canonical form.
var commonNames = []string{"Accept-Ranges", "Age", "Cache-Control", "Connection", "Content-Encoding",
	"Content-Language", "Content-Length", "Content-Type", "Date", "Etag", "Expires", "Keep-Alive",
	"Last-Modified", "Location", "Server", "Set-Cookie", "Trailer", "Transfer-Encoding", "Vary",
	"Via", "X-Content-Type-Options", "X-Frame-Options", "Strict-Transport-Security", "Upgrade",
	"Proxy-Connection", "Te", "Retry-After", "Content-Security-Policy", "Access-Control-Allow-Origin",
	"X-Request-Id", "Traceparent", "Tracestate", "Www-Authenticate", "Proxy-Authenticate", "Link",
	"Content-Disposition", "Pragma", "Alt-Svc"}

// commonKeys interns commonNames, as written and in lower case, so that
// parsing them allocates nothing.
var commonKeys = func() map[string]commonName {
	m := make(map[string]commonName)
	for _, k := range commonNames {
		m[k] = commonName{k, bitsOf(k)}
		if l := toLower(k); l != k {
			m[l] = m[k]
		}
	}
	return m
}()

// commonSlot is a name of commonKeys in its slot of commonSlots.
type commonSlot struct {
	name string
	n    commonName
}

// commonSlots holds every name of commonKeys in the slot nameSlot gives
// it: canonicalKey finds a common name with one comparison, not a map
// access that hashes it. nameSlot's constants put no two of them in one
// slot (TestCommonNamesInTheirSlots); were a slot taken, its second name
// would still be found through the map.
var commonSlots = func() *[256]commonSlot {
	var t [256]commonSlot
	for name, n := range commonKeys {
		if s := &t[nameSlot([]byte(name))]; s.name == "" {
			*s = commonSlot{name, n}
		}
	}
	return &t
}()

// nameSlot is a header name's slot in commonSlots: a mix of its length
// and its first, middle and last bytes. b is not empty.
func nameSlot(b []byte) uint8 {
	n := len(b)
	return uint8(n + int(b[0])*27 + int(b[n-1])*48 + int(b[n/2]))
}

func toLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// canonicalKey is the canonical form of the header name b, and its
// fieldBits.
func canonicalKey(b []byte) (string, fieldBits) {
	if len(b) > 0 {
		if s := &commonSlots[nameSlot(b)]; s.name == string(b) {
			return s.n.k, s.n.bits
		}
	}
	if n, ok := commonKeys[string(b)]; ok {
		return n.k, n.bits
	}
	k := http.CanonicalHeaderKey(string(b))
	return k, bitsOf(k)
}

// finishHead removes the hop-by-hop fields of a response header and sets up
// its body. reusable is false when the request was not fully written.
func (c *conn) finishHead(req *Request, status int, h http.Header, reusable bool) (Response, error) {
	b := &c.body
	*b = Body{c: c, http10: b.http10}
	keep := reusable && !c.u.noKeepAlive
	// Only the names readFields saw are looked up or deleted (c.seen): a
	// name it did not see is not in h (deletions below only remove names).
	var connHdr, te, cl []string
	if c.seen&fieldConnection != 0 {
		connHdr = h["Connection"]
	}
	if httpguts.HeaderValuesContainsToken(connHdr, "close") {
		keep = false
	}
	if b.http10 && !httpguts.HeaderValuesContainsToken(connHdr, "keep-alive") {
		keep = false
	}
	for _, name := range connHdr {
		for _, t := range splitTokens(name) {
			if t != "" {
				delete(h, http.CanonicalHeaderKey(t))
			}
		}
	}
	if c.seen&fieldTransferEncoding != 0 {
		te = h["Transfer-Encoding"]
	}
	if c.seen&fieldContentLength != 0 {
		cl = h["Content-Length"]
	}
	if c.seen&fieldHopByHop != 0 {
		delete(h, "Connection")
		delete(h, "Keep-Alive")
		delete(h, "Proxy-Connection")
		delete(h, "Transfer-Encoding")
		delete(h, "Upgrade")
		delete(h, "Te")
	}
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
		if len(cl) > 1 {
			h["Content-Length"] = cl[:1] // all equal: one is relayed
		}
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

// Ready reports whether the whole body is already in memory (read with the
// header, or empty): reading it to its end touches no socket.
func (b *Body) Ready() bool {
	switch b.mode {
	case modeNone:
		return true
	case modeLength:
		return b.eof || int64(b.c.br.Buffered()) >= b.remaining
	}
	return b.eof
}

// Buffered reports whether bytes from the backend are waiting to be read,
// so that the next Read returns without waiting for the backend. In a
// chunked body that takes a whole chunk-size line: a part of one leaves the
// next Read waiting.
func (b *Body) Buffered() bool {
	n := b.c.br.Buffered()
	if n == 0 || b.mode != modeChunked {
		return n > 0
	}
	p, _ := b.c.br.Peek(n) // buffered bytes: no I/O
	return bytes.IndexByte(p, '\n') >= 0
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

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

// readHead reads a status line and header fields (c.fields).
func (c *conn) readHead() (int, error) {
	if status, whole, err := c.readHeadBuffered(); whole {
		return status, err
	}
	total := 0
	line, err := c.readLine(&total)
	if err != nil {
		return 0, err
	}
	status, err := c.parseStatus(line)
	if err != nil {
		return 0, err
	}
	if err := c.readFields(&total); err != nil {
		return 0, err
	}
	return status, nil
}

// readHeadBuffered parses a head the reader holds whole already (the usual
// case: one read brought it), without a read per line. whole is false when
// the buffered bytes hold no complete head yet: nothing was consumed, and
// readHead reads it line by line. The buffer (4 KiB) is far below
// maxHeaderBytes.
func (c *conn) readHeadBuffered() (status int, whole bool, err error) {
	n := c.br.Buffered()
	if n == 0 {
		return 0, false, nil
	}
	p, _ := c.br.Peek(n) // buffered bytes: no I/O
	line, rest, ok := cutLine(p)
	if !ok {
		return 0, false, nil
	}
	if status, err = c.parseStatus(line); err != nil {
		return 0, true, err
	}
	c.fields, c.vals, c.seen = c.fields[:0], c.vals[:0], 0
	for {
		if line, rest, ok = cutLine(rest); !ok {
			return 0, false, nil
		}
		if len(line) == 0 {
			break
		}
		if err := c.addField(line); err != nil {
			return 0, true, err
		}
	}
	c.br.Discard(n - len(rest))
	return status, true, nil
}

// cutLine splits the first line, without its LF and a CR before it, off p;
// ok is false when p holds no LF.
func cutLine(p []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(p, '\n')
	if i < 0 {
		return nil, p, false
	}
	line, rest = p[:i], p[i+1:]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, rest, true
}

// parseStatus parses a status line, "HTTP/1.x NNN reason".
func (c *conn) parseStatus(line []byte) (int, error) {
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
	return status, nil
}

func trim(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// readFields reads header (or trailer) fields up to the empty line into the
// conn's scratch (c.fields, their values back to back in c.vals): no map,
// no allocation. c.header() is the view of what it read.
func (c *conn) readFields(total *int) error {
	c.fields, c.vals = c.fields[:0], c.vals[:0]
	c.seen = 0 // the names finishHead may find
	for {
		line, err := c.readLine(total)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			return nil
		}
		if err := c.addField(line); err != nil {
			return err
		}
	}
}

// addField parses one field line into c.fields.
func (c *conn) addField(line []byte) error {
	// The name: token bytes up to the colon (which is none). A common
	// name is found by its slot, its bytes all tokens by construction.
	i := bytes.IndexByte(line, ':')
	if i <= 0 {
		return protoErr("header line %q", trim(line))
	}
	var k string
	var bits fieldBits
	if s := &commonSlots[nameSlot(line[:i])]; s.name == string(line[:i]) {
		k, bits = s.n.k, s.n.bits
	} else {
		for _, b := range line[:i] {
			if !tokenByte[b] {
				return protoErr("header line %q", trim(line))
			}
		}
		k, bits = canonicalKey(line[:i])
	}
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
	c.fields = append(c.fields, field{k: k, start: start, end: len(c.vals), bits: bits})
	return nil
}

// header is the view of the fields readFields read (finishHead's
// deletions applied).
func (c *conn) header() Fields { return Fields{list: c.fields, vals: c.vals} }

// Fields is a response header as the backend sent it: its fields in the
// order they came, names in canonical form, hop-by-hop fields removed. The
// values are views of the connection's buffers: valid until the response
// Body is closed or reads its trailer; AddTo copies them.
type Fields struct {
	list []field
	vals []byte
}

// Len is the number of fields.
func (f Fields) Len() int { return len(f.list) }

// Field is the i-th field's name (canonical) and value (a view: see
// Fields).
func (f Fields) Field(i int) (name string, value []byte) {
	x := f.list[i]
	return x.k, f.vals[x.start:x.end:x.end]
}

// Index is the position of the first field named name (canonical), -1 when
// there is none.
func (f Fields) Index(name string) int {
	for i, x := range f.list {
		if x.k == name {
			return i
		}
	}
	return -1
}

// Earlier reports whether a field before the i-th has its name.
func (f Fields) Earlier(i int) bool { return nameIn(f.list[:i], f.list[i].k) }

// Without is f without its fields named name. It reuses f's storage: f
// itself must not be used after.
func (f Fields) Without(name string) Fields {
	out := f.list[:0]
	for _, x := range f.list {
		if x.k != name {
			out = append(out, x)
		}
	}
	clear(f.list[len(out):])
	return Fields{list: out, vals: f.vals}
}

// AddTo adds the fields to h, the values of one name in their order. One
// string holds all the values (one allocation, not one a field), each value
// a slice of it, as net/textproto does.
func (f Fields) AddTo(h http.Header) {
	if len(f.list) == 0 {
		return
	}
	all := string(f.vals)
	strs := make([]string, len(f.list))
	// Into an empty map, a name that no earlier field had is new: no
	// lookup for it (a few fields compared, not hashed; a long header is
	// looked up, so the comparisons stay few).
	fresh := len(h) == 0 && len(f.list) <= 16
	for i, x := range f.list {
		v := all[x.start:x.end]
		strs[i] = v
		if fresh && !nameIn(f.list[:i], x.k) {
			h[x.k] = strs[i : i+1 : i+1]
			continue
		}
		if vv, ok := h[x.k]; ok {
			h[x.k] = append(vv, v)
		} else {
			h[x.k] = strs[i : i+1 : i+1]
		}
	}
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

// finishHead removes the hop-by-hop fields of the response header readFields
// read (c.fields), and those its Connection fields name, and sets up its
// body. reusable is false when the request was not fully written.
func (c *conn) finishHead(req *Request, status int, reusable bool) (Response, error) {
	b := &c.body
	*b = Body{c: c, http10: b.http10}
	keep := reusable && !c.u.noKeepAlive
	// Only the names readFields saw are looked for (c.seen). A removed
	// field is first blanked (drop), then all go at once (compact).
	keepAlive := false
	if c.seen&fieldConnection != 0 {
		for _, f := range c.fields {
			if f.bits&fieldConnection == 0 {
				continue
			}
			for v := c.vals[f.start:f.end]; len(v) > 0; {
				var tok []byte
				tok, v = nextToken(v)
				switch {
				case len(tok) == 0:
					continue
				case equalFoldTrim(string(tok), "close"):
					keep = false
				case equalFoldTrim(string(tok), "keep-alive"):
					keepAlive = true
				}
				k, _ := canonicalKey(tok)
				c.drop(k)
			}
		}
	}
	if b.http10 && !keepAlive {
		keep = false
	}
	var te, cl []byte
	nte, ncl := 0, 0
	if c.seen&(fieldTransferEncoding|fieldContentLength) != 0 {
		for _, f := range c.fields {
			switch f.k {
			case "Transfer-Encoding":
				nte++
				te = c.vals[f.start:f.end]
			case "Content-Length":
				ncl++
				if ncl == 1 {
					cl = c.vals[f.start:f.end]
				}
			}
		}
	}
	b.keep = keep
	res := Response{Status: status, ContentLength: -1, Body: b}
	switch {
	case req.Method == http.MethodHead || status == http.StatusNoContent || status == http.StatusNotModified:
		b.mode = modeNone
		if status == http.StatusNoContent {
			c.drop("Content-Length")
		}
		if ncl == 1 {
			if n, err := parseLength(cl); err == nil {
				res.ContentLength = n
			}
		}
		if status != http.StatusOK || req.Method != http.MethodHead {
			res.ContentLength = 0
		}
	case nte > 0:
		if nte != 1 || !equalFoldTrim(string(te), "chunked") {
			return Response{}, protoErr("unsupported Transfer-Encoding %q", c.values("Transfer-Encoding"))
		}
		c.drop("Content-Length") // chunked wins (RFC 9112 6.3)
		b.mode = modeChunked
		b.cr = httputil.NewChunkedReader(c.br)
	case ncl > 0:
		n, err := parseLength(cl)
		if ncl > 1 {
			// All equal: the first is relayed.
			first := true
			for i, f := range c.fields {
				if f.k != "Content-Length" {
					continue
				}
				if m, err2 := parseLength(c.vals[f.start:f.end]); err2 != nil || m != n {
					err = protoErr("conflicting Content-Length %q", c.values("Content-Length"))
				}
				if !first {
					c.fields[i].k = ""
				}
				first = false
			}
		}
		if err != nil {
			return Response{}, err
		}
		b.mode, b.remaining, res.ContentLength = modeLength, n, n
		if n == 0 {
			b.mode = modeNone
		}
	default:
		b.mode = modeEOF
		b.keep = false
	}
	c.compact()
	return res, nil
}

// nextToken splits the first comma-separated token, without its spaces and
// tabs, off a field value.
func nextToken(v []byte) (tok, rest []byte) {
	tok, rest = v, nil
	if i := bytes.IndexByte(v, ','); i >= 0 {
		tok, rest = v[:i], v[i+1:]
	}
	for len(tok) > 0 && (tok[0] == ' ' || tok[0] == '\t') {
		tok = tok[1:]
	}
	for len(tok) > 0 && (tok[len(tok)-1] == ' ' || tok[len(tok)-1] == '\t') {
		tok = tok[:len(tok)-1]
	}
	return tok, rest
}

// drop blanks the fields named name (canonical): compact removes them.
func (c *conn) drop(name string) {
	for i := range c.fields {
		if c.fields[i].k == name {
			c.fields[i].k = ""
		}
	}
}

// compact removes the blanked fields and the hop-by-hop ones.
func (c *conn) compact() {
	out := c.fields[:0]
	for _, f := range c.fields {
		if f.k != "" && f.bits&fieldHopByHop == 0 {
			out = append(out, f)
		}
	}
	c.fields = out
}

// values are the values of the fields named name, for an error message.
func (c *conn) values(name string) []string {
	var vv []string
	for _, f := range c.fields {
		if f.k == name {
			vv = append(vv, string(c.vals[f.start:f.end]))
		}
	}
	return vv
}

func parseLength(s []byte) (int64, error) {
	if len(s) == 0 {
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
			// (the header's fields were relayed already: the trailer
			// reuses their scratch)
			total := 0
			if terr := b.c.readFields(&total); terr != nil {
				b.err = terr
				return n, terr
			}
			if len(b.c.fields) > 0 {
				b.trailer = make(http.Header, len(b.c.fields))
				b.c.header().AddTo(b.trailer)
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

// Rest ends a body that is all in memory already (Ready, no trailer to
// come) and returns what was left of it: a view of the connection's buffer,
// valid until Close. ok is false, and nothing changes, for any other body.
func (b *Body) Rest() (p []byte, ok bool) {
	if b.eof || b.err != nil {
		return nil, b.eof && b.err == nil
	}
	switch {
	case b.mode == modeNone:
	case b.mode == modeLength && int64(b.c.br.Buffered()) >= b.remaining:
		p, _ = b.c.br.Peek(int(b.remaining)) // buffered bytes: no I/O
		b.c.br.Discard(len(p))
		b.remaining = 0
	default:
		return nil, false
	}
	b.eof = true
	return p, true
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

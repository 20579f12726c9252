package forward

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"golang.org/x/net/http/httpguts"

	"github.com/sluicelb/sluice/proxy/internal/bufpool"
)

// The request side of Upstream.Do: request line, header and body framing.

// writeHead buffers the request line and header. The head is appended in
// place into the writer's free space and written with one Write (a
// WriteString per fragment was ~22 calls a request); a head longer than
// that space is appended to the connection's scratch instead, kept for its
// next long head.
func (c *conn) writeHead(req *Request, expect bool) {
	b := c.bw.AvailableBuffer()
	avail := cap(b)
	if cap(c.head) > avail {
		b = c.head[:0]
	}
	b = c.appendHead(b, req, expect)
	if len(b) > avail {
		c.head = b[:0]
	}
	c.bw.Write(b)
}

// appendHead appends the request line and header to b.
func (c *conn) appendHead(b []byte, req *Request, expect bool) []byte {
	b = append(b, req.Method...)
	b = append(b, ' ')
	b = append(b, req.URI...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, req.Host...)
	b = append(b, "\r\n"...)
	if req.Fields != nil {
		b = appendFields(b, req)
	} else {
		b = appendHeader(b, req)
	}
	for _, f := range req.Extra {
		b = appendField(b, f.Name, f.Value)
	}
	switch {
	case req.BodyBytes != nil:
		b = appendContentLength(b, int64(len(req.BodyBytes)))
	case req.Body != nil && req.BodyLength >= 0:
		b = appendContentLength(b, req.BodyLength)
	case req.Body != nil:
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	case methodWantsLength(req.Method):
		b = append(b, "Content-Length: 0\r\n"...)
	}
	if expect {
		b = append(b, "Expect: 100-continue\r\n"...)
	}
	if c.u.noKeepAlive {
		b = append(b, "Connection: close\r\n"...)
	}
	return append(b, "\r\n"...)
}

// appendHeader appends the fields of req.Header Do copies.
func appendHeader(b []byte, req *Request) []byte {
	conn := req.Header["Connection"]
	for k, vv := range req.Header {
		if skipRequestHeader(k, conn) || listed(k, req.Skip) || extra(k, req.Extra) {
			continue
		}
		if k == "Te" {
			if httpguts.HeaderValuesContainsToken(vv, "trailers") {
				b = append(b, "Te: trailers\r\n"...)
			}
			continue
		}
		for _, v := range vv {
			b = appendField(b, k, v)
		}
	}
	return b
}

// appendFields appends the fields of req.Fields Do copies: appendHeader's
// rules, field by field. The values of the Connection and Te fields are
// gathered first, as Header has them under their names (up to four each
// on the stack); a Te asking for trailers is written once, where the
// first Te field was.
func appendFields(b []byte, req *Request) []byte {
	var connBuf, teBuf [4]string
	conn, te := connBuf[:0], teBuf[:0]
	for _, f := range req.Fields {
		switch f.Name {
		case "Connection":
			conn = append(conn, f.Value)
		case "Te":
			te = append(te, f.Value)
		}
	}
	teDone := false
	for _, f := range req.Fields {
		k := f.Name
		if skipRequestHeader(k, conn) || listed(k, req.Skip) || extra(k, req.Extra) {
			continue
		}
		if k == "Te" {
			if !teDone && httpguts.HeaderValuesContainsToken(te, "trailers") {
				b = append(b, "Te: trailers\r\n"...)
			}
			teDone = true
			continue
		}
		b = appendField(b, k, f.Value)
	}
	return b
}

// appendField appends the header line "k: v".
func appendField(b []byte, k, v string) []byte {
	b = append(b, k...)
	b = append(b, ": "...)
	b = append(b, v...)
	return append(b, "\r\n"...)
}

// methodWantsLength mirrors net/http: a body-less POST/PUT/PATCH still says
// "Content-Length: 0".
func methodWantsLength(m string) bool {
	return m == http.MethodPost || m == http.MethodPut || m == http.MethodPatch
}

func appendContentLength(b []byte, n int64) []byte {
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, n, 10)
	return append(b, "\r\n"...)
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
	return len(connection) > 0 && httpguts.HeaderValuesContainsToken(connection, k)
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
	buf := bufpool.Get()
	defer bufpool.Put(buf)
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

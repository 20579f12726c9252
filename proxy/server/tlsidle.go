package server

import (
	"bytes"
	"crypto/tls"
	"net"
	"reflect"
	"sync/atomic"
	"unsafe"
)

// Parking idle TLS connections (issue 23).
//
// A parked plain connection waits for the socket to become readable
// (idlepark.go). Over TLS that is not enough: crypto/tls may already hold
// bytes read from the socket, decrypted plaintext not yet taken (tls.Conn's
// input) or whole records not yet decrypted (its rawInput: one socket read
// can bring several records). Two wrappers make both visible:
//
//   - recordConn sits under the tls.Conn and hands it at most one record per
//     Read: bytes beyond the end of the record being read wait in its stash
//     (allocated only then, freed once drained). crypto/tls decrypts each
//     record it has read before it returns plaintext, so it holds no
//     undecrypted byte between two Reads.
//   - tlsIdleConn sits over the tls.Conn: a Read that answered less than
//     asked emptied the plaintext (tls.Conn.Read copies what it holds).
//
// When both are empty, the next request's first byte is still in the
// kernel, and AwaitReadable waits for it on the socket without a buffer.
// Otherwise AwaitReadable answers at once and the connection is not parked
// (tlsIdleConn.Buffered).
//
// crypto/tls's read buffers keep the capacity of the largest record and
// handshake message seen for the connection's whole life: its record buffer
// (and the plaintext reader over it) and its handshake buffer, ≈ 2.7 KiB per
// connection after the ClientHello. releaseTLSBuffers sets them back to their
// zero values: all of them after the handshake (TLSFront.serveConn), and at
// each park the handshake buffer and a record buffer grown above parkKeep by
// a large record (one of a request's body). A record buffer that small
// requests keep at about their size stays: releasing it at each park would
// cost an allocation per request.

// recordConn hands crypto/tls at most one TLS record per Read.
type recordConn struct {
	net.Conn
	wait  readableWaiter // the socket's (sockio.Conn)
	stash []byte         // read from the socket, beyond the record being read
	hdr   [5]byte        // the record header being read
	hdrN  int            // its bytes so far (5: the body is being read)
	left  int            // the body's bytes still to come
	free  bool           // no cutting (HTTP/2: never parked); the stash drains first
}

// Read answers bytes up to the end of the record being read, from the stash
// first, then from the socket.
func (c *recordConn) Read(p []byte) (int, error) {
	if len(c.stash) > 0 {
		n := copy(p, c.stash)
		if !c.free {
			n = c.cut(c.stash[:n])
		}
		c.stash = c.stash[n:]
		if len(c.stash) == 0 {
			c.stash = nil
		}
		return n, nil
	}
	n, err := c.Conn.Read(p)
	if c.free || n == 0 {
		return n, err
	}
	if k := c.cut(p[:n]); k < n {
		c.stash = append([]byte(nil), p[k:n]...)
		return k, nil // an error comes again on the socket's next read
	}
	return n, err
}

// cut follows the record framing over b and answers how many of its bytes
// belong to the record being read (all of b when no record ends in it).
func (c *recordConn) cut(b []byte) int {
	i := 0
	for i < len(b) {
		if c.hdrN < len(c.hdr) {
			k := copy(c.hdr[c.hdrN:], b[i:])
			c.hdrN += k
			i += k
			if c.hdrN < len(c.hdr) {
				return i
			}
			c.left = int(c.hdr[3])<<8 | int(c.hdr[4])
		}
		k := min(c.left, len(b)-i)
		c.left -= k
		i += k
		if c.left == 0 { // the record ends here
			c.hdrN = 0
			return i
		}
	}
	return i
}

// pending reports bytes read from the socket and not yet handed on.
func (c *recordConn) pending() bool { return len(c.stash) > 0 }

// parkKeep is the record buffer capacity a parked connection keeps.
const parkKeep = 4 << 10

// tlsIdleConn is a server-side TLS connection that can be parked.
type tlsIdleConn struct {
	*tls.Conn
	rec      *recordConn
	drained  bool        // the last Read emptied the plaintext crypto/tls held
	released atomic.Bool // crypto/tls's read buffers were let go at the last park (tests read it)
}

// tlsServer returns the TLS server connection over c, read record by record
// when c can wait for readability (sockio.Conn); rec is nil otherwise.
func tlsServer(c net.Conn, cfg *tls.Config) (tc *tls.Conn, rec *recordConn) {
	w, ok := c.(readableWaiter)
	if !ok {
		return tls.Server(c, cfg), nil
	}
	rec = &recordConn{Conn: c, wait: w}
	return tls.Server(rec, cfg), rec
}

// parkable returns tc, handshaken over rec, as a connection the fasthttp
// front can park (tc itself when rec is nil).
func parkable(tc *tls.Conn, rec *recordConn) net.Conn {
	if rec == nil {
		return tc
	}
	return &tlsIdleConn{Conn: tc, rec: rec, drained: true} // a handshake leaves no plaintext
}

func (c *tlsIdleConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.drained = n < len(p) || err != nil
	return n, err
}

// Buffered reports whether crypto/tls or the record reader may hold bytes of
// the next request: then the connection is not parked.
func (c *tlsIdleConn) Buffered() bool { return !c.drained || c.rec.pending() }

// AwaitReadable waits until the next request's first byte is there (see
// Buffered), or the read deadline passes.
func (c *tlsIdleConn) AwaitReadable() error {
	if c.Buffered() {
		return nil
	}
	c.released.Store(releaseTLSBuffers(c.Conn, parkKeep))
	return c.rec.wait.AwaitReadable()
}

// tlsBufs are the offsets in crypto/tls.Conn of its read buffers,
// unexported fields found by name and type: rawInput and hand (bytes.Buffer)
// and input (bytes.Reader, over rawInput's memory). ok is false (nothing is
// released) when a Go release renamed or retyped one of them;
// TestTLSFrontParkReleasesTLSBuffers fails then.
var tlsBufs = func() (b struct {
	ok                    bool
	rawInput, hand, input uintptr
}) {
	t := reflect.TypeFor[tls.Conn]()
	field := func(name string, typ reflect.Type) uintptr {
		f, ok := t.FieldByName(name)
		if !ok || f.Type != typ {
			return 0
		}
		return f.Offset
	}
	b.rawInput = field("rawInput", reflect.TypeFor[bytes.Buffer]())
	b.hand = field("hand", reflect.TypeFor[bytes.Buffer]())
	b.input = field("input", reflect.TypeFor[bytes.Reader]())
	b.ok = b.rawInput != 0 && b.hand != 0 && b.input != 0
	return b
}()

// releaseTLSBuffers lets go of tc's read buffers when all are empty: the
// handshake buffer, and the record buffer (with the plaintext reader over it)
// when its capacity is above keep. It reports whether they were empty. Only
// while no Read runs (after the handshake, or parked; crypto/tls's Write and
// Close touch none of them).
func releaseTLSBuffers(tc *tls.Conn, keep int) bool {
	if !tlsBufs.ok {
		return false
	}
	p := unsafe.Pointer(tc)
	raw := (*bytes.Buffer)(unsafe.Add(p, tlsBufs.rawInput))
	hand := (*bytes.Buffer)(unsafe.Add(p, tlsBufs.hand))
	input := (*bytes.Reader)(unsafe.Add(p, tlsBufs.input))
	if raw.Len() > 0 || hand.Len() > 0 || input.Len() > 0 {
		return false
	}
	*hand = bytes.Buffer{}
	if raw.Cap() > keep {
		*raw = bytes.Buffer{}
		input.Reset(nil) // its slice is rawInput's memory
	}
	return true
}

package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicelb/sluice/testkit/poll"
)

// chunkConn answers its chunks one per Read (for recordConn's unit tests).
type chunkConn struct {
	net.Conn
	chunks [][]byte
}

func (c *chunkConn) Read(p []byte) (int, error) {
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	if c.chunks[0] = c.chunks[0][n:]; len(c.chunks[0]) == 0 {
		c.chunks = c.chunks[1:]
	}
	return n, nil
}

// records returns n TLS-framed records of random lengths (empty ones too)
// and the offsets where each ends.
func records(r *rand.Rand, n int) (stream []byte, ends map[int]bool) {
	ends = map[int]bool{}
	for i := 0; i < n; i++ {
		body := make([]byte, r.IntN(700))
		for j := range body {
			body[j] = byte(r.IntN(256))
		}
		stream = append(stream, 23, 3, 3, byte(len(body)>>8), byte(len(body)))
		stream = append(stream, body...)
		ends[len(stream)] = true
	}
	return stream, ends
}

// TestRecordConnOneRecordPerRead: whatever the socket's chunks, each Read
// ends at or before the end of the record being read, nothing is lost or
// reordered, and the stash is freed once drained.
func TestRecordConnOneRecordPerRead(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for round := 0; round < 200; round++ {
		stream, ends := records(r, 1+r.IntN(6))
		var chunks [][]byte
		for rest := stream; len(rest) > 0; {
			k := min(len(rest), 1+r.IntN(1500))
			chunks = append(chunks, append([]byte(nil), rest[:k]...))
			rest = rest[k:]
		}
		rc := &recordConn{Conn: &chunkConn{chunks: chunks}}
		var got []byte
		for {
			p := make([]byte, 1+r.IntN(2000))
			n, err := rc.Read(p)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			for off := len(got) + 1; off < len(got)+n; off++ {
				if ends[off] {
					t.Fatalf("round %d: a Read of %d bytes at %d crosses the record end at %d", round, n, len(got), off)
				}
			}
			got = append(got, p[:n]...)
		}
		if !bytes.Equal(got, stream) {
			t.Fatalf("round %d: read %d bytes, not the %d sent", round, len(got), len(stream))
		}
		if rc.stash != nil || rc.hdrN != 0 || rc.left != 0 {
			t.Fatalf("round %d: after the last record: stash %d bytes, header %d, left %d", round, len(rc.stash), rc.hdrN, rc.left)
		}
	}
}

// flushConn, once holding, keeps what is written until flush sends it in
// one write: two TLS records arrive in one segment, or a record in two.
type flushConn struct {
	net.Conn
	hold bool
	buf  []byte
}

func (c *flushConn) Write(p []byte) (int, error) {
	if !c.hold {
		return c.Conn.Write(p)
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}

func (c *flushConn) flush(t *testing.T, n int) {
	t.Helper()
	n = min(n, len(c.buf))
	if _, err := c.Conn.Write(c.buf[:n]); err != nil {
		t.Fatal(err)
	}
	c.buf = c.buf[n:]
}

// dialTLSFlush makes a TLS HTTP/1.1 client connection whose writes after
// the handshake wait for flush.
func dialTLSFlush(t *testing.T, addr string, cfg *tls.Config) (*tls.Conn, *flushConn, *bufio.Reader) {
	t.Helper()
	raw, _ := dialFront(t, addr)
	fc := &flushConn{Conn: raw}
	tc := tls.Client(fc, cfg)
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	fc.hold = true
	return tc, fc, bufio.NewReader(tc)
}

func tlsClientConfig(pool *x509.CertPool) *tls.Config {
	return &tls.Config{RootCAs: pool, ServerName: "demo.test", NextProtos: []string{"http/1.1"}}
}

// TestTLSFrontParksIdleConnections: an idle TLS keep-alive connection on the
// fasthttp front parks (no fasthttp buffers), then answers its next request;
// two records in one segment, a record split inside its header and two
// requests in one record are all answered, each time parked again after.
func TestTLSFrontParksIdleConnections(t *testing.T) {
	snap, _ := frontSnapshot(t)
	tf, addr, pool := tlsProxy(t, FrontFastHTTP, snap)
	tc, fc, br := dialTLSFlush(t, addr, tlsClientConfig(pool))
	small := len("small body\n")
	parked := func(what string) {
		t.Helper()
		poll.EventuallyTrue(t, 10*time.Second, what, func() bool { return parkedConns(tf.fast) == 1 })
	}
	for round := 0; round < 3; round++ {
		io.WriteString(tc, smallGET)
		fc.flush(t, len(fc.buf))
		readAnswers(t, br, small)
		parked("the idle TLS connection parked")
	}
	io.WriteString(tc, smallGET) // two records, one segment
	io.WriteString(tc, "GET /big HTTP/1.1\r\nHost: demo.test\r\n\r\n")
	fc.flush(t, len(fc.buf))
	readAnswers(t, br, small, 200000)
	parked("parked after two records in one segment")
	io.WriteString(tc, smallGET+smallGET) // one record, two requests, sent in two parts
	fc.flush(t, 3)
	time.Sleep(10 * time.Millisecond) // a second segment, not a wait for state
	fc.flush(t, len(fc.buf))
	readAnswers(t, br, small, small)
	parked("parked after a split record")
}

// TestTLSFrontParkedClientCloses: a parked TLS connection the client closes
// is closed and untracked.
func TestTLSFrontParkedClientCloses(t *testing.T) {
	snap, _ := frontSnapshot(t)
	tf, addr, pool := tlsProxy(t, FrontFastHTTP, snap)
	tc, fc, br := dialTLSFlush(t, addr, tlsClientConfig(pool))
	io.WriteString(tc, smallGET)
	fc.flush(t, len(fc.buf))
	readAnswers(t, br, len("small body\n"))
	poll.EventuallyTrue(t, 10*time.Second, "parked", func() bool { return parkedConns(tf.fast) == 1 })
	fc.Conn.Close()
	poll.EventuallyTrue(t, 10*time.Second, "the closed connection untracked", func() bool { return fastConns(tf.fast) == 0 })
}

// TestTLSFrontParkedIdleTimeoutAndShutdown: a parked TLS connection closes
// after the idle timeout, and Shutdown closes a parked one and returns.
func TestTLSFrontParkedIdleTimeoutAndShutdown(t *testing.T) {
	snap, _ := frontSnapshot(t)
	tf, addr, pool := tlsProxyWith(t, FrontFastHTTP, snap, FrontOptions{IdleTimeout: 300 * time.Millisecond})
	tc, fc, br := dialTLSFlush(t, addr, tlsClientConfig(pool))
	io.WriteString(tc, smallGET)
	fc.flush(t, len(fc.buf))
	readAnswers(t, br, len("small body\n"))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("read on the idle TLS connection: %v, want EOF (closed by the idle timeout)", err)
	}
	poll.EventuallyTrue(t, 10*time.Second, "the timed-out connection untracked", func() bool { return fastConns(tf.fast) == 0 })

	tc, fc, br = dialTLSFlush(t, addr, tlsClientConfig(pool))
	io.WriteString(tc, smallGET)
	fc.flush(t, len(fc.buf))
	readAnswers(t, br, len("small body\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tf.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("read on the TLS connection after Shutdown: %v, want EOF", err)
	}
}

// BenchmarkRecordConn reads a stream of 16 small records that arrive in one
// socket read (the stash path), as crypto/tls does.
func BenchmarkRecordConn(b *testing.B) {
	stream, _ := records(rand.New(rand.NewPCG(1, 2)), 16)
	p := make([]byte, 4096)
	b.ReportAllocs()
	b.SetBytes(int64(len(stream)))
	for i := 0; i < b.N; i++ {
		rc := &recordConn{Conn: &chunkConn{chunks: [][]byte{stream}}}
		for {
			if _, err := rc.Read(p); err != nil {
				break
			}
		}
	}
}

// parkedReleased reports whether the fasthttp front's parked TLS
// connection let go of crypto/tls's read buffers at its last park.
func parkedReleased(f *FastFront) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		if ac, ok := c.(*addrConn); ok && ac.park.Load() == connParked {
			if tc, ok := ac.Conn.(*tlsIdleConn); ok && tc.released.Load() {
				return true
			}
		}
	}
	return false
}

// TestTLSFrontParkReleasesTLSBuffers: each park of an idle TLS connection
// lets go of crypto/tls's read buffers, and the connection answers its next
// requests after.
func TestTLSFrontParkReleasesTLSBuffers(t *testing.T) {
	snap, _ := frontSnapshot(t)
	tf, addr, pool := tlsProxy(t, FrontFastHTTP, snap)
	tc, fc, br := dialTLSFlush(t, addr, tlsClientConfig(pool))
	for round := 0; round < 3; round++ {
		io.WriteString(tc, smallGET)
		fc.flush(t, len(fc.buf))
		readAnswers(t, br, len("small body\n"))
		poll.EventuallyTrue(t, 10*time.Second, "parked with crypto/tls's buffers released", func() bool { return parkedReleased(tf.fast) })
		tf.fast.mu.Lock()
		for c := range tf.fast.conns {
			c.(*addrConn).Conn.(*tlsIdleConn).released.Store(false) // the next park sets it again
		}
		tf.fast.mu.Unlock()
	}
}

// tlsBufCaps are the capacities of tc's read buffers: rawInput, hand, and
// the size of input's slice.
func tlsBufCaps(tc *tls.Conn) [3]int {
	p := unsafe.Pointer(tc)
	return [3]int{(*bytes.Buffer)(unsafe.Add(p, tlsBufs.rawInput)).Cap(), (*bytes.Buffer)(unsafe.Add(p, tlsBufs.hand)).Cap(),
		int((*bytes.Reader)(unsafe.Add(p, tlsBufs.input)).Size())}
}

// TestReleaseTLSBuffers: with nothing left to read, releaseTLSBuffers
// empties crypto/tls's handshake buffer, and its record buffer (with the
// plaintext reader over it) when that is above keep, and the connection
// reads on; with plaintext not yet read it changes nothing and loses no byte.
func TestReleaseTLSBuffers(t *testing.T) {
	if !tlsBufs.ok {
		t.Fatal("crypto/tls.Conn's rawInput, hand or input not found: this Go release renamed them, and releaseTLSBuffers releases nothing")
	}
	cert, pool := testCertificate(t)
	cc, sc := net.Pipe()
	defer cc.Close()
	client := tls.Client(cc, &tls.Config{RootCAs: pool, ServerName: "demo.test"})
	server := tls.Server(sc, &tls.Config{Certificates: []tls.Certificate{cert}})
	defer server.Close()
	exchange := func(send string, n int) string { // the client sends, the server reads n bytes
		t.Helper()
		done := make(chan error, 1)
		go func() { _, err := io.WriteString(client, send); done <- err }()
		p := make([]byte, n)
		if _, err := io.ReadFull(server, p); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return string(p)
	}
	hs := make(chan error, 1)
	go func() { hs <- client.Handshake() }()
	if err := server.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-hs; err != nil {
		t.Fatal(err)
	}
	if got := exchange("first", 5); got != "first" {
		t.Fatalf("read %q", got)
	}
	if caps := tlsBufCaps(server); caps[0] == 0 || caps[1] == 0 {
		t.Fatalf("capacities %v before the release: want rawInput and hand grown by the handshake", caps)
	}
	if !releaseTLSBuffers(server, 0) {
		t.Fatal("nothing left to read: not released")
	}
	if caps := tlsBufCaps(server); caps != [3]int{} {
		t.Fatalf("capacities %v after the release, want all 0", caps)
	}
	if got := exchange("small", 5); got != "small" {
		t.Fatalf("read %q after the release", got)
	}
	small := tlsBufCaps(server)
	if !releaseTLSBuffers(server, parkKeep) || tlsBufCaps(server) != small || small[0] == 0 || small[0] > parkKeep {
		t.Fatalf("a small record's buffer (capacities %v) released at a park (now %v), want it kept", small, tlsBufCaps(server))
	}
	big := strings.Repeat("b", 12000)
	if got := exchange(big, len(big)); got != big {
		t.Fatalf("read %d bytes of the big record, want %d", len(got), len(big))
	}
	if caps := tlsBufCaps(server); caps[0] <= parkKeep {
		t.Fatalf("capacities %v after a 12 000-byte record, want rawInput above %d", caps, parkKeep)
	}
	if !releaseTLSBuffers(server, parkKeep) || tlsBufCaps(server) != [3]int{} {
		t.Fatalf("a big record's buffer kept at a park: capacities %v, want all 0", tlsBufCaps(server))
	}
	if got := exchange("second record", 6); got != "second" {
		t.Fatalf("read %q after the release", got)
	}
	before := tlsBufCaps(server)
	if releaseTLSBuffers(server, 0) {
		t.Fatal("released with \" record\" not yet read")
	}
	if caps := tlsBufCaps(server); caps != before {
		t.Fatalf("capacities %v after a refused release, want %v", caps, before)
	}
	p := make([]byte, 7)
	if _, err := io.ReadFull(server, p); err != nil || string(p) != " record" {
		t.Fatalf("read %q, %v after a refused release, want \" record\"", p, err)
	}
}

// TestTLSFrontHandsOnWithoutHandshakeBuffers: the connection a TLSFront
// hands to net/http (HTTP/2, or HTTP/1.1 on the std front) after the
// handshake holds no handshake-sized crypto/tls buffer.
func TestTLSFrontHandsOnWithoutHandshakeBuffers(t *testing.T) {
	cert, pool := testCertificate(t)
	tf := &TLSFront{cfg: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}},
		handshake: 10 * time.Second, h2: newConnQueue(), h1: newConnQueue()}
	tf.ctx, tf.cancel = context.WithCancel(context.Background())
	defer tf.cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, proto := range []string{"h2", "http/1.1"} {
		dialed := make(chan error, 1)
		go func() {
			c, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "demo.test", NextProtos: []string{proto}})
			if err == nil {
				defer c.Close()
				_, err = c.Read(make([]byte, 1)) // until the server closes (the test is done with it)
				if errors.Is(err, io.EOF) {
					err = nil
				}
			}
			dialed <- err
		}()
		raw, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		tf.wg.Add(1)
		go tf.serveConn(raw)
		c, err := tf.h2.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if caps := tlsBufCaps(c.(*tls.Conn)); caps != [3]int{} {
			t.Errorf("ALPN %s: handed on with crypto/tls buffer capacities %v, want all 0", proto, caps)
		}
		c.Close()
		if err := <-dialed; err != nil {
			t.Fatalf("ALPN %s: client: %v", proto, err)
		}
	}
	tf.wg.Wait()
}

package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/sluicelb/sluice/proxy/internal/sockio"
)

// TLSFront serves a TLS listener. It makes the handshake itself and hands
// each connection on by the protocol the client chose (ALPN): "h2" to
// our HTTP/2 server (h2conn.go; net/http's with H2Server xnet), "http/1.1" or none to the fasthttp front over
// the TLS connection (the std front's HTTP/1.1 when fasthttp is not the
// kind, or the std upstream client is used).
type TLSFront struct {
	cfg       *tls.Config
	handshake time.Duration // bounds each handshake (ReadHeaderTimeout)
	std       *http.Server
	h2s       *h2Server  // --h2-server sluice: serves h2 instead of std
	fast      *FastFront // nil: std serves HTTP/1.1 too
	h2, h1    *connQueue // the handshaken connections for std and fast

	ctx    context.Context // ends the handshakes under way at Shutdown and Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // handshakes and the two inner Serve loops

	mu      sync.Mutex
	ln      net.Listener
	closing bool
}

// TLSFront returns the front of a TLS listener: o.Certificates are required;
// kind is the HTTP/1.1 server as for NewFront ("" is FrontStd).
func (s *Server) TLSFront(kind string, o FrontOptions) (*TLSFront, error) {
	if len(o.Certificates) == 0 {
		return nil, errors.New("server: a TLS front needs at least one certificate")
	}
	std, err := s.HTTPServer(o)
	if err != nil {
		return nil, err
	}
	// HTTP/2 answers' headers are not added to HPACK's dynamic table (as
	// nginx does): an idle connection then holds no encoder table (its maps
	// and entries, 1-5 KiB); the static table and Huffman coding still apply.
	std.HTTP2 = &http.HTTP2Config{MaxEncoderHeaderTableSize: 1}
	if o.H2MaxPrematureResets < 0 {
		return nil, fmt.Errorf("server: H2MaxPrematureResets %d: want 0 (no limit) or a positive count", o.H2MaxPrematureResets)
	}
	if o.H2MaxPrematureResets > 0 {
		g := &resetGuard{limit: o.H2MaxPrematureResets, next: std.Handler, s: s, now: time.Now}
		std.Handler, std.ConnContext = g, g.connContext
	}
	t := &TLSFront{cfg: recordSizing(std.TLSConfig), handshake: std.ReadHeaderTimeout, std: std, h2: newConnQueue(), h1: newConnQueue()}
	switch o.H2Server {
	case H2ServerXNet:
	case "", H2ServerSluice:
		parkAfter, err := parkIdleAfter(o)
		if err != nil {
			return nil, err
		}
		t.h2s = newH2Server(std, std.ReadHeaderTimeout, parkAfter)
		if h2TestTune != nil {
			h2TestTune(t.h2s)
		}
	default:
		return nil, fmt.Errorf("server: H2Server %q: want %q or %q", o.H2Server, H2ServerSluice, H2ServerXNet)
	}
	switch kind {
	case "", FrontStd:
	case FrontFastHTTP:
		fo := o
		fo.Certificates = nil
		if t.fast, err = s.FastHTTPServer(fo); err != nil {
			return nil, err
		}
		// fasthttp flushes its write buffer whenever it is full, and
		// crypto/tls makes one record and one write of each flush: with
		// fasthttp's default 4 KiB, a 60 KB answer went out in 15 records and
		// 15 writes (nginx: 4). At 16 KiB, a TLS record's most, every full
		// flush is one full record. A connection holds the buffer only while
		// fasthttp serves it, not parked (idlepark.go).
		t.fast.fs.WriteBufferSize = tlsWriteBuffer
	default:
		return nil, fmt.Errorf("server: front %q: want %q or %q", kind, FrontStd, FrontFastHTTP)
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	return t, nil
}

// tlsWriteBuffer is the write buffer of the fasthttp front over TLS: a full
// TLS record's plaintext.
const tlsWriteBuffer = 16 << 10

// recordSizing returns cfg for the handshake: a client that does not offer
// h2 (so HTTP/1.1) gets full-size TLS records from its first answer on, as
// nginx sends them (ssl_buffer_size 16k), instead of crypto/tls's dynamic
// record sizing, which starts a connection with ≈ 1.2 KiB records and grows
// them by as much per record: on a new connection, 16 KiB flushed at once
// went out in 6 records and 6 writes instead of 1. The cost, as for nginx: on
// a new connection over a slow link, the first record (the head and the
// start of the body) may take a round trip more to arrive whole before the
// client can decrypt it. HTTP/2 clients (browsers: one connection for a whole
// page, frames flushed in bulk) keep dynamic sizing. Session tickets stay the base config's (crypto/tls takes
// the automatic ticket keys from it).
func recordSizing(cfg *tls.Config) *tls.Config {
	h1 := cfg.Clone()
	h1.DynamicRecordSizingDisabled = true
	base := cfg.Clone()
	base.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		if slices.Contains(hello.SupportedProtos, "h2") {
			return nil, nil
		}
		return h1, nil
	}
	return base
}

// Serve accepts TLS clients on l (plain TCP: TLSFront makes the handshake)
// until Shutdown or Close, then answers http.ErrServerClosed.
func (t *TLSFront) Serve(l net.Listener) error {
	t.mu.Lock()
	if t.closing {
		t.mu.Unlock()
		return http.ErrServerClosed
	}
	t.ln = l
	t.wg.Add(1)
	go func() { defer t.wg.Done(); _ = t.std.Serve(t.h2) }()
	if t.fast != nil {
		t.wg.Add(1)
		go func() { defer t.wg.Done(); _ = t.fast.Serve(t.h1) }()
	}
	t.mu.Unlock()
	for {
		c, err := l.Accept()
		if err != nil {
			t.mu.Lock()
			closing := t.closing
			t.mu.Unlock()
			if closing {
				return http.ErrServerClosed
			}
			return err
		}
		t.mu.Lock()
		if t.closing { // no wg.Add once Shutdown or Close may be waiting
			t.mu.Unlock()
			c.Close()
			return http.ErrServerClosed
		}
		t.wg.Add(1)
		t.mu.Unlock()
		go t.serveConn(c)
	}
}

// serveConn makes the handshake and hands the connection on by ALPN.
func (t *TLSFront) serveConn(c net.Conn) {
	defer t.wg.Done()
	tc, rec := tlsServer(sockio.Wrap(c), t.cfg)
	ctx, cancel := context.WithTimeout(t.ctx, t.handshake)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		c.Close()
		return
	}
	releaseTLSBuffers(tc, 0) // the handshake's capacity (ClientHello): no Read runs yet, whichever server reads next
	h2 := tc.ConnectionState().NegotiatedProtocol == "h2"
	if t.h2s != nil && h2 {
		if rec != nil {
			rec.free = true // the whole socket read at once: crypto/tls's buffer tells what is left
		}
		t.h2s.serve(tc, rec)
		return
	}
	if t.fast == nil || h2 {
		if rec != nil {
			rec.free = true // net/http is never parked: no cutting
		}
		t.h2.push(tc)
		return
	}
	t.h1.push(parkable(tc, rec))
}

// Shutdown stops accepting and handshaking, then shuts both servers down
// (idle connections closed, busy ones waited for until ctx is done).
func (t *TLSFront) Shutdown(ctx context.Context) error {
	t.stop()
	var err error
	if t.fast != nil {
		err = t.fast.Shutdown(ctx)
	}
	if serr := t.std.Shutdown(ctx); err == nil {
		err = serr
	}
	if t.h2s != nil {
		if serr := t.h2s.shutdown(ctx); err == nil {
			err = serr
		}
	}
	t.wg.Wait()
	return err
}

// Close closes the listener and every connection now.
func (t *TLSFront) Close() error {
	t.stop()
	var err error
	if t.fast != nil {
		err = t.fast.Close()
	}
	if serr := t.std.Close(); err == nil {
		err = serr
	}
	t.wg.Wait() // no handshake hands a connection on after this
	if t.h2s != nil {
		t.h2s.closeAll()
	}
	return err
}

func (t *TLSFront) stop() {
	t.mu.Lock()
	t.closing = true
	ln := t.ln
	t.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	t.cancel()
	t.h2.Close()
	t.h1.Close()
}

// h2TestTune, set by tests only, changes the sluice HTTP/2 server's limits
// before it serves.
var h2TestTune func(*h2Server)

// connQueue is the listener an inner server accepts handshaken connections
// from.
type connQueue struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newConnQueue() *connQueue {
	return &connQueue{ch: make(chan net.Conn), done: make(chan struct{})}
}

// push hands c to the server, or closes it once the queue is closed.
func (q *connQueue) push(c net.Conn) {
	select {
	case q.ch <- c:
	case <-q.done:
		c.Close()
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.done) })
	return nil
}

func (q *connQueue) Addr() net.Addr { return queueAddr{} }

type queueAddr struct{}

func (queueAddr) Network() string { return "tls" }
func (queueAddr) String() string  { return "tls-front" }

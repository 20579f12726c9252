package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluicelb/sluice/proxy/internal/connlimit"
	"github.com/sluicelb/sluice/proxy/internal/sockio"
	"github.com/sluicelb/sluice/testkit/poll"
)

// limitMode is a front under a connlimit.Limiter and how clients speak to it.
type limitMode struct {
	name string
	kind string // FrontStd or FrontFastHTTP (with TLS: the HTTP/1.1 server)
	tls  bool
	h2   bool // clients speak HTTP/2 (ALPN h2: net/http)
}

var limitModes = []limitMode{
	{"fasthttp", FrontFastHTTP, false, false},
	{"std", FrontStd, false, false},
	{"tls-std", FrontStd, true, false},
	{"tls-fasthttp", FrontFastHTTP, true, false},
	{"h2", FrontFastHTTP, true, true},
}

// holdBackend answers /hold only once release is closed, telling arrived
// first; other paths as frontBackend.
type holdBackend struct {
	arrived chan struct{}
	release chan struct{}
	once    sync.Once
}

// let releases /hold (idempotent; at cleanup too, so a failed test ends).
func (h *holdBackend) let() { h.once.Do(func() { close(h.release) }) }

func (h *holdBackend) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/hold" {
		frontBackend(w, r)
		return
	}
	select {
	case h.arrived <- struct{}{}:
	default: // a test that failed may send more
	}
	<-h.release
	io.WriteString(w, "held\n")
}

// limitedProxy serves a Server with the front of m on loopback, its
// listener wrapped as lbproxy wraps it (connlimit over sockio).
func limitedProxy(t *testing.T, m limitMode, lim *connlimit.Limiter, h *holdBackend) (string, *x509.CertPool) {
	t.Helper()
	b := newBackend(t, "b1", h.serve)
	snap := oneBackendSnapshot(b)
	wrap := func(l net.Listener) net.Listener { return lim.Listener(sockio.Listener{Listener: l}) }
	if m.tls {
		_, addr, pool := tlsProxyWrapped(t, m.kind, snap, FrontOptions{}, wrap)
		return addr, pool
	}
	return newProxy(t, snap, proxyOpts{frontKind: m.kind, opts: Options{UpstreamClient: UpstreamFast}, wrap: wrap}).addr, nil
}

// eofConn records that the server closed the connection (a read saw EOF).
type eofConn struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (c *eofConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if errors.Is(err, io.EOF) {
		c.once.Do(func() { close(c.closed) })
	}
	return n, err
}

// limitClient is one client connection.
type limitClient struct {
	raw  *eofConn
	conn net.Conn // raw, or TLS over it
	br   *bufio.Reader
	tr   *http.Transport // HTTP/2 over conn
}

func dialLimited(t *testing.T, m limitMode, addr string, pool *x509.CertPool) *limitClient {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	lc := &limitClient{raw: &eofConn{Conn: c, closed: make(chan struct{})}}
	lc.conn = lc.raw
	t.Cleanup(func() { c.Close() })
	if m.tls {
		protos := []string{"http/1.1"}
		if m.h2 {
			protos = []string{"h2"}
		}
		tc := tls.Client(lc.raw, &tls.Config{RootCAs: pool, ServerName: "demo.test", NextProtos: protos})
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		lc.conn = tc
		if m.h2 {
			lc.tr = &http.Transport{ForceAttemptHTTP2: true,
				DialTLSContext: func(context.Context, string, string) (net.Conn, error) { return tc, nil }}
			t.Cleanup(lc.tr.CloseIdleConnections)
		}
	}
	lc.br = bufio.NewReader(lc.conn)
	return lc
}

// get asks for path and answers the status and body.
func (c *limitClient) get(path string) (int, string, error) {
	var res *http.Response
	var err error
	if c.tr != nil {
		req, _ := http.NewRequest(http.MethodGet, "https://demo.test"+path, nil)
		res, err = c.tr.RoundTrip(req)
	} else if _, err = fmt.Fprintf(c.conn, "GET %s HTTP/1.1\r\nHost: demo.test\r\n\r\n", path); err == nil {
		res, err = http.ReadResponse(c.br, nil)
	}
	if err != nil {
		return 0, "", err
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	return res.StatusCode, string(b), err
}

func (c *limitClient) ok(t *testing.T, name, path, want string) {
	t.Helper()
	if st, body, err := c.get(path); err != nil || st != 200 || body != want {
		t.Fatalf("%s: GET %s: %d %q, %v; want 200 %q", name, path, st, body, err, want)
	}
}

// closedByServer waits until the server closed c (EOF under TLS too).
func (c *limitClient) closedByServer(t *testing.T, name string) {
	t.Helper()
	if c.tr == nil {
		go io.Copy(io.Discard, c.conn) // (HTTP/2: the transport reads)
	}
	select {
	case <-c.raw.closed:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: not closed by the server", name)
	}
}

func waitConns(t *testing.T, lim *connlimit.Limiter, open, idle int) {
	t.Helper()
	poll.Eventually(t, 20*time.Second, "client connections", func() error {
		if o, i := lim.Open(), lim.IdleConns(); o != open || i != idle {
			return fmt.Errorf("%d open, %d idle; want %d, %d", o, i, open, idle)
		}
		return nil
	})
}

// TestConnLimitEvictsOldestIdleEveryFront: on every front, at
// --max-client-conns a new connection closes the one idle the longest —
// exactly that one; a connection with a request in flight is not evicted
// and its request finishes; the others go on serving.
func TestConnLimitEvictsOldestIdleEveryFront(t *testing.T) {
	for _, m := range limitModes {
		t.Run(m.name, func(t *testing.T) {
			lim := connlimit.New(connlimit.Options{Max: 3})
			h := &holdBackend{arrived: make(chan struct{}, 1), release: make(chan struct{})}
			addr, pool := limitedProxy(t, m, lim, h)
			t.Cleanup(h.let)                      // before the backend's Close
			busy := dialLimited(t, m, addr, pool) // the oldest, busy
			waitConns(t, lim, 1, 1)
			held := make(chan error, 1)
			go func() {
				st, body, err := busy.get("/hold")
				if err == nil && (st != 200 || body != "held\n") {
					err = fmt.Errorf("%d %q", st, body)
				}
				held <- err
			}()
			select {
			case <-h.arrived:
			case err := <-held:
				t.Fatalf("/hold: %v before it reached the backend", err)
			}
			waitConns(t, lim, 1, 0)
			a := dialLimited(t, m, addr, pool)
			a.ok(t, "a", "/small", "small body\n")
			waitConns(t, lim, 2, 1)
			b := dialLimited(t, m, addr, pool)
			b.ok(t, "b", "/small", "small body\n")
			waitConns(t, lim, 3, 2)

			c := dialLimited(t, m, addr, pool) // a, idle the longest, goes
			c.ok(t, "c", "/small", "small body\n")
			a.closedByServer(t, "a (oldest idle)")
			waitConns(t, lim, 3, 2)
			if e, r := lim.Evicted(), lim.Rejected(connlimit.ReasonMax); e != 1 || r != 0 {
				t.Fatalf("evicted %d, refused %d; want 1, 0", e, r)
			}
			h.let()
			if err := <-held; err != nil {
				t.Fatalf("the busy connection's request: %v; want 200 held", err)
			}
			b.ok(t, "b", "/small", "small body\n")
			c.ok(t, "c", "/small", "small body\n")
			busy.ok(t, "busy", "/small", "small body\n")
			if e := lim.Evicted(); e != 1 {
				t.Fatalf("evicted %d, want 1", e)
			}
		})
	}
}

// BenchmarkFrontConnLimit is BenchmarkFront's keep-alive GET with the
// listener wrapped as lbproxy wraps it: sockio alone, or under a
// connlimit.Limiter with a total limit (its idle list then moves twice per
// request).
func BenchmarkFrontConnLimit(b *testing.B) {
	for _, kind := range []string{FrontStd, FrontFastHTTP} {
		for _, limited := range []bool{false, true} {
			name := kind + "/sockio"
			wrap := func(l net.Listener) net.Listener { return sockio.Listener{Listener: l} }
			if limited {
				name = kind + "/limited"
				lim := connlimit.New(connlimit.Options{Max: 1 << 20, PerIP: 1 << 20})
				wrap = func(l net.Listener) net.Listener { return lim.Listener(sockio.Listener{Listener: l}) }
			}
			b.Run(name, func(b *testing.B) {
				p := newProxy(b, benchSnapshot(b), proxyOpts{frontKind: kind, opts: Options{UpstreamClient: UpstreamFast}, wrap: wrap})
				conn, err := net.Dial("tcp", p.addr)
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close()
				benchGETs(b, conn)
			})
		}
	}
}

package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/proxy/internal/balance"
	"github.com/sluicelb/sluice/proxy/internal/forward"
)

// testCertificate is a self-signed ECDSA P-256 certificate for demo.test.
func testCertificate(t testing.TB) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "demo.test"},
		DNSNames: []string{"demo.test"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// tlsProxy is a Server behind a TLSFront of the given kind on loopback.
func tlsProxy(t testing.TB, kind string, snap *snapshot.Snapshot) (*TLSFront, string, *x509.CertPool) {
	t.Helper()
	return tlsProxyWith(t, kind, snap, FrontOptions{})
}

// tlsProxyWith is tlsProxy with front options (the certificate is added).
func tlsProxyWith(t testing.TB, kind string, snap *snapshot.Snapshot, fo FrontOptions) (*TLSFront, string, *x509.CertPool) {
	t.Helper()
	return tlsProxyTuned(t, kind, snap, fo, nil)
}

// tlsProxyTuned is tlsProxyWith; tune (if not nil) changes the HTTP/2
// server (net/http's) before it serves.
func tlsProxyTuned(t testing.TB, kind string, snap *snapshot.Snapshot, fo FrontOptions, tune func(*http.Server)) (*TLSFront, string, *x509.CertPool) {
	t.Helper()
	return tlsProxyOpts(t, kind, snap, fo, tune, nil)
}

// tlsProxyWrapped is tlsProxyWith serving wrap(listener) when wrap is set.
func tlsProxyWrapped(t testing.TB, kind string, snap *snapshot.Snapshot, fo FrontOptions, wrap func(net.Listener) net.Listener) (*TLSFront, string, *x509.CertPool) {
	t.Helper()
	return tlsProxyOpts(t, kind, snap, fo, nil, wrap)
}

// tlsProxyOpts is tlsProxyWith with both: tune changes the HTTP/2 server,
// wrap the listener (each when set).
func tlsProxyOpts(t testing.TB, kind string, snap *snapshot.Snapshot, fo FrontOptions, tune func(*http.Server), wrap func(net.Listener) net.Listener) (*TLSFront, string, *x509.CertPool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	reg := balance.NewRegistry(balance.RegistryOptions{StickySecret: []byte("test-secret-0123456789")})
	done := make(chan struct{})
	go func() { reg.Run(ctx); close(done) }()
	pools := forward.NewPools(forward.Options{})
	s, err := New(Options{Registry: reg, Pools: pools, UpstreamClient: UpstreamFast})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(checked(t, snap)); err != nil {
		t.Fatal(err)
	}
	cert, pool := testCertificate(t)
	fo.Certificates = []tls.Certificate{cert}
	if fo.H2Server == "" {
		fo.H2Server = os.Getenv(h2ServerEnv)
	}
	tf, err := s.TLSFront(kind, fo)
	if err != nil {
		t.Fatal(err)
	}
	if tune != nil {
		tune(tf.std)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	sl := l
	if wrap != nil {
		sl = wrap(l)
	}
	go func() { served <- tf.Serve(sl) }()
	t.Cleanup(func() {
		tf.Close()
		if err := <-served; err != http.ErrServerClosed {
			t.Errorf("Serve: %v, want http.ErrServerClosed", err)
		}
		cancel()
		<-done
		pools.Close()
	})
	return tf, l.Addr().String(), pool
}

// frontSnapshot routes everything to one frontBackend.
func frontSnapshot(t *testing.T) (*snapshot.Snapshot, *backend) {
	b := newBackend(t, "b1", frontBackend)
	return testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}},
		map[string]int{"SC1": 100}, nil)), b
}

func fastConns(f *FastFront) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.conns)
}

// fastHolds reports whether the fasthttp front holds the connection whose
// client end has the local address client (another test connection, closed
// by the client, may still be held until the front reads its EOF).
func fastHolds(f *FastFront, client net.Addr) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		if c.RemoteAddr().String() == client.String() {
			return true
		}
	}
	return false
}

// TestTLSFrontDispatchesByALPN: h2 clients get HTTP/2 from net/http,
// http/1.1 and ALPN-less clients HTTP/1.1 from the fasthttp front over TLS,
// all with the request seen as TLS (X-Forwarded-Proto https).
func TestTLSFrontDispatchesByALPN(t *testing.T) {
	snap, b := frontSnapshot(t)
	tf, addr, pool := tlsProxy(t, FrontFastHTTP, snap)
	for _, tc := range []struct {
		name      string
		protos    []string
		wantProto string // response Proto
		wantALPN  string
		fast      bool // served by the fasthttp front
	}{
		{"h2", []string{"h2", "http/1.1"}, "HTTP/2.0", "h2", false},
		{"http/1.1", []string{"http/1.1"}, "HTTP/1.1", "http/1.1", true},
		{"no ALPN", nil, "HTTP/1.1", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &tls.Config{RootCAs: pool, ServerName: "demo.test", NextProtos: tc.protos}
			c, err := tls.Dial("tcp", addr, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got := c.ConnectionState().NegotiatedProtocol; got != tc.wantALPN {
				t.Fatalf("ALPN %q, want %q", got, tc.wantALPN)
			}
			tr := &http.Transport{DialTLSContext: func(context.Context, string, string) (net.Conn, error) { return c, nil },
				ForceAttemptHTTP2: tc.wantALPN == "h2"}
			if tc.wantALPN != "h2" {
				tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
			}
			defer tr.CloseIdleConnections()
			req, _ := http.NewRequest(http.MethodGet, "https://demo.test/headers", nil)
			res, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || res.Proto != tc.wantProto {
				t.Fatalf("answer %d %s, want 200 %s (%s)", res.StatusCode, res.Proto, tc.wantProto, body)
			}
			if got := b.last().Header.Get("X-Forwarded-Proto"); got != "https" {
				t.Fatalf("X-Forwarded-Proto %q at the backend, want https", got)
			}
			if got := fastHolds(tf.fast, c.LocalAddr()); got != tc.fast {
				t.Fatalf("fasthttp front holds this connection: %v, want %v (it holds %d)", got, tc.fast, fastConns(tf.fast))
			}
		})
	}
}

// TestTLSFrontKeepAliveAndStd: HTTP/1.1 keep-alive requests over one TLS
// connection on the fasthttp front, and the std kind serving HTTP/1.1 itself.
func TestTLSFrontKeepAliveAndStd(t *testing.T) {
	for _, kind := range []string{FrontFastHTTP, FrontStd} {
		t.Run(kind, func(t *testing.T) {
			snap, _ := frontSnapshot(t)
			_, addr, pool := tlsProxy(t, kind, snap)
			c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "demo.test", NextProtos: []string{"http/1.1"}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(20 * time.Second))
			br := bufio.NewReader(c)
			for i := 0; i < 3; i++ {
				io.WriteString(c, smallGET)
				readAnswers(t, br, len("small body\n"))
			}
		})
	}
}

// TestTLSFrontHandshakeFailureCloses: a client speaking plain HTTP to the
// TLS port is closed; the front goes on serving.
func TestTLSFrontHandshakeFailureCloses(t *testing.T) {
	snap, _ := frontSnapshot(t)
	_, addr, pool := tlsProxy(t, FrontFastHTTP, snap)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(c, smallGET)
	if _, err := io.ReadAll(c); err != nil && !os.IsTimeout(err) {
		t.Logf("plain client: %v", err)
	}
	tc, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "demo.test"})
	if err != nil {
		t.Fatalf("TLS client after a failed handshake: %v", err)
	}
	tc.Close()
}

// BenchmarkTLSFront is one keep-alive GET over TLS (ECDSA P-256, ALPN
// http/1.1) through each kind of front to 4 loopback backends, client, proxy
// and backends in this process.
func BenchmarkTLSFront(b *testing.B) {
	for _, kind := range []string{FrontStd, FrontFastHTTP} {
		b.Run(kind, func(b *testing.B) {
			_, addr, pool := tlsProxy(b, kind, benchSnapshot(b))
			conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "demo.test", NextProtos: []string{"http/1.1"}})
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			benchGETs(b, conn)
		})
	}
}

// recordSizes records the payload length of each TLS record read through it.
type recordSizes struct {
	net.Conn
	hdr  []byte // a header being read (or the rest of a record: skip)
	skip int
	lens []int
}

func (c *recordSizes) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	for b := p[:n]; len(b) > 0; {
		if c.skip > 0 {
			k := min(c.skip, len(b))
			c.skip -= k
			b = b[k:]
			continue
		}
		k := min(5-len(c.hdr), len(b))
		c.hdr = append(c.hdr, b[:k]...)
		b = b[k:]
		if len(c.hdr) == 5 {
			c.skip = int(c.hdr[3])<<8 | int(c.hdr[4])
			c.lens = append(c.lens, c.skip)
			c.hdr = c.hdr[:0]
		}
	}
	return n, err
}

// TestTLSFrontFullRecordsForHTTP1: an HTTP/1.1 client gets an answer of
// several records in full-size ones (16 KiB of plaintext, as nginx sends)
// from its connection's first answer on, on both fronts: not crypto/tls's
// dynamic record sizing (≈ 1.2 KiB records growing by as much per record),
// nor 4 KiB ones from fasthttp's default write buffer; a client that offers
// h2 keeps dynamic sizing.
func TestTLSFrontFullRecordsForHTTP1(t *testing.T) {
	const size = 60000 // under handoffMax: written in one go after the head
	b := newBackend(t, "b1", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.Write(bytes.Repeat([]byte("x"), size))
	})
	snap := oneBackendSnapshot(b)
	for _, kind := range []string{FrontFastHTTP, FrontStd} {
		t.Run(kind, func(t *testing.T) {
			_, addr, pool := tlsProxy(t, kind, snap)
			raw, _ := dialFront(t, addr)
			rs := &recordSizes{Conn: raw}
			tc := tls.Client(rs, tlsClientConfig(pool))
			if _, err := io.WriteString(tc, smallGET); err != nil {
				t.Fatal(err)
			}
			readAnswers(t, bufio.NewReader(tc), size)
			const full = 16<<10 + 1 + 16 // TLS 1.3: the plaintext, its content type byte and the AEAD tag
			n := 0
			for _, l := range rs.lens {
				if l == full {
					n++
				}
			}
			if m := slices.Max(rs.lens); m != full || n != size/(16<<10) {
				t.Fatalf("largest record %d bytes, %d of %d bytes (records %v), want %d of them", m, n, full, rs.lens, size/(16<<10))
			}
		})
	}
	tf, _, _ := tlsProxy(t, FrontFastHTTP, snap)
	for _, tc := range []struct {
		protos  []string
		dynamic bool
	}{{[]string{"h2", "http/1.1"}, true}, {[]string{"http/1.1"}, false}, {nil, false}} {
		cfg, err := tf.cfg.GetConfigForClient(&tls.ClientHelloInfo{SupportedProtos: tc.protos})
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg == nil || !cfg.DynamicRecordSizingDisabled; got != tc.dynamic {
			t.Errorf("client offering %q: dynamic record sizing %v, want %v", tc.protos, got, tc.dynamic)
		}
	}
}

// TestTLSFrontResumesHTTP1Sessions: an HTTP/1.1 client (the config of
// recordSizing) resumes its session on its next connection, as one that
// offers h2 does.
func TestTLSFrontResumesHTTP1Sessions(t *testing.T) {
	snap, _ := frontSnapshot(t)
	_, addr, pool := tlsProxy(t, FrontFastHTTP, snap)
	for _, protos := range [][]string{{"http/1.1"}, {"h2", "http/1.1"}} {
		cfg := tlsClientConfig(pool)
		cfg.NextProtos = protos
		cfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
		for i, want := range []bool{false, true} {
			raw, _ := dialFront(t, addr)
			tc := tls.Client(raw, cfg)
			if err := tc.Handshake(); err != nil {
				t.Fatal(err)
			}
			if protos[0] == "http/1.1" { // a TLS 1.3 ticket comes after the handshake: read an answer
				if _, err := io.WriteString(tc, smallGET); err != nil {
					t.Fatal(err)
				}
				readAnswers(t, bufio.NewReader(tc), len("small body\n"))
			} else { // the client preface and an empty SETTINGS frame; the server's SETTINGS come after the ticket
				if _, err := io.WriteString(tc, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err != nil {
					t.Fatal(err)
				}
				if _, err := tc.Read(make([]byte, 1)); err != nil {
					t.Fatal(err)
				}
			}
			if got := tc.ConnectionState().DidResume; got != want {
				t.Fatalf("client offering %q, connection %d: resumed %v, want %v", protos, i+1, got, want)
			}
			tc.Close()
		}
	}
}

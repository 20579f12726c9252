//go:build !race

// The race detector's sync.Pool drops a quarter of what is put back (and
// so allocates it again at random): allocation counts are exact only
// without it.

package server

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/proxy/internal/balance"
	"github.com/sluicelb/sluice/proxy/internal/forward"
	"github.com/sluicelb/sluice/proxy/internal/logbuf"
	"github.com/sluicelb/sluice/proxy/internal/telemetry"
)

// The lean path's allocations per GET (no access log, no tracing, the fast
// upstream client), pinned exactly: a change that adds one fails the test;
// one that removes one updates the figure (docs/BENCHMARKS.md, "Lean path
// allocations, session 9").
const (
	// Server.ServeHTTP under a front that supports deadlines, with a
	// cancellable request context as net/http gives: the answer's header
	// values (one string and their slice), context.AfterFunc's two for the
	// cancellable context.
	leanHandlerAllocs = 4
	// The fasthttp front: the request's text (one string). The answer's
	// header goes from the backend's bytes to fasthttp's without a map
	// (forward.Fields), and fasthttp's request context is never cancelled
	// (no context.AfterFunc).
	leanFastFrontAllocs = 1
)

// rawAnswer is the raw backend's answer: net/http's headers for the
// benchmarks' 100-byte body.
var rawAnswer = []byte("HTTP/1.1 200 OK\r\nContent-Length: 100\r\nContent-Type: text/plain\r\n" +
	"Date: Tue, 01 Dec 2026 23:00:00 GMT\r\n\r\n" + body100)

// rawBackend is a real loopback backend that allocates nothing per request:
// on each connection it answers rawAnswer to every request head (no bodies,
// no pipelining: the proxy sends one request at a time). Counting the
// process's allocations then counts the proxy's.
func rawBackend(t testing.TB) netip.AddrPort {
	return rawListen(t, func(c net.Conn) {
		var buf [4096]byte
		n := 0
		for {
			m, err := c.Read(buf[n:])
			if err != nil {
				return
			}
			n += m
			if bytes.Contains(buf[:n], []byte("\r\n\r\n")) {
				n = 0
				if _, err := c.Write(rawAnswer); err != nil {
					return
				}
			} else if n == len(buf) {
				return
			}
		}
	}, nil)
}

// deadlineWriter is discardWriter with the deadlines both fronts' writers
// support (http.ResponseController would otherwise build an error each).
type deadlineWriter struct{ discardWriter }

func (w *deadlineWriter) SetReadDeadline(time.Time) error  { return nil }
func (w *deadlineWriter) SetWriteDeadline(time.Time) error { return nil }

// rawSnapshot is benchSnapshot's cluster (4 backends, weights 5/3/1/1)
// over raw backends.
func rawSnapshot(t *testing.T) *snapshot.Snapshot {
	var insts []config.Instance
	for _, w := range []int{5, 3, 1, 1} {
		insts = append(insts, inst(rawBackend(t), w))
	}
	return testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": insts}, map[string]int{"SC1": 100}, nil))
}

// rawServer is a lean Server (fast upstream client, no log, no tracing)
// over rawSnapshot.
func rawServer(t *testing.T) *Server {
	pools := forward.NewPools(forward.Options{})
	t.Cleanup(pools.Close)
	s, err := New(Options{Registry: balance.NewRegistry(balance.RegistryOptions{StickySecret: []byte("alloc-secret-0123456789")}),
		Pools: pools, UpstreamClient: UpstreamFast})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(checked(t, rawSnapshot(t))); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLeanHandlerAllocs pins the allocations of one GET through
// Server.ServeHTTP to real loopback backends.
func TestLeanHandlerAllocs(t *testing.T) {
	s := rawServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := httptest.NewRequest(http.MethodGet, "http://demo.test/index.html?q=1", nil)
	r.Header.Set("User-Agent", "bench")
	r.Header.Set("Accept", "*/*")
	r.RequestURI = "/index.html?q=1" // origin-form, as a front reads it
	r = r.WithContext(ctx)
	w := &deadlineWriter{discardWriter{h: make(http.Header)}}
	var bad string
	got := testing.AllocsPerRun(2000, func() {
		clear(w.h)
		w.status, w.n = 0, 0
		r.Body = http.NoBody
		s.ServeHTTP(w, r)
		if w.status != 200 || w.n != 100 {
			bad = http.StatusText(w.status)
		}
	})
	if bad != "" || w.status != 200 || w.n != 100 {
		t.Fatalf("answer %d, %d bytes (a bad one: %q), want 200 and 100 bytes", w.status, w.n, bad)
	}
	if got != leanHandlerAllocs {
		t.Fatalf("lean handler path: %v allocations per GET, want exactly %d", got, leanHandlerAllocs)
	}
}

// TestLeanFastFrontAllocs pins the allocations of one keep-alive GET
// through the fasthttp front (the default) to real loopback backends; the
// client is raw too, so every allocation counted is the proxy's.
func TestLeanFastFrontAllocs(t *testing.T) {
	if got := fastFrontAllocs(t, Options{UpstreamClient: UpstreamFast}); got != leanFastFrontAllocs {
		t.Fatalf("lean fasthttp front path: %v allocations per GET, want exactly %d", got, leanFastFrontAllocs)
	}
}

// TestAccessLogFastFrontAllocs: the access line, written as lbproxy writes
// it (through a 64 KiB logbuf.Writer), adds no allocation to the fasthttp
// front's GET: the line is formatted in a pooled buffer.
func TestAccessLogFastFrontAllocs(t *testing.T) {
	lb := logbuf.New(io.Discard, 64<<10)
	if got := fastFrontAllocs(t, Options{UpstreamClient: UpstreamFast, AccessLogWriter: lb}); got != leanFastFrontAllocs {
		t.Fatalf("fasthttp front path with the access log: %v allocations per GET, want exactly %d (the lean path's)", got, leanFastFrontAllocs)
	}
}

// TestUnsampledFullFastFrontAllocs: lbproxy's full configuration (the
// access line through a logbuf.Writer, tracing as telemetry.Setup sets it
// up) adds no allocation to a GET the head leaves unsampled — the 99 % at
// 1 % sampling: no span, and the traceparent sent and logged is the reused
// state's own text.
func TestUnsampledFullFastFrontAllocs(t *testing.T) {
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{ServiceName: "lbproxy",
		Exporter: telemetry.ExporterNone, SampleRatio: 0, SpanProcessor: sdktrace.NewBatchSpanProcessor(tracetest.NewNoopExporter())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tel.Shutdown(context.Background()) })
	o := Options{UpstreamClient: UpstreamFast, AccessLogWriter: logbuf.New(io.Discard, 64<<10),
		TracerProvider: tel.TracerProvider, Propagator: tel.Propagator, Head: tel.Head}
	if got := fastFrontAllocs(t, o); got != leanFastFrontAllocs {
		t.Fatalf("fasthttp front path, full configuration, unsampled: %v allocations per GET, want exactly %d (the lean path's)", got, leanFastFrontAllocs)
	}
}

// fastFrontAllocs is the allocations of one keep-alive GET through the
// fasthttp front of a proxy with options o, over rawSnapshot.
func fastFrontAllocs(t *testing.T, o Options) float64 {
	p := newProxy(t, rawSnapshot(t), proxyOpts{frontKind: FrontFastHTTP, opts: o})
	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := []byte("GET /index.html?q=1 HTTP/1.1\r\nHost: demo.test\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
	var buf [4096]byte
	var failure error
	get := func() {
		if _, err := conn.Write(req); err != nil {
			failure = err
			return
		}
		// The head, then the 100-byte body after it.
		n := 0
		for {
			m, err := conn.Read(buf[n:])
			if err != nil {
				failure = err
				return
			}
			n += m
			if i := bytes.Index(buf[:n], []byte("\r\n\r\n")); i >= 0 && n >= i+4+len(body100) {
				if !bytes.HasPrefix(buf[:n], []byte("HTTP/1.1 200 ")) || string(buf[i+4:n]) != body100 {
					failure = io.ErrUnexpectedEOF
				}
				return
			}
		}
	}
	got := testing.AllocsPerRun(2000, get)
	if failure != nil {
		t.Fatalf("GET through the fasthttp front: %v", failure)
	}
	return got
}

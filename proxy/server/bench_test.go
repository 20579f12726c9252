package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/proxy/internal/balance"
	"github.com/sluicelb/sluice/proxy/internal/forward"
	"github.com/sluicelb/sluice/proxy/internal/telemetry"
)

// discardWriter is a minimal http.ResponseWriter, reset per request, so the
// benchmark measures the proxy's own work (plus the in-process backend).
type discardWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(s int)   { w.status = s }
func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = 200
	}
	w.n += len(p)
	return len(p), nil
}
func (w *discardWriter) Flush() {}

var body100 = strings.Repeat("x", 99) + "\n"

// BenchmarkServeHTTP is one GET through the handler to 4 real loopback
// backends (weights 5/3/1/1, 100-byte bodies), per upstream client.
// Profile with -cpuprofile; allocations include the in-process backends'.
func BenchmarkServeHTTP(b *testing.B) {
	for _, v := range []struct {
		name, client string
		access       bool    // a JSON access line per request (to io.Discard), as lbproxy writes it
		full         bool    // the access line and 1 % trace sampling (fullOptions)
		sample       float64 // tracing alone, at this ratio (-1: off)
	}{{UpstreamFast, UpstreamFast, false, false, -1}, {UpstreamStd, UpstreamStd, false, false, -1},
		{"fast-accesslog", UpstreamFast, true, false, -1}, {"fast-full", UpstreamFast, false, true, -1},
		// the lean-to-full step a feature at a time: the 99 % unsampled
		// requests' tracing (ratio 0), and 1 % sampling without the log
		{"fast-trace0", UpstreamFast, false, false, 0}, {"fast-trace", UpstreamFast, false, false, 0.01}} {
		client := v.client
		b.Run(v.name, func(b *testing.B) {
			snap := benchSnapshot(b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			reg := balance.NewRegistry(balance.RegistryOptions{StickySecret: []byte("bench-secret-0123456789")})
			pools := forward.NewPools(forward.Options{})
			defer pools.Close()
			o := Options{Registry: reg, Pools: pools, UpstreamClient: client}
			if v.access {
				o.AccessLogWriter = io.Discard // as lbproxy writes it
			}
			if v.full {
				fullOptions(b, &o, 0.01)
			}
			if v.sample >= 0 {
				fullOptions(b, &o, v.sample)
				o.AccessLogWriter = nil
			}
			s, err := New(o)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Apply(checked(b, snap)); err != nil {
				b.Fatal(err)
			}
			r := httptest.NewRequest(http.MethodGet, "http://demo.test/index.html?q=1", nil)
			r.Header.Set("User-Agent", "bench")
			r.Header.Set("Accept", "*/*")
			r = r.WithContext(ctx)
			w := &discardWriter{h: make(http.Header)}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU(b)
			for i := 0; i < b.N; i++ {
				clear(w.h)
				w.status, w.n = 0, 0
				r.Body = http.NoBody
				s.ServeHTTP(w, r)
				if w.status != 200 || w.n != 100 {
					b.Fatalf("status %d, %d bytes", w.status, w.n)
				}
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// fullOptions sets o up as lbproxy's full configuration (bench/run.sh's
// lbproxy-full, less the file): the JSON access line, to io.Discard, and
// lbproxy's tracing (telemetry.Setup: parent-based sampling at ratio, 1 %
// in lbproxy-full, the head, W3C propagation) with a no-op exporter
// behind the batcher.
func fullOptions(b *testing.B, o *Options, ratio float64) {
	o.AccessLogWriter = io.Discard
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{ServiceName: "lbproxy",
		Exporter: telemetry.ExporterNone, SampleRatio: ratio,
		SpanProcessor: sdktrace.NewBatchSpanProcessor(tracetest.NewNoopExporter())})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tel.Shutdown(context.Background()) })
	o.TracerProvider, o.Propagator, o.Head = tel.TracerProvider, tel.Propagator, tel.Head
}

// benchSnapshot is one cluster of 4 real loopback backends (weights
// 5/3/1/1, 100-byte bodies), closed when the benchmark ends.
func benchSnapshot(b *testing.B) *snapshot.Snapshot {
	var insts []config.Instance
	for _, w := range []int{5, 3, 1, 1} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Content-Length", "100")
			w.Write([]byte(body100))
		}))
		b.Cleanup(srv.Close)
		insts = append(insts, inst(mustAddrPort(srv.Listener.Addr().String()), w))
	}
	return testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": insts}, map[string]int{"SC1": 100}, nil))
}

func mustAddrPort(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

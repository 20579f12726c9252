//lint:file-ignore SA1019 issue 20 asks what x/net's write schedulers buy; only the deprecated x/net server takes one

package server

import (
	"crypto/tls"
	"io"
	"net/http"
	"syscall"
	"testing"

	"golang.org/x/net/http2"
)

// processCPU is this process's user+system CPU time so far, in ns: the
// benchmarks' cpu-ns/op, less sensitive than ns/op to the other jobs of a
// loaded machine (wall time stretches when they run; CPU time mostly not).
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkH2Front is one GET over HTTP/2 (TLS, ALPN h2) through the TLS
// front to 4 loopback backends, 16 streams in flight on one connection
// (RunParallel, 8 goroutines per P on 2 Ps), client, proxy and backends in
// this process; cpu-ns/op is the process's CPU time per GET. The sub-benchmarks are the HTTP/2 server options issue 20
// asks about (docs/BENCHMARKS.md, "HTTP/2 server options"): each changes
// one thing from the front as lbproxy builds it ("as-built").
func BenchmarkH2Front(b *testing.B) {
	xnet := func(ws func() http2.WriteScheduler) func(*http.Server) {
		return func(s *http.Server) {
			if err := http2.ConfigureServer(s, &http2.Server{NewWriteScheduler: ws, MaxEncoderHeaderTableSize: 1}); err != nil {
				b.Fatal(err)
			}
		}
	}
	cfg := func(f func(c *http.HTTP2Config)) func(*http.Server) {
		return func(s *http.Server) { f(s.HTTP2) }
	}
	xn := FrontOptions{H2Server: H2ServerXNet}
	for _, v := range []struct {
		name string
		tune func(*http.Server)
		fo   FrontOptions
	}{
		{"as-built", nil, FrontOptions{}}, // --h2-server sluice (h2conn.go), the default
		{"xnet", nil, xn},                 // --h2-server xnet (net/http's); the variants below change it
		{"encoder-table-4k", cfg(func(c *http.HTTP2Config) { c.MaxEncoderHeaderTableSize = 4096 }), xn},
		{"read-frame-1m", cfg(func(c *http.HTTP2Config) { c.MaxReadFrameSize = 1 << 20 }), xn},
		{"windows-64k", cfg(func(c *http.HTTP2Config) {
			c.MaxReceiveBufferPerConnection, c.MaxReceiveBufferPerStream = 64<<10, 64<<10
		}), xn},
		{"count-error", cfg(func(c *http.HTTP2Config) { c.CountError = func(string) {} }), xn},
		{"xnet-roundrobin", xnet(nil), xn},
		{"xnet-random", xnet(http2.NewRandomWriteScheduler), xn},
		{"xnet-priority", xnet(func() http2.WriteScheduler { return http2.NewPriorityWriteScheduler(nil) }), xn},
	} {
		b.Run(v.name, func(b *testing.B) {
			_, addr, pool := tlsProxyTuned(b, FrontFastHTTP, benchSnapshot(b), v.fo, v.tune)
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "demo.test"},
				ForceAttemptHTTP2: true, MaxConnsPerHost: 1}
			defer tr.CloseIdleConnections()
			url := "https://" + addr + "/index.html?q=1"
			get := func() {
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				req.Host = "demo.test"
				res, err := tr.RoundTrip(req)
				if err != nil {
					b.Error(err)
					return
				}
				n, _ := io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != 200 || n != 100 || res.ProtoMajor != 2 {
					b.Errorf("status %d, %d bytes, HTTP/%d", res.StatusCode, n, res.ProtoMajor)
				}
			}
			get() // the connection, before the clock
			b.ReportAllocs()
			b.SetParallelism(8)
			cpu0 := processCPU(b)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					get()
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

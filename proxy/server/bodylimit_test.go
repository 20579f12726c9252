package server

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/testkit/poll"
)

// A request declaring a body over MaxBodyBytes, then sending 3 bytes of it
// and nothing more, is answered 413 (reason header, counted) as soon as its
// head is read and the connection closed, on both fronts: not after the
// body read timeout, nor once enough body bytes have flowed. The bound is
// far below the 15 s it took, and above a loaded CI machine's latency.
func TestOversizedDeclaredBodyAnsweredAtOnce(t *testing.T) {
	const bound = 3 * time.Second
	for _, kind := range []string{FrontFastHTTP, FrontStd} {
		for _, declared := range []int{2048, 1 << 20} {
			t.Run(fmt.Sprintf("%s/%d", kind, declared), func(t *testing.T) {
				b := newBackend(t, "b1", nil)
				reg := prometheus.NewRegistry()
				snap := testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}}, map[string]int{"SC1": 100}, nil))
				var closed atomic.Int64
				p := newProxy(t, snap, proxyOpts{
					opts:      Options{UpstreamClient: UpstreamFast, Metrics: reg, MaxBodyBytes: 1024},
					frontKind: kind,
					connState: func(_ net.Conn, s http.ConnState) {
						if s == http.StateClosed {
							closed.Add(1)
						}
					},
				})
				start := time.Now()
				status, rest := rawExchange(t, p.addr, fmt.Sprintf("POST / HTTP/1.1\r\nHost: demo.test\r\nContent-Length: %d\r\n\r\nabc", declared))
				took := time.Since(start)
				if !strings.HasPrefix(status, "HTTP/1.1 413") || !strings.Contains(rest, ReasonHeader+": "+CodeBodyTooLarge+"\r\n") {
					t.Fatalf("answer %q %q, want 413 with %s: %s", status, rest, ReasonHeader, CodeBodyTooLarge)
				}
				if took > bound {
					t.Fatalf("413 and close took %v, want at most %v", took, bound)
				}
				if n := testutil.ToFloat64(p.s.metrics.generated.WithLabelValues("main", CodeBodyTooLarge)); n != 1 {
					t.Errorf("generated_responses_total{cluster=main,code=%s} = %v, want 1", CodeBodyTooLarge, n)
				}
				if n := b.hits.Load(); n != 0 {
					t.Errorf("backend saw %d oversized requests, want 0", n)
				}
				// net/http lingers 500 ms after its close; its goroutine ends then.
				poll.EventuallyTrue(t, 10*time.Second, "the front closed its connection", func() bool { return closed.Load() == 1 })
			})
		}
	}
}

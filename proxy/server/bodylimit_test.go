package server

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

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
				snap := oneBackendSnapshot(b)
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

// The fasthttp front's over-limit mark is its own: a client's field of
// that name, in any letter case, is never forwarded and never makes a
// request over the limit (nor one over it under it), with or without a
// body limit, on the fast path and on an Upgrade handed to net/http. The
// hook used to delete a client's copy on every request; now reset drops it
// and the hook marks with a name fasthttp's parser never yields.
func TestClientOverLimitMarkNeverForwarded(t *testing.T) {
	names := []string{overLimitMark, overLimitRaw, strings.ToUpper(overLimitMark), "x-SLUICE-internal-Body-over-LIMIT"}
	for _, limit := range []int64{0, 1024} {
		t.Run(fmt.Sprint("limit=", limit), func(t *testing.T) {
			b := newBackend(t, "b1", func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				fmt.Fprintf(w, "cl=%d body=%q", r.ContentLength, body)
			})
			snap := oneBackendSnapshot(b)
			p := newProxy(t, snap, proxyOpts{opts: Options{UpstreamClient: UpstreamFast, MaxBodyBytes: limit}, frontKind: FrontFastHTTP})
			seen := func(what string) {
				t.Helper()
				r := b.last()
				if r == nil {
					t.Fatalf("%s: the backend saw no request", what)
				}
				for k, v := range r.Header {
					if strings.EqualFold(k, overLimitMark) {
						t.Fatalf("%s: the backend saw %s: %q", what, k, v)
					}
				}
			}
			for _, name := range names {
				status, rest := rawExchange(t, p.addr, "GET / HTTP/1.1\r\nHost: demo.test\r\n"+name+": 99999999\r\nConnection: close\r\n\r\n")
				if !strings.HasPrefix(status, "HTTP/1.1 200") || !strings.HasSuffix(rest, `cl=0 body=""`) {
					t.Fatalf("GET with %s: %q %q, want 200 from the backend", name, status, rest)
				}
				seen("GET with " + name)
				status, rest = rawExchange(t, p.addr, "POST / HTTP/1.1\r\nHost: demo.test\r\n"+name+": 99999999\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc")
				if !strings.HasPrefix(status, "HTTP/1.1 200") || !strings.HasSuffix(rest, `cl=3 body="abc"`) {
					t.Fatalf("POST of 3 bytes with %s: %q %q, want 200 with the body", name, status, rest)
				}
				seen("POST with " + name)
				if limit > 0 {
					// Over the limit with a client's mark saying otherwise:
					// 413 all the same.
					status, rest = rawExchange(t, p.addr, "POST / HTTP/1.1\r\nHost: demo.test\r\n"+name+": 3\r\nContent-Length: 4096\r\n\r\nabc")
					if !strings.HasPrefix(status, "HTTP/1.1 413") || !strings.Contains(rest, ReasonHeader+": "+CodeBodyTooLarge+"\r\n") {
						t.Fatalf("POST of 4096 bytes with %s: %q %q, want 413", name, status, rest)
					}
				}
				// An Upgrade goes to net/http with the head fasthttp read:
				// without the client's copy there too.
				status, _ = rawExchange(t, p.addr, "GET /ws HTTP/1.1\r\nHost: demo.test\r\n"+name+": 99999999\r\nConnection: Upgrade, close\r\nUpgrade: websocket\r\n\r\n")
				if !strings.HasPrefix(status, "HTTP/1.1 200") {
					t.Fatalf("Upgrade with %s: %q, want the backend's 200", name, status)
				}
				seen("Upgrade with " + name)
			}
			if limit > 0 {
				// An Upgrade over the limit, handed to net/http: a 413 from
				// the proxy as on --front std, never the backend (which
				// saw the internal mark and Content-Length: 0 before)
				before := b.hits.Load()
				status, rest := rawExchange(t, p.addr, "POST /ws HTTP/1.1\r\nHost: demo.test\r\nContent-Length: 4096\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nabc")
				if !strings.HasPrefix(status, "HTTP/1.1 413") || !strings.Contains(rest, ReasonHeader+": "+CodeBodyTooLarge+"\r\n") {
					t.Fatalf("Upgrade POST of 4096 bytes: %q %q, want the proxy's 413", status, rest)
				}
				if n := b.hits.Load(); n != before {
					t.Fatalf("Upgrade POST over the limit reached the backend (%d requests, %d before)", n, before)
				}
			}
		})
	}
}

// A request body that cannot be read is named for what happened: over the
// limit 413, the client gone (its connection lost, its HTTP/2 stream reset)
// 499 and no answer, the read timeout 408, the body ended early 400
// client-closed (nginx's answers), a malformed body 400 bad-request.
func TestClassifyBodyError(t *testing.T) {
	timeout := &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}
	for _, tc := range []struct {
		name   string
		gone   bool
		err    error
		status int
		code   string
	}{
		{"too large", false, &http.MaxBytesError{Limit: 10}, http.StatusRequestEntityTooLarge, CodeBodyTooLarge},
		{"too large, gone since", true, &http.MaxBytesError{Limit: 10}, http.StatusRequestEntityTooLarge, CodeBodyTooLarge},
		{"stream reset", true, errors.New("http2: stream reset by the client"), StatusClientClosed, CodeClientClosed},
		{"gone at the timeout", true, timeout, StatusClientClosed, CodeClientClosed},
		{"read timeout", false, timeout, http.StatusRequestTimeout, CodeClientTimeout},
		{"ended early", false, fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), http.StatusBadRequest, CodeClientClosed},
		{"malformed chunk", false, errors.New("invalid byte in chunk length"), http.StatusBadRequest, CodeBadRequest},
	} {
		if e := classifyBodyError(tc.gone, tc.err); e.status != tc.status || e.code != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, e.status, e.code, tc.status, tc.code)
		}
	}
}

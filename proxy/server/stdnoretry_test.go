package server

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
)

// closingBackend answers the first request of every connection (keep-alive)
// and closes the connection, without an answer, when a second one arrives on
// it: a backend whose keep-alive connection dies just as the proxy reuses it.

type closingBackend struct {
	addr   netip.AddrPort
	mu     sync.Mutex
	bodies []string // method and body of every request head read
}

func newClosingBackend(t *testing.T) *closingBackend {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &closingBackend{addr: netip.MustParseAddrPort(l.Addr().String())}
	var wg sync.WaitGroup
	var cmu sync.Mutex
	var conns []net.Conn
	closed := false
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			cmu.Lock()
			if closed {
				cmu.Unlock()
				c.Close()
				return
			}
			conns = append(conns, c)
			wg.Add(1) // under cmu, before closed: every Add happens before Wait
			cmu.Unlock()
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for n := 1; ; n++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					body, _ := io.ReadAll(req.Body)
					b.mu.Lock()
					b.bodies = append(b.bodies, req.Method+" "+string(body))
					b.mu.Unlock()
					if n > 1 {
						return // the reused connection dies without an answer
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		cmu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		cmu.Unlock()
		wg.Wait()
	})
	return b
}

// Issue 17 (--upstream-client std): http.Transport resent a replayable
// request by itself when a reused keep-alive connection failed, so the
// backend saw it more often than 1 + retry_max + cross_retry allows. Now
// the Transport never resends: with retry_max 0 the failed GET or POST
// reached the backend exactly once (and is answered 502); with retry_max 1
// the attempt loop resends it once, as attempt 2 in the access log.
func TestStdUpstreamDoesNotResendOnItsOwn(t *testing.T) {
	for _, tc := range []struct {
		name     string
		method   string
		body     string
		retryMax int
		status   int
		arrivals int64 // of the second request
		attempts float64
	}{
		{"GET, retry_max 0", http.MethodGet, "", 0, http.StatusBadGateway, 1, 1},
		{"GET, retry_max 1", http.MethodGet, "", 1, http.StatusOK, 2, 2},
		{"buffered POST, retry_max 0", http.MethodPost, "payload", 0, http.StatusBadGateway, 1, 1},
		{"empty POST, retry_max 0", http.MethodPost, "", 0, http.StatusBadGateway, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newClosingBackend(t)
			var log syncBuffer
			snap := testSnapshot(3, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}}, map[string]int{"SC1": 100}, func(p *config.Policy) {
				p.Retry.RetryMax, p.Retry.CrossRetry, p.Retry.NonIdempotent = tc.retryMax, 0, true
			}))
			p := newProxy(t, snap, proxyOpts{opts: Options{UpstreamClient: UpstreamStd, AccessLog: slog.New(slog.NewJSONHandler(&log, nil))}, frontKind: FrontStd})
			c := client(t)
			send := func() int {
				req, err := http.NewRequest(tc.method, p.url+"/", strings.NewReader(tc.body))
				if err != nil {
					t.Fatal(err)
				}
				if tc.body == "" {
					req.Body, req.ContentLength = http.NoBody, 0
				}
				req.Host = "demo.test"
				res, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				return res.StatusCode
			}
			if st := send(); st != http.StatusOK {
				t.Fatalf("first request: %d", st)
			}
			if st := send(); st != tc.status {
				t.Fatalf("second request: %d, want %d", st, tc.status)
			}
			b.mu.Lock()
			bodies := append([]string(nil), b.bodies...)
			b.mu.Unlock()
			if got := int64(len(bodies)) - 1; got != tc.arrivals {
				t.Fatalf("the backend saw the second request %d times, want %d (%q)", got, tc.arrivals, bodies)
			}
			for _, body := range bodies {
				if body != tc.method+" "+tc.body {
					t.Fatalf("backend received %q, want %q", body, tc.method+" "+tc.body)
				}
			}
			var lines []map[string]any
			eventually(t, 10*time.Second, "two access-log lines", func() bool { lines = log.lines(t); return len(lines) == 2 })
			if a := lines[1]["attempts"]; a != tc.attempts {
				t.Fatalf("access log attempts %v, want %v", a, tc.attempts)
			}
		})
	}
}

package server

import (
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/testkit/poll"
)

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
		arrivals int // of the second request
		attempts float64
	}{
		{"GET, retry_max 0", http.MethodGet, "", 0, http.StatusBadGateway, 1, 1},
		{"GET, retry_max 1", http.MethodGet, "", 1, http.StatusOK, 2, 2},
		{"buffered POST, retry_max 0", http.MethodPost, "payload", 0, http.StatusBadGateway, 1, 1},
		{"empty POST, retry_max 0", http.MethodPost, "", 0, http.StatusBadGateway, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ri := newRawInstance(t)
			ri.mode.Store("swallow-reused")
			var log syncBuffer
			snap := testSnapshot(3, testCluster(map[string][]config.Instance{"SC1": {inst(ri.addr, 1)}}, map[string]int{"SC1": 100}, func(p *config.Policy) {
				p.Retry.RetryMax, p.Retry.CrossRetry, p.Retry.NonIdempotent = tc.retryMax, 0, true
			}))
			p := newProxy(t, snap, proxyOpts{opts: Options{UpstreamClient: UpstreamStd, AccessLog: slog.New(slog.NewJSONHandler(&log, nil))}, frontKind: FrontStd})
			c := client(t)
			if st, b := do(t, c, tc.method, p.url+"/", "first", tc.body); st != http.StatusOK {
				t.Fatalf("first request: %d %q", st, b)
			}
			// The first answer's body was read to its end, so its connection
			// is idle in the Transport's pool: the second request reuses it.
			if st, b := do(t, c, tc.method, p.url+"/", "second", tc.body); st != tc.status {
				t.Fatalf("second request: %d %q, want %d", st, b, tc.status)
			}
			if got := ri.count("second"); got != tc.arrivals {
				t.Fatalf("the backend saw the second request %d times, want %d", got, tc.arrivals)
			}
			var lines []map[string]any
			poll.EventuallyTrue(t, 10*time.Second, "two access-log lines", func() bool { lines = log.lines(t); return len(lines) == 2 })
			if a := lines[1]["attempts"]; a != tc.attempts {
				t.Fatalf("access log attempts %v, want %v", a, tc.attempts)
			}
		})
	}
}

// A backend that closes every connection right after its answer, without
// "Connection: close": the FIN is on the proxy's socket when the next
// request takes the connection from http.Transport's pool, but the
// Transport learns of it only when that connection's background read runs
// (on a loaded machine it may not have: CI, 1 of 299 POSTs of
// TestBackendRestartUnderPOSTLoad failed with 502). Each request here is
// sent once the backend has closed the previous connection, so whichever
// of the Transport's read and the proxy's peek at GotConn finds the FIN
// first, no POST may fail nor reach the backend twice. (A request that
// crosses the close on the wire is the race no HTTP/1.1 client can
// resolve for a POST; this test waits it out. forward's
// TestGotConnFindsTheBackendGone pins the peek itself.)
func TestStdUpstreamBackendClosedBeforeReuse(t *testing.T) {
	ri := newRawInstance(t)
	ri.mode.Store("close-after")
	snap := testSnapshot(3, testCluster(map[string][]config.Instance{"SC1": {inst(ri.addr, 1)}}, map[string]int{"SC1": 100}, func(p *config.Policy) {
		p.Retry.RetryMax, p.Retry.CrossRetry, p.Retry.NonIdempotent = 1, 0, false
	}))
	p := newProxy(t, snap, proxyOpts{opts: Options{UpstreamClient: UpstreamStd}, frontKind: FrontStd})
	c := client(t)
	for i := 0; i < 200; i++ {
		for _, body := range []string{fmt.Sprintf("payload-%d", i), ""} {
			id := fmt.Sprintf("post-%d-%d", i, len(body))
			closed := ri.closed.Load()
			if st, b := do(t, c, http.MethodPost, p.url+"/", id, body); st != http.StatusOK {
				t.Fatalf("%s: %d %q", id, st, b)
			}
			if got := ri.count(id); got != 1 {
				t.Fatalf("the backend saw %s %d times, want once", id, got)
			}
			poll.EventuallyTrue(t, 10*time.Second, "the backend closed the connection of "+id, func() bool { return ri.closed.Load() > closed })
		}
	}
}

package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/proxy/internal/forward"
	"github.com/sluicelb/sluice/testkit/poll"
)

// D1: a request drawn into GSLB_BLACKHOLE never reaches a backend, is answered
// with the policy's status, Retry-After and the reason header, and the drop
// fraction matches the weight.
func TestD1BlackholeNeverReachesBackend(t *testing.T) {
	b := newBackend(t, "b1", nil)
	snap := testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}},
		map[string]int{"SC1": 70, config.Blackhole: 30}, nil))
	// Clients behind a trusted proxy: the consistent hash keys on the
	// X-Forwarded-For client address, so 2000 clients spread over the row.
	p := newProxy(t, snap, proxyOpts{opts: Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}})
	c := client(t)
	const n = 2000
	dropped := 0
	for i := 0; i < n; i++ {
		res, _ := get(t, c, p.url+"/", map[string]string{"X-Forwarded-For": fmt.Sprintf("10.%d.%d.%d", i%7, i/250, i%250)})
		switch res.StatusCode {
		case 200:
		case http.StatusServiceUnavailable:
			if res.Header.Get(ReasonHeader) != CodeBlackhole || res.Header.Get("Retry-After") != "5" {
				t.Fatalf("blackhole answer: reason %q retry-after %q", res.Header.Get(ReasonHeader), res.Header.Get("Retry-After"))
			}
			dropped++
		default:
			t.Fatalf("status %d", res.StatusCode)
		}
	}
	if got := int(b.hits.Load()); got != n-dropped {
		t.Fatalf("backend saw %d requests, want exactly the %d not dropped", got, n-dropped)
	}
	// 30 % of 2000: sd ≈ 20.5; allow 5 sd.
	if dropped < 600-103 || dropped > 600+103 {
		t.Fatalf("dropped %d of %d, want ≈ 600 (30 %%)", dropped, n)
	}
	if got := p.s.Counts()["main"].Blackhole; got != uint64(dropped) {
		t.Fatalf("blackhole counter %d, want %d", got, dropped)
	}
}

// The blackhole status is configurable.
func TestBlackholeStatusFromPolicy(t *testing.T) {
	b := newBackend(t, "b1", nil)
	snap := testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}},
		map[string]int{config.Blackhole: 100}, func(p *config.Policy) {
			p.Blackhole.Status = 429
			p.Blackhole.RetryAfter = 0
		}))
	c0 := snap.Clusters["main"]
	c0.Row.AllowFullDrop = true
	snap.Clusters["main"] = c0
	snap.Meta.Hash = ""
	snap.Meta.Hash = snapshotHash(snap)
	p := newProxy(t, snap, proxyOpts{})
	res, _ := get(t, client(t), p.url+"/", nil)
	if res.StatusCode != 429 || res.Header.Get("Retry-After") != "" || b.hits.Load() != 0 {
		t.Fatalf("got %d retry-after %q hits %d, want 429, none, 0", res.StatusCode, res.Header.Get("Retry-After"), b.hits.Load())
	}
}

// dyingBackend reads the request body, then drops the connection without
// answering.
func dyingBackend(t *testing.T, name string) *backend {
	return newBackend(t, name, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	})
}

func totalHits(bs ...*backend) int64 {
	var n int64
	for _, b := range bs {
		n += b.hits.Load()
	}
	return n
}

// D4: a non-replayable request is never sent twice; a replayable one is
// retried.
func TestD4NonReplayableNeverSentTwice(t *testing.T) {
	bs := []*backend{dyingBackend(t, "b1"), dyingBackend(t, "b2"), dyingBackend(t, "b3")}
	var is []config.Instance
	for _, b := range bs {
		is = append(is, inst(b.addr, 1))
	}
	snap := testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": is}, map[string]int{"SC1": 100},
		func(p *config.Policy) { p.Health.FailNum = 1000; p.Retry.MaxReplayBody = 1024 }))
	p := newProxy(t, snap, proxyOpts{})
	c := client(t)
	send := func(method string, body []byte, chunked bool) *http.Response {
		t.Helper()
		var r io.Reader = bytes.NewReader(body)
		if chunked {
			r = io.MultiReader(r) // hides the length: sent chunked
		}
		req, _ := http.NewRequest(method, p.url+"/upload", r)
		req.Host = "demo.test"
		res, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	big := bytes.Repeat([]byte("x"), 100<<10)
	cases := []struct {
		name     string
		method   string
		body     []byte
		chunked  bool
		wantHits int64
	}{
		{"POST body over the replay limit", http.MethodPost, big, false, 1},
		{"PUT body over the replay limit", http.MethodPut, big, false, 1},
		{"chunked PUT over the replay limit", http.MethodPut, big, true, 1},
		{"POST small body (not idempotent)", http.MethodPost, []byte("small"), false, 1},
		{"PUT small body (replayable)", http.MethodPut, []byte("small"), false, 3},
		{"chunked PUT small body (replayable)", http.MethodPut, []byte("small"), true, 3},
		{"GET (replayable)", http.MethodGet, nil, false, 3},
	}
	for _, tc := range cases {
		before := totalHits(bs...)
		res := send(tc.method, tc.body, tc.chunked)
		if res.StatusCode != http.StatusBadGateway || res.Header.Get(ReasonHeader) != CodeUpstream {
			t.Errorf("%s: %d %q, want 502 %s", tc.name, res.StatusCode, res.Header.Get(ReasonHeader), CodeUpstream)
		}
		if got := totalHits(bs...) - before; got != tc.wantHits {
			t.Errorf("%s: sent %d times, want %d", tc.name, got, tc.wantHits)
		}
	}
}

// D4: once response bytes reached the client nothing is retried, and a body
// that breaks after the headers aborts the client connection instead of
// ending like a complete response.
func TestD4BodyFailureAbortsClientAndIsNotRetried(t *testing.T) {
	mk := func(name string) *backend {
		return newBackend(t, name, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(200)
			io.WriteString(w, "partial-")
			http.NewResponseController(w).Flush()
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close() // no terminating chunk
			}
		})
	}
	b1, b2 := mk("b1"), mk("b2")
	snap := testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(b1.addr, 1), inst(b2.addr, 1)}},
		map[string]int{"SC1": 100}, func(p *config.Policy) { p.Health.FailNum = 1000 }))
	p := newProxy(t, snap, proxyOpts{})
	c := client(t)
	req, _ := http.NewRequest(http.MethodGet, p.url+"/stream", nil)
	req.Host = "demo.test"
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("status %d, want the backend's 200 relayed", res.StatusCode)
	}
	if err == nil {
		t.Fatalf("body %q read cleanly: a broken backend body must abort the client connection", body)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Logf("client read error: %v", err)
	}
	if got := totalHits(b1, b2); got != 1 {
		t.Fatalf("backends saw %d requests, want 1 (no retry after response bytes)", got)
	}
}

// recordingDialer records every dial per request path.
type recordingDialer struct {
	mu    sync.Mutex
	dials []string
}

func (d *recordingDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.dials = append(d.dials, addr)
	d.mu.Unlock()
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

func (d *recordingDialer) take() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.dials
	d.dials = nil
	return out
}

// D5: attempts ≤ 1 + retry_max + cross_retry, never the same instance twice
// when there are others, never into the blackhole.
func TestD5BoundedRetries(t *testing.T) {
	var sc1, sc2 []config.Instance
	for i := 0; i < 6; i++ {
		sc1 = append(sc1, inst(deadAddr(t), 1))
	}
	for i := 0; i < 3; i++ {
		sc2 = append(sc2, inst(deadAddr(t), 1))
	}
	snap := testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": sc1, "SC2": sc2},
		map[string]int{"SC1": 60, "SC2": 0, config.Blackhole: 40}, func(p *config.Policy) {
			p.Health.FailNum = 1000
			p.Retry.RetryMax, p.Retry.CrossRetry = 2, 1
			p.Balance.SubclusterMode = config.SubclusterRequest
		}))
	d := &recordingDialer{}
	p := newProxy(t, snap, proxyOpts{opts: Options{Pools: forward.NewPools(forward.Options{DialContext: d.dial})}})
	c := client(t)
	inSC2 := map[string]bool{}
	for _, in := range sc2 {
		inSC2[fmt.Sprintf("%s:%d", in.Addr, in.Port)] = true
	}
	forwarded := 0
	for i := 0; i < 60; i++ {
		res, _ := get(t, c, p.url+"/", nil)
		dials := d.take()
		if res.Header.Get(ReasonHeader) == CodeBlackhole {
			if len(dials) != 0 {
				t.Fatalf("blackholed request dialled %v", dials)
			}
			continue
		}
		forwarded++
		if res.StatusCode != http.StatusBadGateway || res.Header.Get(ReasonHeader) != CodeConnect {
			t.Fatalf("status %d %q, want 502 %s", res.StatusCode, res.Header.Get(ReasonHeader), CodeConnect)
		}
		if len(dials) != 4 {
			t.Fatalf("request %d: %d attempts %v, want exactly 1+2+1 = 4", i, len(dials), dials)
		}
		seen := map[string]bool{}
		for j, a := range dials {
			if seen[a] {
				t.Fatalf("request %d tried %s twice: %v", i, a, dials)
			}
			seen[a] = true
			if (j < 3) == inSC2[a] {
				t.Fatalf("request %d attempt %d went to %s: want SC1 for attempts 1-3, SC2 for the cross retry (%v)", i, j+1, a, dials)
			}
		}
	}
	if forwarded == 0 {
		t.Fatal("every request was blackholed; the test proved nothing")
	}
}

// D5 with a single instance: exactly 1 + retry_max attempts (no cross
// retry: no other sub-cluster has an instance).
func TestD5SingleInstanceBounded(t *testing.T) {
	dead := deadAddr(t)
	snap := testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(dead, 1)}},
		map[string]int{"SC1": 100}, func(p *config.Policy) { p.Health.FailNum = 1000; p.Retry.RetryMax = 2; p.Retry.CrossRetry = 1 }))
	d := &recordingDialer{}
	p := newProxy(t, snap, proxyOpts{opts: Options{Pools: forward.NewPools(forward.Options{DialContext: d.dial})}})
	res, _ := get(t, client(t), p.url+"/", nil)
	if res.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, want 502", res.StatusCode)
	}
	if n := len(d.take()); n != 3 {
		t.Fatalf("%d attempts, want exactly 1 + retry_max = 3", n)
	}
}

// D8: applying snapshots under load closes no client connection and aborts no
// in-flight request; a slow request spanning a swap (that even removes its
// instance) completes.
func TestD8SwapUnderLoadDropsNothing(t *testing.T) {
	release := make(chan struct{})
	slowStarted := make(chan struct{}, 1)
	slow := newBackend(t, "slow", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/slow" {
			io.WriteString(w, "fast")
			return
		}
		slowStarted <- struct{}{}
		w.WriteHeader(200)
		http.NewResponseController(w).Flush()
		<-release
		w.Write(bytes.Repeat([]byte("s"), 256<<10))
	})
	b1, b2 := newBackend(t, "b1", nil), newBackend(t, "b2", nil)
	build := func(v uint64, bs ...*backend) *snapshot.Snapshot {
		var is []config.Instance
		for _, b := range bs {
			is = append(is, inst(b.addr, 1))
		}
		return testSnapshot(v, testCluster(map[string][]config.Instance{"SC1": is}, map[string]int{"SC1": 100}, nil))
	}
	// Each client connection's states at the proxy, for the failure
	// message and to find the ones the proxy closed.
	var histMu sync.Mutex
	hist := map[string][]string{} // client address → states
	t0 := time.Now()
	p := newProxy(t, build(1, slow), proxyOpts{connState: func(c net.Conn, s http.ConnState) {
		histMu.Lock()
		hist[c.RemoteAddr().String()] = append(hist[c.RemoteAddr().String()], fmt.Sprintf("%s@%s", s, time.Since(t0).Round(time.Microsecond)))
		histMu.Unlock()
	}})
	// The Go client may close a connection itself: it does not reuse one
	// whose request write it has not heard finished within 50 ms of reading
	// the answer, which a loaded machine reaches. Such a close, made before
	// the client read an end from the proxy, is not the proxy's doing.
	var own ownCloses
	c := own.client(t)
	closedByProxy := func() (n int, detail string) {
		histMu.Lock()
		defer histMu.Unlock()
		var out []string
		for addr, h := range hist {
			last := h[len(h)-1]
			if !strings.HasPrefix(last, http.StateClosed.String()) && !strings.HasPrefix(last, http.StateHijacked.String()) {
				continue
			}
			by := "the proxy"
			if own.closedFirst(addr) {
				by = "the client, first"
			} else {
				n++
			}
			out = append(out, fmt.Sprintf("%s closed by %s: %s", addr, by, strings.Join(h[max(0, len(h)-6):], " ")))
		}
		return n, strings.Join(out, "\n")
	}
	var retried atomic.Int64 // requests the client sent again on another connection
	var retriedInfo atomic.Value
	type result struct {
		status int
		n      int
		err    error
	}
	slowDone := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, p.url+"/slow", nil)
		req.Host = "demo.test"
		res, err := c.Do(req)
		if err != nil {
			slowDone <- result{err: err}
			return
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		slowDone <- result{status: res.StatusCode, n: len(b), err: err}
	}()
	<-slowStarted
	// Load on other connections while the table changes 40 times.
	var wg sync.WaitGroup
	var failures atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest(http.MethodGet, p.url+"/", nil)
				req.Host = "demo.test"
				conns := 0
				req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) {
					if conns++; conns > 1 {
						retried.Add(1)
						retriedInfo.CompareAndSwap(nil, fmt.Sprintf("retried at %s on %s (reused %v)", time.Since(t0).Round(time.Microsecond), ci.Conn.LocalAddr(), ci.Reused))
					}
				}}))
				res, err := c.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if err == nil && res.StatusCode != 200 {
						err = fmt.Errorf("status %d %s", res.StatusCode, res.Header.Get(ReasonHeader))
					}
				}
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	for v := uint64(2); v < 42; v++ {
		var err error
		if v%2 == 0 {
			err = p.s.Apply(checked(t, build(v, b1, b2)))
		} else {
			err = p.s.Apply(checked(t, build(v, b2)))
		}
		if err != nil {
			t.Fatal(err)
		}
		poll.EventuallyTrue(t, 20*time.Second, "traffic after a swap", func() bool { return b1.hits.Load()+b2.hits.Load() >= int64(v) })
	}
	close(stop)
	wg.Wait()
	close(release)
	r := <-slowDone
	if r.err != nil || r.status != 200 || r.n != 256<<10 {
		t.Fatalf("slow request across 40 swaps: status %d, %d bytes, err %v; want 200, %d bytes", r.status, r.n, r.err, 256<<10)
	}
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d requests failed during swaps; first: %v", n, firstErr.Load())
	}
	if n, detail := closedByProxy(); n != 0 {
		t.Fatalf("the proxy closed %d client connections during swaps, want 0; %d requests retried by the client (first: %v):\n%s",
			n, retried.Load(), retriedInfo.Load(), detail)
	} else if detail != "" {
		t.Logf("connections the client closed itself:\n%s", detail)
	}
	if p.s.Version() != 41 {
		t.Fatalf("version %d, want 41", p.s.Version())
	}
}

var _ = bufio.NewReader
var _ = strings.Contains

// ownCloses follows the connections of a client: which ones the client
// closed before it had read an end (EOF or an error) from the other side.
type ownCloses struct {
	mu    sync.Mutex
	first map[string]bool // local address → closed by the client first
}

// client is an http.Client (as client(t)) whose connections ownCloses follows.
func (o *ownCloses) client(t *testing.T) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &followedConn{Conn: c, o: o}, nil
		}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

func (o *ownCloses) closedFirst(local string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.first[local]
}

type followedConn struct {
	net.Conn
	o      *ownCloses
	ended  atomic.Bool // a Read returned an error (EOF included)
	closed sync.Once
}

func (c *followedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.ended.Store(true)
	}
	return n, err
}

func (c *followedConn) Close() error {
	c.closed.Do(func() {
		if !c.ended.Load() {
			c.o.mu.Lock()
			if c.o.first == nil {
				c.o.first = map[string]bool{}
			}
			c.o.first[c.LocalAddr().String()] = true
			c.o.mu.Unlock()
		}
	})
	return c.Conn.Close()
}

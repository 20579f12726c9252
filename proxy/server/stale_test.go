package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/testkit/poll"
)

// genListener is one server generation's view of a shared listening
// socket: Close ends this generation's Accept only.
type genListener struct {
	conns  <-chan net.Conn
	closed chan struct{}
	once   sync.Once
	addr   net.Addr
}

func (g *genListener) Accept() (net.Conn, error) {
	select {
	case c := <-g.conns:
		return c, nil
	case <-g.closed:
		return nil, net.ErrClosed
	}
}

func (g *genListener) Close() error   { g.once.Do(func() { close(g.closed) }); return nil }
func (g *genListener) Addr() net.Addr { return g.addr }

// rawInstance is a minimal HTTP/1.1 backend on its own loopback socket,
// whose behaviour per request the test switches: it answers "ok" with
// keep-alive, or (reset) reads the request and resets the connection, or
// (swallow) reads the whole request and closes without an answer, or
// (swallow-reused) does so for every request but the first of a connection:
// a kept-alive connection that dies just as it is reused. It counts the
// requests it read, by X-Req header.
type rawInstance struct {
	addr   netip.AddrPort
	mode   atomic.Value // "ok", "reset", "swallow", "swallow-reused", "close-after"
	reads  atomic.Int64
	closed atomic.Int64 // connections this instance has closed
	mu     sync.Mutex
	seen   map[string]int
}

func newRawInstance(t *testing.T) *rawInstance {
	t.Helper()
	ri := &rawInstance{seen: map[string]int{}}
	ri.mode.Store("ok")
	ri.addr = rawListen(t, ri.serve, func() { ri.closed.Add(1) })
	return ri
}

func (ri *rawInstance) serve(c net.Conn) {
	br := bufio.NewReader(c)
	for n := 1; ; n++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, err = io.Copy(io.Discard, req.Body)
		if err != nil {
			return
		}
		ri.reads.Add(1)
		ri.mu.Lock()
		ri.seen[req.Header.Get("X-Req")]++
		ri.mu.Unlock()
		switch ri.mode.Load().(string) {
		case "reset":
			c.(*net.TCPConn).SetLinger(0)
			return
		case "swallow":
			return
		case "swallow-reused":
			if n > 1 {
				return
			}
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
			return
		}
		if ri.mode.Load().(string) == "close-after" {
			return // the answer, then a close the client learns of from the FIN alone
		}
	}
}

func (ri *rawInstance) count(id string) int {
	ri.mu.Lock()
	defer ri.mu.Unlock()
	return ri.seen[id]
}

func do(t *testing.T, c *http.Client, method, url, id, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "demo.test"
	req.Header.Set("X-Req", id)
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, id, err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res.StatusCode, res.Header.Get(ReasonHeader) + string(b)
}

// warm sends n GETs so that the proxy's pools hold idle connections.
func warm(t *testing.T, c *http.Client, url string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if s, b := do(t, c, http.MethodGet, url, "warm"+strconv.Itoa(i), ""); s != http.StatusOK {
			t.Fatalf("warm-up %d: %d %q", i, s, b)
		}
	}
}

// trackedConn records that a backend connection was closed.
type trackedConn struct {
	net.Conn
	closed atomic.Bool
}

func (c *trackedConn) Close() error { c.closed.Store(true); return c.Conn.Close() }

// Issue 17.1: a backend restart under a POST load fails no request and no
// POST reaches the backend twice. The restart is graceful, as a deploy
// does it: the new generation serves on the inherited listening socket, the
// old one shuts down (http.Server.Shutdown closes its idle keep-alive
// connections, answers its in-flight requests with "Connection: close").
// The proxy's pool then holds connections the backend closed (CLOSE-WAIT on
// the proxy's side), which must never be chosen. The restart happens while
// every load worker has a request in flight, so the test is about the
// connections the backend had closed, not about the unavoidable race of a
// request crossing a close on the wire (which no HTTP/1.1 client can resolve
// for a POST).
func TestBackendRestartUnderPOSTLoad(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddrPort(l.Addr().String())
	const workers, burst = 4, 8
	var mu sync.Mutex
	seen := map[string]int{}
	var served atomic.Int64
	var gateMu sync.Mutex
	var gate *sync.WaitGroup // non-nil: hold requests until it is done
	var inGate sync.WaitGroup
	hold := func(n int) (all chan struct{}, open func()) {
		var wg sync.WaitGroup
		wg.Add(1)
		inGate.Add(n)
		all = make(chan struct{})
		go func() { inGate.Wait(); close(all) }()
		gateMu.Lock()
		gate = &wg
		gateMu.Unlock()
		return all, func() {
			gateMu.Lock()
			gate = nil
			gateMu.Unlock()
			wg.Done()
		}
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gateMu.Lock()
		g := gate
		gateMu.Unlock()
		if g != nil {
			inGate.Done()
			g.Wait()
		}
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen[r.Header.Get("X-Req")]++
		mu.Unlock()
		served.Add(1)
		w.Write(b)
	})
	conns := make(chan net.Conn)
	accepting := make(chan struct{})
	go func() {
		defer close(accepting)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns <- &trackedConn{Conn: c}
		}
	}()
	t.Cleanup(func() { l.Close(); <-accepting })
	type generation struct {
		srv   *http.Server
		done  chan struct{}
		mu    sync.Mutex
		state map[*trackedConn]http.ConnState
	}
	start := func() *generation {
		g := &generation{done: make(chan struct{}), state: map[*trackedConn]http.ConnState{}}
		g.srv = &http.Server{Handler: h, ConnState: func(c net.Conn, st http.ConnState) {
			g.mu.Lock()
			g.state[c.(*trackedConn)] = st
			g.mu.Unlock()
		}}
		go func() {
			g.srv.Serve(&genListener{conns: conns, closed: make(chan struct{}), addr: l.Addr()})
			close(g.done)
		}()
		return g
	}
	gen := start()
	t.Cleanup(func() { gen.srv.Close(); <-gen.done })

	snap := testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(addr, 1)}},
		map[string]int{"SC1": 100}, func(p *config.Policy) { p.Health.FailNum = 1000 }))
	p := newProxy(t, snap, proxyOpts{})
	c := client(t)

	var sent, failed atomic.Int64
	var failures sync.Map
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				id := fmt.Sprintf("w%d-%d", w, i)
				req, _ := http.NewRequest(http.MethodPost, p.url+"/", strings.NewReader("body-"+id))
				req.Host = "demo.test"
				req.Header.Set("X-Req", id)
				sent.Add(1)
				res, err := c.Do(req)
				if err != nil {
					failed.Add(1)
					failures.Store(id, err.Error())
					continue
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK || string(b) != "body-"+id {
					failed.Add(1)
					failures.Store(id, fmt.Sprintf("%d %s %q", res.StatusCode, res.Header.Get(ReasonHeader), b))
				}
			}
		}()
	}
	for round := 0; round < 3; round++ {
		before := served.Load()
		poll.EventuallyTrue(t, 10*time.Second, "load before the restart", func() bool { return served.Load() >= before+40 })
		// A burst holds 8 more connections at once: the pool keeps more
		// idle connections than the load uses, as after any peak.
		all, open := hold(workers + burst)
		var bwg sync.WaitGroup
		for i := 0; i < burst; i++ {
			bwg.Add(1)
			go func() {
				defer bwg.Done()
				id := fmt.Sprintf("burst%d-%d", round, i)
				if s, b := do(t, c, http.MethodPost, p.url+"/", id, "body-"+id); s != http.StatusOK {
					t.Errorf("%s: %d %q", id, s, b)
				}
			}()
		}
		<-all
		open()
		bwg.Wait()
		before = served.Load()
		poll.EventuallyTrue(t, 10*time.Second, "load after the burst", func() bool { return served.Load() >= before+20 })

		all, open = hold(workers)
		<-all // every worker has a request in flight
		old := gen
		gen = start()
		shut := make(chan error, 1)
		go func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			shut <- old.srv.Shutdown(sctx)
		}()
		// http.Transport dials ahead of need and may pool a connection it
		// never used (StateNew here). net/http's Shutdown leaves such a
		// connection open for its first 5 s, and when a request arrives on
		// it, reads it and closes without an answer — a POST lost in a way
		// no client can tell from a backend that crashed. A backend that
		// counts an unused connection as idle closes it with the others;
		// this one does so.
		old.mu.Lock()
		for tc, st := range old.state {
			if st == http.StateNew {
				tc.Close()
			}
		}
		old.mu.Unlock()
		poll.EventuallyTrue(t, 20*time.Second, "the old generation closed its idle connections", func() bool {
			old.mu.Lock()
			defer old.mu.Unlock()
			closed := 0
			for tc, st := range old.state {
				switch {
				case tc.closed.Load():
					closed++
				case st == http.StateIdle, st == http.StateNew:
					return false
				}
			}
			// Active ones answer with "Connection: close".
			return closed > 0
		})
		open()
		if err := <-shut; err != nil {
			t.Fatal(err)
		}
		<-old.done
	}
	before := served.Load()
	poll.EventuallyTrue(t, 10*time.Second, "load after the restarts", func() bool { return served.Load() >= before+40 })
	stop()
	wg.Wait()
	failures.Range(func(k, v any) bool { t.Errorf("request %s failed: %s", k, v); return true })
	mu.Lock()
	defer mu.Unlock()
	for id, n := range seen {
		if n != 1 {
			t.Errorf("POST %s reached the backend %d times, want once", id, n)
		}
	}
	if failed.Load() != 0 || int64(len(seen)) != sent.Load()+3*burst {
		t.Fatalf("%d of %d POSTs failed, %d reached the backend", failed.Load(), sent.Load(), len(seen))
	}
}

// Issue 17.1: a POST that failed on a reused connection after it left
// (the backend read it, then closed without answering) is never sent again,
// while a replayable request that failed the same way is retried — as one
// more attempt of the request.
func TestStaleConnectionResendOnlyWhenSafe(t *testing.T) {
	ri := newRawInstance(t)
	snap := testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(ri.addr, 1)}},
		map[string]int{"SC1": 100}, func(p *config.Policy) { p.Health.FailNum = 1000; p.Retry.RetryMax = 2 }))
	buf := &syncBuffer{}
	p := newProxy(t, snap, proxyOpts{opts: Options{AccessLog: slog.New(slog.NewJSONHandler(buf, nil))}})
	c := client(t)

	warm(t, c, p.url, 1)
	ri.mode.Store("swallow")
	if s, b := do(t, c, http.MethodPost, p.url+"/", "post-1", "a body that leaves"); s != http.StatusBadGateway {
		t.Fatalf("swallowed POST: %d %q, want 502", s, b)
	}
	if n := ri.count("post-1"); n != 1 {
		t.Fatalf("swallowed POST reached the backend %d times, want once", n)
	}

	ri.mode.Store("ok")
	warm(t, c, p.url, 1)
	ri.mode.Store("swallow")
	// The idle connection is taken; the backend swallows the PUT and closes.
	// Its fresh connection for the retry is swallowed as well: 3 attempts.
	if s, b := do(t, c, http.MethodPut, p.url+"/", "put-1", "replayable"); s != http.StatusBadGateway {
		t.Fatalf("swallowed PUT: %d %q, want 502", s, b)
	}
	if n := ri.count("put-1"); n != 3 {
		t.Fatalf("replayable PUT reached the backend %d times, want 1 + retry_max = 3", n)
	}
	lines := buf.lines(t)
	last := lines[len(lines)-1]
	if last["attempts"] != float64(3) {
		t.Fatalf("access line %v: want attempts 3", last)
	}
}

// A streamed body is the request's GetBody for the std upstream client
// (another connection after one found gone, before a byte was written)
// only while not a byte of it was read: after one, no try may take it.
func TestStreamBodyGivenAgainOnlyUnread(t *testing.T) {
	b := &streamBody{rc: io.NopCloser(strings.NewReader("payload"))}
	if rc, err := b.again(); err != nil || rc != io.ReadCloser(b) {
		t.Fatalf("again before a read = %v, %v; want the body itself", rc, err)
	}
	if n, err := b.Read(make([]byte, 1)); n != 1 || err != nil {
		t.Fatalf("read = %d, %v", n, err)
	}
	if rc, err := b.again(); rc != nil || !errors.Is(err, errBodyTaken) {
		t.Fatalf("again after a read = %v, %v; want errBodyTaken", rc, err)
	}
}

// Issue 17.3: with every backend resetting the connection, a request makes
// exactly 1 + retry_max + cross_retry attempts, each to another instance,
// also when the pools hold kept-alive connections to them (the stale
// resend is an attempt like any other).
func TestRetriesBoundedWhenEveryBackendResets(t *testing.T) {
	if os.Getenv(upstreamEnv) == UpstreamStd {
		// http.Transport resends a replayable request that failed on a
		// reused connection by itself, out of the proxy's sight
		// (docs/lbproxy.md, "Retries").
		t.Skip("the std upstream client's own resend is not an attempt of the proxy")
	}
	var sc1, sc2 []*rawInstance
	var i1, i2 []config.Instance
	for i := 0; i < 3; i++ {
		ri := newRawInstance(t)
		sc1 = append(sc1, ri)
		i1 = append(i1, inst(ri.addr, 1))
	}
	for i := 0; i < 2; i++ {
		ri := newRawInstance(t)
		sc2 = append(sc2, ri)
		i2 = append(i2, inst(ri.addr, 1))
	}
	snap := testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": i1, "SC2": i2},
		map[string]int{"SC1": 100, "SC2": 0}, func(p *config.Policy) {
			p.Health.FailNum = 1000
			p.Retry.RetryMax, p.Retry.CrossRetry = 2, 1
		}))
	p := newProxy(t, snap, proxyOpts{})
	c := client(t)
	warm(t, c, p.url, 9) // every SC1 instance holds idle connections
	for _, ri := range append(append([]*rawInstance{}, sc1...), sc2...) {
		ri.mode.Store("reset")
	}
	for r := 0; r < 4; r++ {
		id := "get-" + strconv.Itoa(r)
		if s, b := do(t, c, http.MethodGet, p.url+"/", id, ""); s != http.StatusBadGateway {
			t.Fatalf("%s: %d %q, want 502", id, s, b)
		}
		total := 0
		for k, ri := range sc1 {
			n := ri.count(id)
			total += n
			if n != 1 {
				t.Errorf("%s: SC1 instance %d reached %d times, want once", id, k, n)
			}
		}
		cross := 0
		for _, ri := range sc2 {
			cross += ri.count(id)
		}
		total += cross
		if cross != 1 || total != 4 {
			t.Fatalf("%s: %d attempts (%d in SC2), want exactly 1+2+1 = 4 with the last in SC2", id, total, cross)
		}
	}
}

package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
	"github.com/sluicelb/sluice/proxy/internal/balance"
	"github.com/sluicelb/sluice/proxy/internal/forward"
)

// TestMain checks for leaked goroutines. Two fasthttp goroutines are not
// ours to stop: the process-wide Date-header updater (started once, never
// stopped) and a stopped worker pool's cleaner, which notices the stop only
// after its sleep of up to 10 s. And net/http's own: after it answers a
// bad request head itself (400, 431), the connection's goroutine lingers
// 500 ms before closing (closeWriteAndWait, its RST avoidance), whoever
// stopped the server.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"))
}

// backend is a real HTTP server standing for one instance.
type backend struct {
	name string
	srv  *httptest.Server
	addr netip.AddrPort
	hits atomic.Int64
	mu   sync.Mutex
	reqs []*http.Request // headers of received requests (bodies drained)
}

func newBackend(t *testing.T, name string, h http.HandlerFunc) *backend {
	t.Helper()
	b := &backend{name: name}
	if h == nil {
		h = func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello from "+name) }
	}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		b.mu.Lock()
		b.reqs = append(b.reqs, r.Clone(context.Background()))
		b.mu.Unlock()
		w.Header().Set("X-Backend", name)
		h(w, r)
	}))
	t.Cleanup(b.srv.Close)
	b.addr = netip.MustParseAddrPort(b.srv.Listener.Addr().String())
	return b
}

func (b *backend) last() *http.Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.reqs) == 0 {
		return nil
	}
	return b.reqs[len(b.reqs)-1]
}

// deadAddr is a loopback address that refuses connections for the whole
// test. A socket bound to it without listening holds the port: a port
// merely closed again could be handed to another test's listener meanwhile
// (and then it answers).
func deadAddr(t *testing.T) netip.AddrPort {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.CloseOnExec(fd)
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(sa.(*syscall.SockaddrInet4).Port))
}

func inst(a netip.AddrPort, w int) config.Instance {
	return config.Instance{Addr: a.Addr().String(), Port: int(a.Port()), Weight: w}
}

// oneBackendSnapshot routes everything to backend b: cluster "main",
// sub-cluster SC1 holding b alone, its row SC1 100.
func oneBackendSnapshot(b *backend) *snapshot.Snapshot {
	return testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}}, map[string]int{"SC1": 100}, nil))
}

// testCluster builds a snapshot cluster; subs maps sub-cluster → instances,
// row includes GSLB_BLACKHOLE when wanted.
func testCluster(subs map[string][]config.Instance, row map[string]int, mutate func(*config.Policy)) snapshot.Cluster {
	c := snapshot.Cluster{SubClusters: map[string]config.SubCluster{}, Policy: config.DefaultPolicy(),
		Row: snapshot.Row{Denominator: 100, Weights: row}}
	for n, is := range subs {
		c.SubClusters[n] = config.SubCluster{IDC: "idc1", Instances: is}
	}
	c.Policy.Timeouts.Connect = config.Duration(time.Second)
	c.Policy.Timeouts.ResponseHeader = config.Duration(10 * time.Second)
	if mutate != nil {
		mutate(&c.Policy)
	}
	return c
}

// testSnapshot routes every request of host "demo.test" (and the default
// product) to cluster "main".
func testSnapshot(version uint64, main snapshot.Cluster) *snapshot.Snapshot {
	s := &snapshot.Snapshot{
		Meta: snapshot.Meta{ProxyCluster: "BFE1", Version: version, CreatedAt: time.Unix(1700000000, 0).UTC()},
		Products: map[string]config.Product{"demo": {Hosts: []string{"demo.test"},
			Rules: []config.Rule{{Name: "all", Cond: "default_t()", Cluster: "main"}}}},
		DefaultProduct: "demo",
		Clusters:       map[string]snapshot.Cluster{"main": main},
	}
	s.Meta.Hash = snapshot.ContentHash(s)
	return s
}

func snapshotHash(s *snapshot.Snapshot) string { return snapshot.ContentHash(s) }

// proxy is a Server behind a real http.Server on loopback.
type proxy struct {
	s    *Server
	url  string
	addr string
	hs   Front
}

type proxyOpts struct {
	opts      Options
	front     FrontOptions
	connState func(net.Conn, http.ConnState)
	frontKind string                          // "" : SLUICE_TEST_FRONT (the std front when unset)
	wrap      func(net.Listener) net.Listener // the listener served, when set (connlimit_test.go)
}

func newProxy(t testing.TB, snap *snapshot.Snapshot, po proxyOpts) *proxy {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	reg := balance.NewRegistry(balance.RegistryOptions{StickySecret: []byte("test-secret-0123456789")})
	done := make(chan struct{})
	go func() { reg.Run(ctx); close(done) }()
	o := po.opts
	o.Registry = reg
	if o.UpstreamClient == "" {
		// TestStdUpstreamClientSuite reruns this package with "std".
		o.UpstreamClient = os.Getenv(upstreamEnv)
	}
	if o.Pools == nil {
		o.Pools = forward.NewPools(forward.Options{})
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if snap != nil {
		if err := s.Apply(checked(t, snap)); err != nil {
			t.Fatalf("apply: %v", err)
		}
	}
	front := po.front
	front.ConnState = po.connState
	// TestFastHTTPFrontSuite reruns this package with the fasthttp front.
	kind := po.frontKind
	if kind == "" {
		kind = os.Getenv(frontEnv)
	}
	hs, err := s.NewFront(kind, front)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	sl := l
	if po.wrap != nil {
		sl = po.wrap(l)
	}
	go func() { hs.Serve(sl); close(served) }()
	t.Cleanup(func() {
		hs.Close()
		<-served
		cancel()
		<-done
		o.Pools.Close()
	})
	return &proxy{s: s, url: "http://" + l.Addr().String(), addr: l.Addr().String(), hs: hs}
}

// client returns an HTTP client with its own pool, closed at cleanup.
func client(t *testing.T) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

func get(t *testing.T, c *http.Client, url string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "demo.test"
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatalf("GET %s: body: %v", url, err)
	}
	return res, string(b)
}

// checked validates s for Apply, failing the test when it does not pass.
// Tests that must never eject an instance set health.fail_num above
// validate's bound (MaxHealthCount): such a snapshot is checked at the
// bound and given its own fail_num back afterwards (tests only: the
// checked snapshot is the caller's to keep unchanged).
func checked(t testing.TB, s *snapshot.Snapshot) validate.Checked {
	t.Helper()
	failNum := map[string]int{}
	for name, c := range s.Clusters {
		if c.Policy.Health.FailNum > validate.MaxHealthCount {
			failNum[name] = c.Policy.Health.FailNum
			c.Policy.Health.FailNum = validate.MaxHealthCount
			s.Clusters[name] = c
		}
	}
	hash := s.Meta.Hash
	if len(failNum) > 0 {
		s.Meta.Hash = snapshot.ContentHash(s)
	}
	c, err := validate.Check(s)
	if err != nil {
		t.Fatalf("validate snapshot v%d: %v", s.Meta.Version, err)
	}
	for name, n := range failNum {
		cl := s.Clusters[name]
		cl.Policy.Health.FailNum = n
		s.Clusters[name] = cl
	}
	s.Meta.Hash = hash
	return c
}

// rawListen serves each loopback connection with serve, on a goroutine of
// its own; the connection is closed when serve returns, and closed (when
// set) called after. Cleanup closes the listener and every connection
// still open, and waits for the goroutines.
func rawListen(t testing.TB, serve func(net.Conn), closed func()) netip.AddrPort {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				serve(c)
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
				c.Close()
				if closed != nil {
					closed()
				}
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return netip.MustParseAddrPort(l.Addr().String())
}

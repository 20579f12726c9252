package explain_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
	"github.com/sluicelb/sluice/proxy/explain"
	"github.com/sluicelb/sluice/proxy/internal/balance"
	"github.com/sluicelb/sluice/proxy/internal/forward"
	"github.com/sluicelb/sluice/proxy/server"
)

// The fasthttp upstream client leaves its process-wide goroutines behind
// (see proxy/server's TestMain).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"))
}

// fleet is four real backends in two sub-clusters behind a real proxy.
type fleet struct {
	snap    *snapshot.Snapshot
	checked validate.Checked
	srv     *server.Server
	url     string
	byAddr  map[string]string // backend address → name
}

func newFleet(t *testing.T, mutate func(*config.Policy)) *fleet {
	t.Helper()
	f := &fleet{byAddr: map[string]string{}}
	subs := map[string]config.SubCluster{}
	for _, sub := range []string{"SC1", "SC2"} {
		var ins []config.Instance
		for i := range 2 {
			name := fmt.Sprintf("%s-%d", sub, i)
			b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Backend", name)
			}))
			t.Cleanup(b.Close)
			a := netip.MustParseAddrPort(b.Listener.Addr().String())
			f.byAddr[a.String()] = name
			ins = append(ins, config.Instance{Addr: a.Addr().String(), Port: int(a.Port()), Weight: 1 + i})
		}
		subs[sub] = config.SubCluster{IDC: "idc-" + sub, Instances: ins}
	}
	pol := config.DefaultPolicy()
	pol.Timeouts.Connect = config.Duration(time.Second)
	if mutate != nil {
		mutate(&pol)
	}
	f.snap = &snapshot.Snapshot{
		Meta: snapshot.Meta{ProxyCluster: "BFE1", Version: 3},
		Products: map[string]config.Product{"demo": {Hosts: []string{"demo.test"},
			Rules: []config.Rule{{Name: "all", Cond: "default_t()", Cluster: "main"}}}},
		DefaultProduct: "demo",
		Clusters: map[string]snapshot.Cluster{"main": {SubClusters: subs, Policy: pol,
			Row: snapshot.Row{Denominator: 100, Weights: map[string]int{"SC1": 50, "SC2": 40, config.Blackhole: 10}}}},
	}
	f.snap.Meta.Hash = snapshot.ContentHash(f.snap)
	pools := forward.NewPools(forward.Options{})
	t.Cleanup(pools.Close)
	srv, err := server.New(server.Options{Registry: balance.NewRegistry(balance.RegistryOptions{StickySecret: []byte("k")}), Pools: pools})
	if err != nil {
		t.Fatal(err)
	}
	checked, err := validate.Check(f.snap)
	if err != nil {
		t.Fatal(err)
	}
	f.checked = checked
	if err := srv.Apply(checked); err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	f.url = "http://" + l.Addr().String() + "/"
	return f
}

// send makes a real request through the proxy; it returns the backend's
// name, or "" and the status when the proxy answered itself.
func (f *fleet) send(t *testing.T, c *http.Client, user string) (string, int) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, f.url, nil)
	req.Host = "demo.test"
	req.Header.Set("X-User", user)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.Header.Get("X-Backend"), resp.StatusCode
}

func explainReq(t *testing.T, user string) (*http.Request, netip.Addr) {
	t.Helper()
	r, peer, err := explain.Request(url.Values{"url": {"http://demo.test/"}, "header": {"X-User:" + user}})
	if err != nil {
		t.Fatal(err)
	}
	return r, peer
}

// For a hashing mode the instance explain names is the one real requests
// go to: explain, then send the same request through the real proxy. The
// offline evaluator (lbctl explain --config) says the same as the live one.
func TestExplainThenSend(t *testing.T) {
	for _, algo := range []string{config.InstanceSticky, config.InstanceSource} {
		t.Run(algo, func(t *testing.T) {
			f := newFleet(t, func(p *config.Policy) {
				p.Balance.Instance = algo
				p.Balance.Hash = config.Hash{Key: config.HashHeader, Header: "X-User"}
			})
			offline, err := explain.Compile(f.checked, nil)
			if err != nil {
				t.Fatal(err)
			}
			c := &http.Client{Transport: &http.Transport{}}
			defer c.CloseIdleConnections()
			seen := map[string]bool{}
			for k := range 60 {
				user := fmt.Sprint("user-", k)
				r, peer := explainReq(t, user)
				ex, err := f.srv.Explain(r, peer)
				if err != nil {
					t.Fatal(err)
				}
				b := ex.Balance
				if !b.Deterministic {
					t.Fatalf("%s: %s explained as not deterministic: %+v", user, algo, b)
				}
				got, status := f.send(t, c, user)
				switch {
				case b.Blackhole:
					if status != http.StatusServiceUnavailable || got != "" {
						t.Fatalf("%s: explain says blackhole; the proxy answered %d from %q", user, status, got)
					}
					seen["blackhole"] = true
				case f.byAddr[b.Instance] != got:
					t.Fatalf("%s: explain names %s (%s), the request went to %q", user, b.Instance, f.byAddr[b.Instance], got)
				default:
					seen[got] = true
				}
				off, err := offline.Explain(r, peer)
				if err != nil || off.Balance.Instance != b.Instance || off.Balance.SubCluster != b.SubCluster || off.Balance.Blackhole != b.Blackhole {
					t.Fatalf("%s: offline %+v (%v), live %+v", user, off.Balance, err, b)
				}
			}
			// source hashes the client address (all 127.0.0.1 here): one
			// instance per sub-cluster; sticky spreads keys over all four.
			if want := map[string]int{config.InstanceSticky: 5, config.InstanceSource: 3}[algo]; len(seen) != want {
				t.Fatalf("60 keys reached %v, want %d outcomes", seen, want)
			}
		})
	}
}

// For wrr, least connections and random explain names no instance: it
// lists the candidates with their effective weights, and the sub-cluster
// the key decides.
func TestExplainDoesNotClaimAnInstance(t *testing.T) {
	for _, algo := range []string{config.InstanceWRR, config.InstanceWLC, config.InstanceLeastConn, config.InstanceRandom, config.InstanceP2CEWMA} {
		t.Run(algo, func(t *testing.T) {
			f := newFleet(t, func(p *config.Policy) {
				p.Balance.Instance = algo
				p.Balance.Hash = config.Hash{Key: config.HashHeader, Header: "X-User"}
			})
			for k := range 20 {
				r, peer := explainReq(t, fmt.Sprint("user-", k))
				ex, err := f.srv.Explain(r, peer)
				if err != nil {
					t.Fatal(err)
				}
				b := ex.Balance
				if b.Blackhole {
					continue
				}
				if b.Deterministic || b.Instance != "" || b.SubCluster == "" || len(b.Candidates) != 2 {
					t.Fatalf("%s: %+v; want the sub-cluster and its two candidates, no instance", algo, b)
				}
				for i, cd := range b.Candidates {
					if cd.SubCluster != b.SubCluster || cd.Weight != 1+i {
						t.Fatalf("candidate %d %+v: want %s weight %d", i, cd, b.SubCluster, 1+i)
					}
				}
			}
		})
	}
}

func TestRequestRejectsBadQueries(t *testing.T) {
	for q, want := range map[string]string{
		"":                             "query parameter url is required (e.g. url=http://example.test/path)",
		"url=not-a-url":                `url "not-a-url": want an absolute http or https URL`,
		"url=http://x/&method=get":     `method "get": want an upper-case HTTP method`,
		"url=http://x/&client_ip=nope": `client_ip "nope": not an IP address`,
		"url=http://x/&header=NoColon": `header "NoColon": want NAME:VALUE`,
		"url=http://x/&cookie=novalue": `cookie "novalue": want NAME=VALUE`,
	} {
		v, _ := url.ParseQuery(q)
		if _, _, err := explain.Request(v); err == nil || err.Error() != want {
			t.Errorf("%q: %v, want %q", q, err, want)
		}
	}
	r, peer, err := explain.Request(url.Values{"url": {"https://h.test/p?q=1"}, "method": {"POST"}, "client_ip": {"192.0.2.5"},
		"header": {"X-A: 1"}, "cookie": {"S=abc"}})
	if err != nil || r.Method != "POST" || r.Host != "h.test" || peer.String() != "192.0.2.5" || r.Header.Get("X-A") != "1" {
		t.Fatalf("request %+v peer %s: %v", r, peer, err)
	}
	if ck, err := r.Cookie("S"); err != nil || ck.Value != "abc" {
		t.Fatalf("cookie: %v %v", ck, err)
	}
}

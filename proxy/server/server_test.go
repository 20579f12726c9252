package server

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
)

func TestForwardsAndSetsForwardingHeaders(t *testing.T) {
	b := newBackend(t, "b1", nil)
	p := newProxy(t, testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}},
		map[string]int{"SC1": 100}, nil)), proxyOpts{})
	c := client(t)
	res, body := get(t, c, p.url+"/x?y=1", map[string]string{"X-Forwarded-For": "6.6.6.6", "Connection": "X-Forwarded-For"})
	if res.StatusCode != 200 || body != "hello from b1" {
		t.Fatalf("got %d %q, want 200 %q", res.StatusCode, body, "hello from b1")
	}
	if got := res.Header.Get("X-Backend"); got != "b1" {
		t.Fatalf("backend header %q not passed through", got)
	}
	r := b.last()
	if got := r.Header.Get("X-Forwarded-For"); got != "127.0.0.1" {
		t.Errorf("X-Forwarded-For at backend = %q, want the peer 127.0.0.1 only (spoofed entry dropped, not stripped by Connection)", got)
	}
	if got := r.Header.Get("X-Forwarded-Proto"); got != "http" {
		t.Errorf("X-Forwarded-Proto = %q, want http", got)
	}
	if got := r.Header.Get("X-Forwarded-Host"); got != "demo.test" {
		t.Errorf("X-Forwarded-Host = %q, want demo.test", got)
	}
	if r.Host != "demo.test" || r.URL.RawQuery != "y=1" || r.URL.Path != "/x" {
		t.Errorf("backend saw host %q path %q query %q", r.Host, r.URL.Path, r.URL.RawQuery)
	}
}

func TestNotReadyAndNoRoute(t *testing.T) {
	p := newProxy(t, nil, proxyOpts{})
	c := client(t)
	res, _ := get(t, c, p.url+"/", nil)
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get(ReasonHeader) != CodeNotReady {
		t.Fatalf("before apply: %d %q, want 503 %s", res.StatusCode, res.Header.Get(ReasonHeader), CodeNotReady)
	}
	b := newBackend(t, "b1", nil)
	s := oneBackendSnapshot(b)
	s.DefaultProduct = ""
	s.Meta.Hash = snapshot.ContentHash(s)
	if err := p.s.Apply(checked(t, s)); err != nil {
		t.Fatal(err)
	}
	res, _ = get(t, c, p.url+"/", map[string]string{"Host": "other.test"})
	if res.StatusCode != http.StatusNotFound || res.Header.Get(ReasonHeader) != CodeNoRoute {
		t.Fatalf("unknown host: %d %q, want 404 %s", res.StatusCode, res.Header.Get(ReasonHeader), CodeNoRoute)
	}
	res, body := get(t, c, p.url+"/", nil)
	if res.StatusCode != 200 || !strings.Contains(body, "b1") {
		t.Fatalf("known host: %d %q", res.StatusCode, body)
	}
}

// A client's X-Forwarded-For, -Proto and -Host count only from a trusted
// peer: kept (For extended with the peer) from one, replaced from any
// other. The fast path looks them up only for a trusted peer.
func TestForwardingHeadersTrustOnlyTrustedPeers(t *testing.T) {
	sent := map[string]string{"X-Forwarded-For": "198.51.100.9", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "front.test"}
	for _, kind := range []string{FrontStd, FrontFastHTTP} {
		for _, trust := range []bool{false, true} {
			b := newBackend(t, "b1", nil)
			po := proxyOpts{opts: Options{UpstreamClient: UpstreamFast}, frontKind: kind}
			want := map[string]string{"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "http", "X-Forwarded-Host": "demo.test"}
			if trust {
				po.opts.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
				want = map[string]string{"X-Forwarded-For": "198.51.100.9, 127.0.0.1", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "front.test"}
			}
			p := newProxy(t, testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}},
				map[string]int{"SC1": 100}, nil)), po)
			if res, _ := get(t, client(t), p.url+"/", sent); res.StatusCode != 200 {
				t.Fatalf("%s trusted=%v: status %d", kind, trust, res.StatusCode)
			}
			r := b.last()
			for k, v := range want {
				if got := r.Header.Values(k); len(got) != 1 || got[0] != v {
					t.Errorf("%s trusted=%v: backend %s = %q, want %q", kind, trust, k, got, v)
				}
			}
		}
	}
}

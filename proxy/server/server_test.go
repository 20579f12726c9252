package server

import (
	"net/http"
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
	s := testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}}, map[string]int{"SC1": 100}, nil))
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

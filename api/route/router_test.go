package route

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

func missionProducts() map[string]config.Product {
	return map[string]config.Product{
		"demo": {Hosts: []string{"demo.local"}, Rules: []config.Rule{
			{Name: "static", Cond: `req_path_prefix_in("/static", false)`, Cluster: "demo-static"},
			{Name: "post-setting", Cond: `req_method_in("POST") && req_path_prefix_in("/setting", false)`, Cluster: "demo-post"},
			{Cond: `default_t()`, Cluster: "demo-main"},
		}},
		"other": {Hosts: []string{"Other.Local", "10.0.0.1"}, Rules: []config.Rule{
			{Name: "all", Cond: `default_t()`, Cluster: "other-main"},
		}},
	}
}

func TestRouterMission(t *testing.T) {
	rt, err := Compile(missionProducts(), "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		method, target, host string
		want                 Result
		ok                   bool
	}{
		{"GET", "/static/a.css", "demo.local", Result{"demo", "static", 0, "demo-static"}, true},
		{"POST", "/static/a.css", "DEMO.local:8080", Result{"demo", "static", 0, "demo-static"}, true},
		{"POST", "/setting/x", "demo.local", Result{"demo", "post-setting", 1, "demo-post"}, true},
		{"GET", "/setting/x", "demo.local", Result{"demo", "2", 2, "demo-main"}, true},
		{"GET", "/", "demo.local.", Result{"demo", "2", 2, "demo-main"}, true},
		{"GET", "/", "other.local", Result{"other", "all", 0, "other-main"}, true},
		{"GET", "/", "10.0.0.1:80", Result{"other", "all", 0, "other-main"}, true},
		{"GET", "/", "unknown.local", Result{}, false},
	}
	for _, tt := range tests {
		h := newReq(tt.method, "http://x"+tt.target, nil)
		h.Host = tt.host
		got, ok := rt.Match(&Request{HTTP: h})
		if ok != tt.ok || got != tt.want {
			t.Errorf("%s %s host %s = %+v, %v; want %+v, %v", tt.method, tt.target, tt.host, got, ok, tt.want, tt.ok)
		}
	}
	if got := strings.Join(rt.Clusters(), ","); got != "demo-main,demo-post,demo-static,other-main" {
		t.Errorf("Clusters() = %s", got)
	}
}

func TestRouterDefaultProduct(t *testing.T) {
	rt, err := Compile(missionProducts(), "demo")
	if err != nil {
		t.Fatal(err)
	}
	h := newReq("GET", "http://unknown.local/static/x", nil)
	got, ok := rt.Match(&Request{HTTP: h})
	if !ok || got != (Result{"demo", "static", 0, "demo-static"}) {
		t.Errorf("unknown host with default product = %+v, %v", got, ok)
	}
}

// TestRouterHostLengths: productOf skips the host lookup when no host has
// the request host's length (Router.hostLens); every configured host is
// still found, whatever its length (63 bytes and more share a bit), its
// case, port or trailing dot, and a host of another length, or of a
// configured length but unknown, gets the default product.
func TestRouterHostLengths(t *testing.T) {
	hosts := []string{"a", "ab.c", strings.Repeat("x", 62), strings.Repeat("y", 63), strings.Repeat("z", 64), strings.Repeat("w", 100)}
	products := map[string]config.Product{"def": {Rules: []config.Rule{{Name: "all", Cond: `default_t()`, Cluster: "def"}}}}
	for i, h := range hosts {
		name := fmt.Sprintf("p%d", i)
		products[name] = config.Product{Hosts: []string{h}, Rules: []config.Rule{{Name: "all", Cond: `default_t()`, Cluster: name}}}
	}
	rt, err := Compile(products, "def")
	if err != nil {
		t.Fatal(err)
	}
	match := func(host string) string {
		h := newReq("GET", "http://x/", nil)
		h.Host = host
		got, ok := rt.Match(&Request{HTTP: h})
		if !ok {
			t.Fatalf("host %q: no match", host)
		}
		return got.Product
	}
	for i, h := range hosts {
		want := fmt.Sprintf("p%d", i)
		for _, req := range []string{h, strings.ToUpper(h), h + ":8080", h + "."} {
			if got := match(req); got != want {
				t.Errorf("host %q (%d bytes) = product %s, want %s", req, len(h), got, want)
			}
		}
	}
	for _, req := range []string{"", "b", "abc", "ab.d", strings.Repeat("x", 61), strings.Repeat("v", 63), strings.Repeat("v", 70), "10.0.0.1:80"} {
		if got := match(req); got != "def" {
			t.Errorf("host %q = product %s, want def", req, got)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	products := map[string]config.Product{
		"a": {Hosts: []string{"x.local", "", "y.local:80"}, Rules: []config.Rule{
			{Cond: `req_pat_in("/")`, Cluster: "c"},
			{Cond: `req_proto_secure()`, Cluster: ""},
		}},
		"b": {Hosts: []string{"X.LOCAL"}, Rules: nil},
	}
	_, err := Compile(products, "zzz")
	if err == nil {
		t.Fatal("Compile accepted a broken configuration")
	}
	want := []string{
		`products.a.hosts[1]: host is empty`,
		`products.a.hosts[2]: host "y.local:80" must not include a port`,
		`products.a.rules[0].cond: column 1: unknown primitive "req_pat_in"`,
		`products.a.rules[1].cluster: is empty; want a cluster name`,
		`products.a.rules[1].cond: "req_proto_secure()" is the last rule's condition; the last rule must be the default rule "default_t()"`,
		`products.b.hosts[0]: host "X.LOCAL" is already used by product "a"`,
		`products.b.rules: is empty; want at least a default rule (cond "default_t()")`,
		`default_product: product "zzz" does not exist`,
	}
	got := strings.TrimPrefix(err.Error(), "compile routes: ")
	if got != strings.Join(want, "\n") {
		t.Errorf("Compile errors:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

func fiftyRuleRouter(tb testing.TB) *Router {
	rules := make([]config.Rule, 0, 50)
	for i := 0; i < 49; i++ {
		rules = append(rules, config.Rule{
			Name:    fmt.Sprintf("r%d", i),
			Cond:    fmt.Sprintf(`req_method_in("POST") && req_path_prefix_in("/api/v%d/", false) || req_header_value_in("X-Route", "r%d", true) && !req_proto_secure() || req_cookie_value_in("bucket", "b%d", false) && req_query_value_in("v", "%d", false)`, i, i, i, i),
			Cluster: fmt.Sprintf("c%d", i),
		})
	}
	rules = append(rules, config.Rule{Name: "last", Cond: `default_t()`, Cluster: "main"})
	rt, err := Compile(map[string]config.Product{"p": {Hosts: []string{"bench.local"}, Rules: rules}}, "")
	if err != nil {
		tb.Fatal(err)
	}
	return rt
}

func benchRequest() *Request {
	h := newReq("GET", "http://bench.local/api/v99/items?v=x&lang=en", map[string]string{
		"Cookie": "bucket=zz; sid=123", "X-Route": "none",
	})
	h.Host = "Bench.Local:8080"
	return &Request{HTTP: h, ClientIP: netip.MustParseAddr("10.0.0.1")}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	rt := fiftyRuleRouter(t)
	h := benchRequest().HTTP
	var r Request
	r.Reset(h, netip.MustParseAddr("10.0.0.1"), false)
	if res, ok := rt.Match(&r); !ok || res.RuleName != "last" || res.Cluster != "main" {
		t.Fatalf("Match = %+v, %v; want the last rule", res, ok)
	}
	allocs := testing.AllocsPerRun(200, func() {
		r.Reset(h, netip.MustParseAddr("10.0.0.1"), false)
		if _, ok := rt.Match(&r); !ok {
			t.Fatal("no match")
		}
	})
	if allocs != 0 {
		t.Errorf("Match with a reused Request allocates %.1f times per request, want 0", allocs)
	}
}

// BenchmarkMatch50Rules routes a request through a product of 50 rules
// (each an || of three && groups) to the last, default rule.
func BenchmarkMatch50Rules(b *testing.B) {
	rt := fiftyRuleRouter(b)
	h := benchRequest().HTTP
	ip := netip.MustParseAddr("10.0.0.1")
	var r Request
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(h, ip, false)
		if res, ok := rt.Match(&r); !ok || res.RuleIndex != 49 {
			b.Fatal("wrong rule")
		}
	}
}

// BenchmarkMatchFirstRule is the best case: the mission's static rule.
func BenchmarkMatchFirstRule(b *testing.B) {
	rt, err := Compile(missionProducts(), "")
	if err != nil {
		b.Fatal(err)
	}
	h := newReq("GET", "http://demo.local/static/app.js", nil)
	var r Request
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(h, netip.Addr{}, false)
		if _, ok := rt.Match(&r); !ok {
			b.Fatal("no match")
		}
	}
}

func BenchmarkParse(b *testing.B) {
	const cond = `req_method_in("POST") && req_path_prefix_in("/api/v1/", false) || req_header_value_in("X-Route", "r1", true) && !req_proto_secure()`
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(cond); err != nil {
			b.Fatal(err)
		}
	}
}

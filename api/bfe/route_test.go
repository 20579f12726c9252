package bfe

import (
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/route"
)

// TestBasicRulesRouteLikeBFE compiles converted basic rules with Sluice's
// router and checks the cluster each request gets against BFE's basic-rule
// tree semantics, worked out by hand from bfe_route_conf/route_rule_conf.
func TestBasicRulesRouteLikeBFE(t *testing.T) {
	p := filepath.Join(t.TempDir(), "route_rule.data")
	write(t, p, `{"Version":"1","BasicRule":{"p":[
		{"Hostname":["www.a.com"],"Path":["/a"],"ClusterName":"c1"},
		{"Hostname":["www.a.com"],"Path":["/b*"],"ClusterName":"c2"},
		{"Hostname":["www.a.com"],"Path":["/b/x"],"ClusterName":"ADVANCED_MODE"},
		{"Path":["/a"],"ClusterName":"c3"},
		{"Hostname":["*"],"Path":["/*"],"ClusterName":"c4"}]},
		"ProductRule":{"p":[{"Cond":"default_t()","ClusterName":"cadv"}]}}`)
	rr, err := LoadRouteRule(p)
	if err != nil {
		t.Fatal(err)
	}
	products := map[string]config.Product{"p": {Rules: rr.Products["p"]}}
	rt, err := route.Compile(products, "p")
	if err != nil {
		t.Fatalf("converted rules do not compile: %v\n%q", err, rr.Products["p"])
	}
	for _, tc := range []struct{ host, path, want string }{
		{"www.a.com", "/a", "c1"},
		{"WWW.A.COM:8080", "/a", "c1"},
		{"www.a.com", "/b", "c2"},
		{"www.a.com", "/b/y", "c2"},
		{"www.a.com", "/b/x", "cadv"}, // exact ADVANCED_MODE beats the /b* prefix
		{"www.a.com", "/bb", "cadv"},  // /b* is /b or /b/…, not /bb
		{"www.a.com", "/c", "cadv"},   // the host's tree matched, no path did: no fallback to "*"
		{"other.com", "/a", "c3"},
		{"other.com", "/zzz", "c4"},
	} {
		req := &route.Request{HTTP: httptest.NewRequest("GET", "http://"+tc.host+tc.path, nil), ClientIP: netip.MustParseAddr("192.0.2.1")}
		res, ok := rt.Match(req)
		if !ok || res.Cluster != tc.want {
			t.Errorf("%s%s → %q (matched %v), want %q", tc.host, tc.path, res.Cluster, ok, tc.want)
		}
	}
}

// TestImportedStatesCompile runs the imported routes through Sluice's router.
func TestImportedStatesCompile(t *testing.T) {
	for _, dir := range []string{sampleConf(t), "testdata/mission"} {
		st, _, err := ImportDir(dir, ImportOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := route.Compile(st.Products, st.DefaultProduct); err != nil {
			t.Errorf("%s: %v", dir, err)
		}
	}
}

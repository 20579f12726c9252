package bfe

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
)

func sampleConf(t *testing.T) string { return filepath.Join(testdata(t), "conf") }

func TestImportSampleConf(t *testing.T) {
	st, warns, err := ImportDir(sampleConf(t), ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(st.Topology, config.Topology{
		IDCs:          []string{"IDC1"},
		ProxyClusters: map[string]config.ProxyCluster{"BFE": {IDC: "IDC1"}},
	}) {
		t.Errorf("topology: %+v", st.Topology)
	}
	wantProducts := map[string]config.Product{
		"shop": {
			Hosts: []string{"shop.example.com", "www.shop.example.com", "fcgi.shop.example.com", "h2c.shop.example.com"},
			Rules: []config.Rule{
				{Cond: `req_host_in("shop.example.com")`, Cluster: "web_plain"},
				{Cond: `req_host_in("www.shop.example.com")`, Cluster: "web_tls"},
				{Cond: `req_host_in("fcgi.shop.example.com")`, Cluster: "web_fcgi"},
				{Cond: `req_host_in("h2c.shop.example.com")`, Cluster: "web_h2c"},
				{Cond: `default_t()`, Cluster: "web_plain"},
			},
		},
		// No default rule in the sample: one is appended to the last cluster.
		"assist": {
			Hosts: []string{"assist.shop.example.com"},
			Rules: []config.Rule{
				{Cond: `req_host_in("assist.shop.example.com")`, Cluster: "assist"},
				{Cond: `default_t()`, Cluster: "assist"},
			},
		},
		// local has hosts but no rules: not imported.
	}
	if !reflect.DeepEqual(st.Products, wantProducts) {
		t.Errorf("products:\n got %+v\nwant %+v", st.Products, wantProducts)
	}
	if st.DefaultProduct != "" {
		t.Errorf("default product %q, want none", st.DefaultProduct)
	}
	inst := func(addr string, port int, name string) config.Instance {
		return config.Instance{Addr: addr, Port: port, Weight: 10, Labels: map[string]string{"name": name}}
	}
	wantSubs := map[string]map[string]config.SubCluster{
		"web_plain": {"web.pool.idc1": {IDC: "IDC1", Instances: []config.Instance{inst("127.0.0.1", 18081, "web-a")}}},
		"web_tls":   {"web.pool.idc1": {IDC: "IDC1", Instances: []config.Instance{inst("127.0.0.1", 18443, "web-tls-a")}}},
		"web_fcgi":  {"fcgi.pool.idc1": {IDC: "IDC1", Instances: []config.Instance{inst("127.0.0.1", 19000, "fcgi-a")}}},
		"web_h2c":   {"h2c.pool.idc1": {IDC: "IDC1", Instances: []config.Instance{inst("127.0.0.1", 18735, "web-a")}}},
		"assist": {"assist.pool.idc1": {IDC: "IDC1", Instances: []config.Instance{
			inst("198.51.100.20", 8083, "assist-8083"), inst("198.51.100.20", 8081, "assist-8081")}}},
	}
	if len(st.Clusters) != len(wantSubs) {
		t.Errorf("clusters: %d, want %d", len(st.Clusters), len(wantSubs))
	}
	for name, subs := range wantSubs {
		if !reflect.DeepEqual(st.Clusters[name].SubClusters, subs) {
			t.Errorf("cluster %s sub-clusters:\n got %+v\nwant %+v", name, st.Clusters[name].SubClusters, subs)
		}
	}

	// web_plain's policy, field by field from cluster_conf.data.
	want := config.DefaultPolicy()
	want.Balance.SubclusterMode = config.SubclusterBFE
	want.Balance.Hash = config.Hash{Key: config.HashHeader, Header: "Cookie:SID"} // HashStrategy 0
	want.Balance.Instance = config.InstanceWRR
	want.Retry.RetryMax, want.Retry.CrossRetry = 2, 0
	want.Health.FailNum, want.Health.SuccNum = 5, 1
	want.Health.CheckInterval = config.Duration(2 * time.Second)
	want.Health.Probe = config.Probe{Scheme: "http", Path: "/healthz", Host: "shop.example.com", Status: "200"}
	want.Pool.MaxIdleConnsPerHost = 0
	want.Timeouts.Connect = config.Duration(1500 * time.Millisecond)
	want.Timeouts.ResponseHeader = config.Duration(40 * time.Second)
	want.Timeouts.ReadClient = config.Duration(30 * time.Second)
	want.Timeouts.WriteClient = config.Duration(45 * time.Second)
	if got := st.Clusters["web_plain"].Policy; !reflect.DeepEqual(got, want) {
		t.Errorf("web_plain policy:\n got %+v\nwant %+v", got, want)
	}
	ai := st.Clusters["assist"].Policy
	if ai.Health.Probe.Status != "100-599" || ai.Health.FailNum != 100 || ai.Health.CheckInterval.D() != 100*time.Second ||
		ai.Timeouts.Connect.D() != 50*time.Second || ai.Timeouts.WriteClient.D() != 30*time.Second {
		t.Errorf("assist policy (StatusCode 0 = any, CheckTimeout null): %+v", ai)
	}

	wantPins := []config.Pin{}
	for _, c := range []struct{ cluster, sub string }{
		{"assist", "assist.pool.idc1"}, {"web_fcgi", "fcgi.pool.idc1"}, {"web_h2c", "h2c.pool.idc1"},
		{"web_plain", "web.pool.idc1"}, {"web_tls", "web.pool.idc1"},
	} {
		wantPins = append(wantPins, config.Pin{ProxyCluster: "BFE", Cluster: c.cluster,
			Weights: map[string]int{c.sub: 100, config.Blackhole: 0}, Reason: PinReason, Author: PinAuthor})
	}
	if !reflect.DeepEqual(st.Pins, wantPins) {
		t.Errorf("pins:\n got %+v\nwant %+v", st.Pins, wantPins)
	}

	for _, w := range []string{
		`product "assist": its rules do not end with default_t(); BFE answers unmatched requests with an error, Sluice requires a default rule: appended default_t() → "assist"`,
		`product "local" has hosts but no route rules`,
		`Config.web_fcgi.BackendConf.Protocol: "fcgi": Sluice forwards plain HTTP/1.1 to backends; imported as http`,
		`Config.web_tls.HTTPSConf: ignored`,
		`Config.assist.AIConf: ignored`,
		`name_conf.data: ignored`,
		`Config.assist.CheckConf.FailNum: 1000 is outside Sluice's range 1..100: imported as 100`,
	} {
		if !containsWarning(warns, w) {
			t.Errorf("no warning containing %q in\n%s", w, strings.Join(warns, "\n"))
		}
	}
}

func containsWarning(warns []string, s string) bool {
	for _, w := range warns {
		if strings.Contains(w, s) {
			return true
		}
	}
	return false
}

func TestImportMissionExample(t *testing.T) {
	st, warns, err := ImportDir("testdata/mission", ImportOptions{ProxyCluster: "BFE1", SubClusterIDC: map[string]string{"SC2": "IDC2"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) != 0 {
		t.Errorf("warnings: %q", warns)
	}
	if !reflect.DeepEqual(st.Topology.IDCs, []string{"IDC1", "IDC2"}) || st.Clusters["demo-main"].SubClusters["SC2"].IDC != "IDC2" {
		t.Errorf("IDCs: %v, SC2 in %q", st.Topology.IDCs, st.Clusters["demo-main"].SubClusters["SC2"].IDC)
	}
	if st.DefaultProduct != "demo" || len(st.Products["demo"].Rules) != 3 {
		t.Errorf("product: %q %+v", st.DefaultProduct, st.Products)
	}
	wantPin := config.Pin{ProxyCluster: "BFE1", Cluster: "demo-main", Weights: map[string]int{"SC1": 45, "SC2": 45, config.Blackhole: 10}, Reason: PinReason, Author: PinAuthor}
	if !reflect.DeepEqual(st.Pins[0], wantPin) {
		t.Errorf("pin: %+v", st.Pins[0])
	}
	main := st.Clusters["demo-main"].Policy
	if main.Health.Probe.Status != "2xx" || main.Health.Timeout.D() != 300*time.Millisecond || main.Pool.MaxIdleConnsPerHost != 16 ||
		main.Balance.Hash.Key != config.HashClientIP || main.Retry.CrossRetry != 1 {
		t.Errorf("demo-main policy: %+v", main)
	}
	if p := st.Clusters["demo-static"].Policy; p.Balance.Instance != config.InstanceWLC {
		t.Errorf("demo-static: instance %q, want wlc", p.Balance.Instance)
	}
	if p := st.Clusters["demo-post"].Policy; p.Balance.Instance != config.InstanceSticky ||
		p.Balance.Hash != (config.Hash{Key: config.HashHeaderOrIP, Header: "Cookie:UID"}) {
		t.Errorf("demo-post: %+v", p.Balance)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		dir  string
		opts ImportOptions
	}{
		{"sample conf", sampleConf(t), ImportOptions{}},
		{"mission example", "testdata/mission", ImportOptions{ProxyCluster: "BFE1", SubClusterIDC: map[string]string{"SC2": "IDC2"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, _, err := ImportDir(tc.dir, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			out := t.TempDir()
			if warns, err := ExportDir(first, tc.opts.withDefaults().ProxyCluster, out); err != nil || len(warns) != 0 {
				t.Fatalf("export: %v, warnings %q", err, warns)
			}
			second, warns, err := ImportDir(out, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(first, second) {
				t.Fatalf("round trip changed the state:\nfirst  %+v\nsecond %+v", first, second)
			}
			if len(warns) != 0 {
				t.Errorf("re-import of an export warns: %q", warns)
			}
			// A second export is byte-identical to the first.
			out2 := t.TempDir()
			if _, err := ExportDir(second, tc.opts.withDefaults().ProxyCluster, out2); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{HostRuleFile, RouteRuleFile, ClusterConfFile, GSLBFile, ClusterTableFile} {
				a, _ := os.ReadFile(filepath.Join(out, f))
				b, _ := os.ReadFile(filepath.Join(out2, f))
				if len(a) == 0 || string(a) != string(b) {
					t.Errorf("%s differs between exports (or is empty)", f)
				}
			}
		})
	}
}

// copyDir copies a BFE conf fixture so a test can edit one file.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	for _, f := range []string{HostRuleFile, RouteRuleFile, ClusterConfFile, GSLBFile, ClusterTableFile} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dst, f), string(b))
	}
	return dst
}

func TestNegativeGSLBWeightIsExcluded(t *testing.T) {
	dir := copyDir(t, "testdata/mission")
	write(t, filepath.Join(dir, GSLBFile), `{"Clusters":{"demo-main":{"SC1":100,"SC2":-1,"GSLB_BLACKHOLE":0},
		"demo-static":{"STATIC1":100},"demo-post":{"POST1":80,"GSLB_BLACKHOLE":10}},"Hostname":"","Ts":"0"}`)
	st, warns, err := ImportDir(dir, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sc2 := st.Clusters["demo-main"].SubClusters["SC2"]
	if !sc2.Excluded || len(sc2.Instances) != 3 {
		t.Errorf("SC2: %+v, want excluded with its 3 instances", sc2)
	}
	if !containsWarning(warns, "Clusters.demo-main.SC2: weight -1: BFE silently excludes the sub-cluster; Sluice is stricter") {
		t.Errorf("warnings: %q", warns)
	}
	pins := map[string]map[string]int{}
	for _, p := range st.Pins {
		pins[p.Cluster] = p.Weights
	}
	if !reflect.DeepEqual(pins["demo-main"], map[string]int{"SC1": 100, "SC2": 0, config.Blackhole: 0}) {
		t.Errorf("demo-main pin: %v", pins["demo-main"])
	}
	// 80 + 10 = 90 points: rescaled to 100 by largest remainder (88.9 → 89, 11.1 → 11).
	if !reflect.DeepEqual(pins["demo-post"], map[string]int{"POST1": 89, config.Blackhole: 11}) {
		t.Errorf("demo-post pin: %v", pins["demo-post"])
	}
	if !containsWarning(warns, "Clusters.demo-post: weights sum to 90; BFE divides by the sum, Sluice rows sum to 100: rescaled") {
		t.Errorf("warnings: %q", warns)
	}
	// Export writes the exclusion back as BFE's negative weight.
	out := t.TempDir()
	if _, err := ExportDir(st, DefaultProxyCluster, out); err != nil {
		t.Fatal(err)
	}
	g, err := LoadGSLB(filepath.Join(out, GSLBFile))
	if err != nil {
		t.Fatal(err)
	}
	if g.Rows["demo-main"]["SC2"] != -1 {
		t.Errorf("exported row: %v", g.Rows["demo-main"])
	}
}

func TestImportRejects(t *testing.T) {
	for _, tc := range []struct {
		name, file, content, want string
	}{
		{"negative instance weight", ClusterTableFile,
			`{"Version":"1","Config":{"demo-main":{"SC1":[{"Name":"a","Addr":"127.0.0.1","Port":1,"Weight":-1},{"Name":"b","Addr":"127.0.0.1","Port":2,"Weight":1}]}}}`,
			"Config.demo-main.SC1[0].Weight: -1 is negative: BFE treats it as a backend that is never picked; Sluice rejects it"},
		{"duplicate key", GSLBFile,
			`{"Clusters":{"demo-main":{"SC1":50,"SC1":50}},"Hostname":"","Ts":"0"}`,
			`Clusters.demo-main.SC1: duplicate key "SC1"`},
		{"unknown cluster in a rule", RouteRuleFile,
			`{"Version":"1","ProductRule":{"demo":[{"Cond":"default_t()","ClusterName":"nope"}]}}`,
			`cluster "nope" is not in server_data_conf/cluster_conf.data (BFE rejects it too)`},
		{"routed product without hosts", RouteRuleFile,
			`{"Version":"1","ProductRule":{"demo":[{"Cond":"default_t()","ClusterName":"demo-main"}],"other":[{"Cond":"default_t()","ClusterName":"demo-main"}]}}`,
			`other: product has route rules but no hosts`},
		{"negative blackhole", GSLBFile,
			`{"Clusters":{"demo-main":{"SC1":100,"GSLB_BLACKHOLE":-5}},"Hostname":"","Ts":"0"}`,
			`GSLB_BLACKHOLE: -5 is negative: BFE treats it as 0; Sluice rejects it`},
		{"EPP balance mode", ClusterConfFile,
			`{"Version":"1","Config":{"demo-main":{"GslbBasic":{"BalanceMode":"EPP"}},"demo-static":{},"demo-post":{}}}`,
			`GslbBasic.BalanceMode: EPP (endpoint picker) is not supported by Sluice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, "testdata/mission")
			write(t, filepath.Join(dir, tc.file), tc.content)
			st, warns, err := ImportDir(dir, ImportOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if st != nil || warns != nil {
				t.Fatalf("half-applied result on error: %v %v", st, warns)
			}
		})
	}
}

func TestBasicRulesBecomeConditions(t *testing.T) {
	root := filepath.Join(testdata(t), "files", "route_rule")
	rr, err := LoadRouteRule(filepath.Join(root, "basic_and_product_rules.data"))
	if err != nil {
		t.Fatal(err)
	}
	wild := `req_host_regmatch("(?i)^[^.:]+[.]img[.]example[.]com(:[0-9]+)?$")`
	want := []config.Rule{
		// Basic rules first (BFE matches them before ProductRule): exact hosts…
		{Cond: `req_host_in("www.shop.example.com") && req_path_in("/cart", false)`, Cluster: "shop_exact"},
		{Cond: `req_host_in("www.shop.example.com") && req_path_in("/pay", false)`, Cluster: "shop_exact"},
		{Cond: `req_host_in("m.shop.example.com") && req_path_in("/cart", false)`, Cluster: "shop_exact"},
		{Cond: `req_host_in("m.shop.example.com") && req_path_in("/pay", false)`, Cluster: "shop_exact"},
		{Cond: `req_host_in("static.shop.example.com") && req_path_in("/cart", false)`, Cluster: "shop_assets"},
		{Cond: `req_host_in("static.shop.example.com") && req_path_in("/pay", false)`, Cluster: "shop_assets"},
		// beta.shop.example.com → ADVANCED_MODE: no rule, the condition rules decide.
		// …then one-label wildcards (*.beta.example.com is ADVANCED_MODE too).
		{Cond: wild + ` && req_path_in("/cart", false)`, Cluster: "shop_assets"},
		{Cond: wild + ` && req_path_in("/pay", false)`, Cluster: "shop_assets"},
		// Then ProductRule in order.
		{Cond: `default_t()`, Cluster: "shop_main"},
	}
	if got := rr.Products["shop"]; !reflect.DeepEqual(got, want) {
		t.Errorf("shop rules:\n got %q\nwant %q", got, want)
	}
	if got := rr.Products["search"]; len(got) != 2 || got[0].Cond != `req_header_key_in("X-Search-Canary")` || got[0].Cluster != "search_canary" {
		t.Errorf("search rules: %q", got)
	}

	rr, err = LoadRouteRule(filepath.Join(root, "basic_star_host_and_prefixes.data"))
	if err != nil {
		t.Fatal(err)
	}
	got := rr.Products["shop"]
	if len(got) != 8 {
		t.Fatalf("star host: %d rules, want 8: %q", len(got), got)
	}
	// "*" host: every other host and wildcard excluded, exact paths before
	// the "/cart*" prefixes, which match "/cart" and "/cart/…" but not "/carts".
	if got[4].Cond != `!req_host_in("www.shop.example.com") && !req_host_regmatch("(?i)^[^.:]+[.]img[.]example[.]com(:[0-9]+)?$") && !req_host_regmatch("(?i)^[^.:]+[.]cdn[.]example[.]com(:[0-9]+)?$") && req_path_in("/cart", false)` {
		t.Errorf("star host [4]: %s", got[4].Cond)
	}
	if !strings.HasSuffix(got[6].Cond, `&& req_path_in("/cart", false) || req_path_prefix_in("/cart/", false)`) {
		t.Errorf("star host [6]: %s", got[6].Cond)
	}
}

func TestAdvancedModeShadowsLaterPaths(t *testing.T) {
	p := filepath.Join(t.TempDir(), "route_rule.data")
	write(t, p, `{"Version":"1","BasicRule":{"p":[
		{"Hostname":["a.com"],"Path":["/x"],"ClusterName":"ADVANCED_MODE"},
		{"Hostname":["a.com"],"Path":["/*"],"ClusterName":"c1"}]},
		"ProductRule":{"p":[{"Cond":"default_t()","ClusterName":"c2"}]}}`)
	rr, err := LoadRouteRule(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []config.Rule{
		{Cond: `req_host_in("a.com") && req_path_prefix_in("/", false) && !(req_path_in("/x", false))`, Cluster: "c1"},
		{Cond: `default_t()`, Cluster: "c2"},
	}
	if !reflect.DeepEqual(rr.Products["p"], want) {
		t.Errorf("got %q", rr.Products["p"])
	}
}

func TestStatusCodes(t *testing.T) {
	rng := func(s string) *string { return &s }
	for _, tc := range []struct {
		code int
		rng  *string
		want string
	}{
		{200, nil, "200"},
		{0, nil, "100-599"},
		{2, nil, "2xx"},     // 0b00010
		{6, nil, "2xx|3xx"}, // 0b00110
		{0, rng("4x0|503"), "400|410|420|430|440|450|460|470|480|490|503"},
		{200, rng("20x|3xx"), "20x|3xx"}, // StatusCodeRange wins, as in BFE's checker
	} {
		got, err := statusFromBFE(tc.code, tc.rng)
		if err != nil || got != tc.want {
			t.Errorf("statusFromBFE(%d, %v) = %q, %v; want %q", tc.code, tc.rng, got, err, tc.want)
			continue
		}
		code, r, err := statusToBFE(got)
		if err != nil {
			t.Fatal(err)
		}
		back, err := statusFromBFE(code, &r)
		if err != nil || back != got {
			t.Errorf("%q → BFE (%d, %q) → %q", got, code, r, back)
		}
	}
	for _, bad := range []struct {
		code int
		rng  *string
	}{{1000, nil}, {-1, nil}, {32, nil}, {0, rng("4000")}, {0, rng("[200-300]")}} {
		if _, err := statusFromBFE(bad.code, bad.rng); err == nil {
			t.Errorf("statusFromBFE(%d, %v): want error", bad.code, bad.rng)
		}
	}
}

func TestSnapshotFromBFEDir(t *testing.T) {
	snap, err := Snapshot("testdata/mission", ImportOptions{ProxyCluster: "BFE1", SubClusterIDC: map[string]string{"SC2": "IDC2"}})
	if err != nil {
		t.Fatal(err)
	}
	main := snap.Clusters["demo-main"]
	if !main.Row.Pinned || !reflect.DeepEqual(main.Row.Weights, map[string]int{"SC1": 45, "SC2": 45, config.Blackhole: 10}) {
		t.Errorf("demo-main row: %+v", main.Row)
	}
	if main.Policy.Balance.SubclusterMode != config.SubclusterBFE || main.Policy.Balance.Hash.Key != config.HashClientIP {
		t.Errorf("balance: %+v", main.Policy.Balance)
	}
	if snap.Meta.ProxyCluster != "BFE1" || snap.Meta.Version != 1 || snap.Meta.Hash == "" || snap.Settings.IDC != "IDC1" {
		t.Errorf("meta/settings: %+v %+v", snap.Meta, snap.Settings)
	}
}

func TestExportDirLeavesNothingOnFailure(t *testing.T) {
	st, _, err := ImportDir("testdata/mission", ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	// cluster_conf is a file, so cluster_conf/*.data cannot be written.
	write(t, filepath.Join(out, "cluster_conf"), "not a directory")
	if _, err := ExportDir(st, DefaultProxyCluster, out); err == nil {
		t.Fatal("want an error")
	}
	entries, _ := os.ReadDir(filepath.Join(out, "server_data_conf"))
	for _, e := range entries {
		t.Errorf("left behind: server_data_conf/%s", e.Name())
	}
	if _, err := ExportDir(st, "NOPE", t.TempDir()); !errors.Is(err, snapshot.ErrUnknownProxyCluster) {
		t.Errorf("unknown proxy cluster: %v", err)
	}
}

func TestReadServerConf(t *testing.T) {
	sc, err := ReadServerConf("testdata/serverconf/data") // finds ../conf/bfe.conf
	if err != nil {
		t.Fatal(err)
	}
	if sc != (ServerConf{HTTPPort: 8080, HTTPSPort: 8443, MonitorPort: 8421}) {
		t.Errorf("got %+v", sc)
	}
	sc, err = ReadServerConf(t.TempDir())
	if !errors.Is(err, os.ErrNotExist) || sc != (ServerConf{}) {
		t.Errorf("missing: %+v %v", sc, err)
	}
	dir := t.TempDir()
	write(t, filepath.Join(dir, "bfe.conf"), "[Server]\nHttpPort = 80x\n")
	if _, err := ReadServerConf(dir); err == nil || !strings.Contains(err.Error(), `bfe.conf:2: [Server] HttpPort = "80x" is not a port in 1..65535`) {
		t.Errorf("bad port: %v", err)
	}
}

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

func sampleConf(t *testing.T) string { return filepath.Join(sharedTestdata(t), "conf") }

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
		"example_product": {
			Hosts: []string{"example.org", "www.example.org", "fcgi.example.org", "h2c.example.org"},
			Rules: []config.Rule{
				{Cond: `req_host_in("example.org")`, Cluster: "cluster_example"},
				{Cond: `req_host_in("www.example.org")`, Cluster: "https_cluster_example"},
				{Cond: `req_host_in("fcgi.example.org")`, Cluster: "fcgi_cluster_example"},
				{Cond: `req_host_in("h2c.example.org")`, Cluster: "h2c_cluster_example"},
				{Cond: `default_t()`, Cluster: "cluster_example"},
			},
		},
		// No default rule in BFE's sample: one is appended to the last cluster.
		"example_ai_product": {
			Hosts: []string{"ai.example.org"},
			Rules: []config.Rule{
				{Cond: `req_host_in("ai.example.org")`, Cluster: "ai_cluster_example"},
				{Cond: `default_t()`, Cluster: "ai_cluster_example"},
			},
		},
		// local_product has hosts but no rules: not imported.
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
		"cluster_example":       {"example.bfe.bj": {IDC: "IDC1", Instances: []config.Instance{inst("127.0.0.1", 8181, "example_hostname")}}},
		"https_cluster_example": {"example.bfe.bj": {IDC: "IDC1", Instances: []config.Instance{inst("127.0.0.1", 9443, "https_example_hostname")}}},
		"fcgi_cluster_example":  {"fcgi.example.bfe.bj": {IDC: "IDC1", Instances: []config.Instance{inst("127.0.0.1", 9000, "fcgi_example_hostname")}}},
		"h2c_cluster_example":   {"h2c.example.bfe.bj": {IDC: "IDC1", Instances: []config.Instance{inst("127.0.0.1", 8735, "example_hostname")}}},
		"ai_cluster_example": {"ai.pool.bj": {IDC: "IDC1", Instances: []config.Instance{
			inst("172.27.152.27", 8083, "172.27.152.27_8083"), inst("172.27.152.27", 8081, "172.27.152.27_8081")}}},
	}
	if len(st.Clusters) != len(wantSubs) {
		t.Errorf("clusters: %d, want %d", len(st.Clusters), len(wantSubs))
	}
	for name, subs := range wantSubs {
		if !reflect.DeepEqual(st.Clusters[name].SubClusters, subs) {
			t.Errorf("cluster %s sub-clusters:\n got %+v\nwant %+v", name, st.Clusters[name].SubClusters, subs)
		}
	}

	// cluster_example's policy, field by field from cluster_conf.data.
	want := config.DefaultPolicy()
	want.Balance.SubclusterMode = config.SubclusterBFE
	want.Balance.Hash = config.Hash{Key: config.HashHeader, Header: "Cookie:UID"} // HashStrategy 0
	want.Balance.Instance = config.InstanceWRR
	want.Retry.RetryMax, want.Retry.CrossRetry = 2, 0
	want.Health.FailNum, want.Health.SuccNum = 10, 1
	want.Health.CheckInterval = config.Duration(time.Second)
	want.Health.Probe = config.Probe{Scheme: "http", Path: "/healthcheck", Host: "example.org", Status: "200"}
	want.Pool.MaxIdleConnsPerHost = 0
	want.Timeouts.Connect = config.Duration(2 * time.Second)
	want.Timeouts.ResponseHeader = config.Duration(50 * time.Second)
	want.Timeouts.ReadClient = config.Duration(30 * time.Second)
	want.Timeouts.WriteClient = config.Duration(60 * time.Second)
	if got := st.Clusters["cluster_example"].Policy; !reflect.DeepEqual(got, want) {
		t.Errorf("cluster_example policy:\n got %+v\nwant %+v", got, want)
	}
	ai := st.Clusters["ai_cluster_example"].Policy
	if ai.Health.Probe.Status != "100-599" || ai.Health.FailNum != 100 || ai.Health.CheckInterval.D() != 100*time.Second ||
		ai.Timeouts.Connect.D() != 50*time.Second || ai.Timeouts.WriteClient.D() != 30*time.Second {
		t.Errorf("ai_cluster_example policy (StatusCode 0 = any, CheckTimeout null): %+v", ai)
	}

	wantPins := []config.Pin{}
	for _, c := range []struct{ cluster, sub string }{
		{"ai_cluster_example", "ai.pool.bj"}, {"cluster_example", "example.bfe.bj"},
		{"fcgi_cluster_example", "fcgi.example.bfe.bj"}, {"h2c_cluster_example", "h2c.example.bfe.bj"},
		{"https_cluster_example", "example.bfe.bj"},
	} {
		wantPins = append(wantPins, config.Pin{ProxyCluster: "BFE", Cluster: c.cluster,
			Weights: map[string]int{c.sub: 100, config.Blackhole: 0}, Reason: PinReason, Author: PinAuthor})
	}
	if !reflect.DeepEqual(st.Pins, wantPins) {
		t.Errorf("pins:\n got %+v\nwant %+v", st.Pins, wantPins)
	}

	for _, w := range []string{
		`product "example_ai_product": its rules do not end with default_t(); BFE answers unmatched requests with an error, Sluice requires a default rule: appended default_t() → "ai_cluster_example"`,
		`product "local_product" has hosts but no route rules`,
		`Config.fcgi_cluster_example.BackendConf.Protocol: "fcgi": Sluice forwards plain HTTP/1.1 to backends; imported as http`,
		`Config.https_cluster_example.HTTPSConf: ignored`,
		`Config.ai_cluster_example.AIConf: ignored`,
		`name_conf.data: ignored`,
		`Config.ai_cluster_example.CheckConf.FailNum: 1000 is outside Sluice's range 1..100: imported as 100`,
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
			if err := ExportDir(first, tc.opts.withDefaults().ProxyCluster, out); err != nil {
				t.Fatal(err)
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
			if err := ExportDir(second, tc.opts.withDefaults().ProxyCluster, out2); err != nil {
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
	if err := ExportDir(st, DefaultProxyCluster, out); err != nil {
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
	root := sharedTestdata(t)
	rr, err := LoadRouteRule(filepath.Join(root, "bfe_config/bfe_route_conf/route_rule_conf/testdata/basic_route_rule3.data"))
	if err != nil {
		t.Fatal(err)
	}
	wild := `req_host_regmatch("(?i)^[^.:]+[.]foo[.]com(:[0-9]+)?$")`
	want := []config.Rule{
		// Basic rules first (BFE matches them before ProductRule): exact hosts…
		{Cond: `req_host_in("www.a.com") && req_path_in("/a", false)`, Cluster: "cluster_example_1"},
		{Cond: `req_host_in("www.a.com") && req_path_in("/b", false)`, Cluster: "cluster_example_1"},
		{Cond: `req_host_in("www.b.com") && req_path_in("/a", false)`, Cluster: "cluster_example_1"},
		{Cond: `req_host_in("www.b.com") && req_path_in("/b", false)`, Cluster: "cluster_example_1"},
		{Cond: `req_host_in("www.bar.com") && req_path_in("/a", false)`, Cluster: "cluster_example_2"},
		{Cond: `req_host_in("www.bar.com") && req_path_in("/b", false)`, Cluster: "cluster_example_2"},
		// www.ddd.com → ADVANCED_MODE: no rule, the condition rules decide.
		// …then one-label wildcards (*.ccc.com is ADVANCED_MODE too).
		{Cond: wild + ` && req_path_in("/a", false)`, Cluster: "cluster_example_2"},
		{Cond: wild + ` && req_path_in("/b", false)`, Cluster: "cluster_example_2"},
		// Then ProductRule in order.
		{Cond: `default_t()`, Cluster: "cluster_example"},
	}
	if got := rr.Products["example_product"]; !reflect.DeepEqual(got, want) {
		t.Errorf("example_product rules:\n got %q\nwant %q", got, want)
	}

	rr, err = LoadRouteRule(filepath.Join(root, "bfe_config/bfe_route_conf/route_rule_conf/testdata/basic_route_rule1.data"))
	if err != nil {
		t.Fatal(err)
	}
	got := rr.Products["example_product"]
	if len(got) != 8 {
		t.Fatalf("rule1: %d rules, want 8: %q", len(got), got)
	}
	// "*" host: every other host and wildcard excluded, exact paths before
	// the "/a*" prefixes, which match "/a" and "/a/…" but not "/ab".
	if got[4].Cond != `!req_host_in("www.a.com") && !req_host_regmatch("(?i)^[^.:]+[.]foo[.]com(:[0-9]+)?$") && !req_host_regmatch("(?i)^[^.:]+[.]bar[.]com(:[0-9]+)?$") && req_path_in("/a", false)` {
		t.Errorf("rule1[4]: %s", got[4].Cond)
	}
	if !strings.HasSuffix(got[6].Cond, `&& req_path_in("/a", false) || req_path_prefix_in("/a/", false)`) {
		t.Errorf("rule1[6]: %s", got[6].Cond)
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
	if err := ExportDir(st, DefaultProxyCluster, out); err == nil {
		t.Fatal("want an error")
	}
	entries, _ := os.ReadDir(filepath.Join(out, "server_data_conf"))
	for _, e := range entries {
		t.Errorf("left behind: server_data_conf/%s", e.Name())
	}
	if err := ExportDir(st, "NOPE", t.TempDir()); !errors.Is(err, snapshot.ErrUnknownProxyCluster) {
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

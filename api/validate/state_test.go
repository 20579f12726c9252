package validate

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
)

func loadMission(t testing.TB) *config.State {
	t.Helper()
	raw, err := os.ReadFile("../testdata/mission.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var s config.State
	if err := codec.Unmarshal(raw, &s); err != nil {
		t.Fatalf("decode mission.yaml: %v", err)
	}
	return &s
}

func TestMissionExample(t *testing.T) {
	s := loadMission(t)
	if err := State(s); err != nil {
		t.Fatalf("mission example is invalid:\n%v", err)
	}
	// The decoded document is exactly the mission's.
	pin := s.Pins[0]
	if pin.ProxyCluster != "BFE1" || pin.Cluster != "demo-main" || len(pin.Weights) != 3 ||
		pin.Weights["SC1"] != 45 || pin.Weights["SC2"] != 45 || pin.Weights[config.Blackhole] != 10 {
		t.Errorf("pin = %+v, want BFE1/demo-main {SC1: 45, SC2: 45, GSLB_BLACKHOLE: 10}", pin)
	}
	rules := s.Products["demo"].Rules
	want := []config.Rule{
		{Name: "static", Cond: `req_path_prefix_in("/static", false)`, Cluster: "demo-static"},
		{Name: "post-setting", Cond: `req_method_in("POST") && req_path_prefix_in("/setting", false)`, Cluster: "demo-post"},
		{Name: "default", Cond: `default_t()`, Cluster: "demo-main"},
	}
	if len(rules) != len(want) {
		t.Fatalf("rules = %+v", rules)
	}
	for i := range want {
		if rules[i] != want[i] {
			t.Errorf("rules[%d] = %+v, want %+v", i, rules[i], want[i])
		}
	}
	if got := s.Clusters["demo-main"].SubClusters["SC2"].IDC; got != "IDC2" {
		t.Errorf("demo-main SC2 idc = %q", got)
	}
	if got := len(s.Clusters["demo-main"].SubClusters["SC1"].Instances); got != 3 {
		t.Errorf("demo-main SC1 has %d instances, want 3", got)
	}
	// Defaults were applied to what the document leaves out.
	if got := s.Clusters["demo-static"].Policy; got.Retry.RetryMax != 2 || got.Health.Probe.Status != "2xx" {
		t.Errorf("demo-static policy did not get defaults: %+v", got)
	}
	if s.Scheduler != config.DefaultSchedulerSettings() {
		t.Errorf("scheduler settings = %+v, want defaults", s.Scheduler)
	}
}

// TestDocsExample validates the YAML block of docs/config.md marked as the
// mission example, and checks it is the same document as testdata/mission.yaml.
func TestDocsExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	const marker = "<!-- mission-example -->"
	_, rest, ok := strings.Cut(string(doc), marker)
	if !ok {
		t.Fatalf("docs/config.md has no %s marker", marker)
	}
	_, rest, ok = strings.Cut(rest, "```yaml\n")
	if !ok {
		t.Fatal("no ```yaml block after the marker in docs/config.md")
	}
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("unterminated yaml block in docs/config.md")
	}
	var s config.State
	if err := codec.Unmarshal([]byte(block), &s); err != nil {
		t.Fatalf("docs example does not decode: %v", err)
	}
	if err := State(&s); err != nil {
		t.Fatalf("docs example is invalid:\n%v", err)
	}
	file, err := os.ReadFile("../testdata/mission.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(block) != strings.TrimSpace(string(file)) {
		t.Error("the example in docs/config.md differs from api/testdata/mission.yaml; keep them identical")
	}
}

// cond80 is a valid condition of exactly 80 characters, not the default.
var cond80 = `req_path_prefix_in("/` + strings.Repeat("x", 50) + `", false)`

func TestStateRules(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(s *config.State)
		want   []string // exact error lines
	}{
		{"port out of range", func(s *config.State) {
			s.Clusters["demo-main"].SubClusters["SC1"].Instances[2].Port = 70000
		}, []string{"clusters.demo-main.subclusters.SC1.instances[2].port: 70000 is outside 1..65535"}},
		{"bad address and weight", func(s *config.State) {
			in := &s.Clusters["demo-main"].SubClusters["SC2"].Instances[0]
			in.Addr, in.Weight, in.State, in.CapacityRPS = "localhost", -1, "up", -5
		}, []string{
			"clusters.demo-main.subclusters.SC2.instances[0].addr: \"localhost\" is not an IP address",
			"clusters.demo-main.subclusters.SC2.instances[0].capacity_rps: -5 is less than 0",
			"clusters.demo-main.subclusters.SC2.instances[0].state: \"up\" is not one of , healthy, unhealthy, draining",
			"clusters.demo-main.subclusters.SC2.instances[0].weight: -1 is outside 0..1000000",
		}},
		{"duplicate instance", func(s *config.State) {
			s.Clusters["demo-main"].SubClusters["SC1"].Instances[1].Port = 8101
		}, []string{"clusters.demo-main.subclusters.SC1.instances[1]: 127.0.0.1:8101 duplicates instances[0]"}},
		{"blackhole sub-cluster and unknown idc", func(s *config.State) {
			s.Clusters["demo-post"].SubClusters[config.Blackhole] = config.SubCluster{IDC: "IDC9"}
		}, []string{
			"clusters.demo-post.subclusters.GSLB_BLACKHOLE: GSLB_BLACKHOLE is reserved for the dropped share of a row and cannot be a sub-cluster",
			"clusters.demo-post.subclusters.GSLB_BLACKHOLE.idc: IDC \"IDC9\" is not in topology.idcs",
		}},
		{"pin row sum", func(s *config.State) {
			s.Pins[0].Weights = map[string]int{"SC1": 45, "SC2": 45}
		}, []string{"pins[0].weights: weights sum to 90, want exactly 100"}},
		{"pin full drop", func(s *config.State) {
			s.Pins[0].Weights = map[string]int{"SC1": 0, "SC2": 0, config.Blackhole: 100}
		}, []string{"pins[0].weights.GSLB_BLACKHOLE: 100 drops all traffic; set allow_full_drop to allow it"}},
		{"pin full drop allowed", func(s *config.State) {
			s.Pins[0].Weights = map[string]int{config.Blackhole: 100}
			s.Pins[0].AllowFullDrop = true
		}, nil},
		{"pin negative, unknown, all zero", func(s *config.State) {
			s.Pins[0].Weights = map[string]int{"SC1": -10, "SC3": 0, "SC2": 0}
		}, []string{
			"pins[0].weights: every weight is 0; want weights summing to 100",
			"pins[0].weights.SC1: -10 is negative; weights are integers ≥ 0",
			"pins[0].weights.SC3: sub-cluster \"SC3\" does not exist in the cluster",
		}},
		{"pin huge weight", func(s *config.State) {
			s.Pins[0].Weights = map[string]int{"SC1": 1 << 62, "SC2": 1 << 62}
		}, []string{
			"pins[0].weights.SC1: 4611686018427387904 is larger than the row's total 100",
			"pins[0].weights.SC2: 4611686018427387904 is larger than the row's total 100",
		}},
		{"pin references", func(s *config.State) {
			s.Pins = append(s.Pins, s.Pins[0], config.Pin{ProxyCluster: "BFE9", Cluster: "nope", Weights: map[string]int{"SC1": 100}})
		}, []string{
			"pins[1]: proxy cluster \"BFE1\" and cluster \"demo-main\" are already pinned by pins[0]",
			"pins[2].cluster: cluster \"nope\" does not exist",
			"pins[2].proxy_cluster: proxy cluster \"BFE9\" does not exist",
		}},
		{"pin to excluded sub-cluster", func(s *config.State) {
			sc := s.Clusters["demo-main"].SubClusters["SC2"]
			sc.Excluded = true
			s.Clusters["demo-main"].SubClusters["SC2"] = sc
		}, []string{"pins[0].weights.SC2: 45 gives traffic to sub-cluster \"SC2\", which is excluded"}},
		{"pin with no weight on an excluded sub-cluster", func(s *config.State) {
			sc := s.Clusters["demo-main"].SubClusters["SC2"]
			sc.Excluded = true
			s.Clusters["demo-main"].SubClusters["SC2"] = sc
			s.Pins[0].Weights = map[string]int{"SC1": 100, "SC2": 0}
		}, nil},
		// A condition in an error is quoted whole up to 80 characters, and
		// clipped to 80 and "…" beyond.
		{"last rule not default, 80 characters", func(s *config.State) {
			s.Products["demo"].Rules[2].Cond = cond80
		}, []string{"products.demo.rules[2].cond: " + strconv.Quote(cond80) + ": the last rule must be the default rule \"default_t()\""}},
		{"last rule not default, 81 characters", func(s *config.State) {
			s.Products["demo"].Rules[2].Cond = cond80[:21] + "y" + cond80[21:]
		}, []string{"products.demo.rules[2].cond: " + strconv.Quote(cond80[:21]+"y"+cond80[21:79]+"…") + ": the last rule must be the default rule \"default_t()\""}},
		{"duplicate instance at port 1", func(s *config.State) {
			in := s.Clusters["demo-main"].SubClusters["SC1"].Instances
			in[0].Port, in[1].Port = 1, 1
		}, []string{"clusters.demo-main.subclusters.SC1.instances[1]: 127.0.0.1:1 duplicates instances[0]"}},
		{"duplicate instance at port 65535", func(s *config.State) {
			in := s.Clusters["demo-main"].SubClusters["SC1"].Instances
			in[0].Port, in[1].Port = 65535, 65535
		}, []string{"clusters.demo-main.subclusters.SC1.instances[1]: 127.0.0.1:65535 duplicates instances[0]"}},
		{"rules", func(s *config.State) {
			p := s.Products["demo"]
			p.Rules = []config.Rule{
				{Cond: `req_path_prefix_in("/static", false)`, Cluster: "demo-gone"},
				{Cond: `req_pat_in("/x")`, Cluster: "demo-post"},
				{Cond: `req_method_in("GET")`, Cluster: ""},
			}
			s.Products["demo"] = p
		}, []string{
			"products.demo.rules[0].cluster: cluster \"demo-gone\" does not exist",
			"products.demo.rules[1].cond: column 1: unknown primitive \"req_pat_in\"",
			"products.demo.rules[2].cluster: is empty; want a cluster name",
			"products.demo.rules[2].cond: \"req_method_in(\\\"GET\\\")\": the last rule must be the default rule \"default_t()\"",
		}},
		{"cond column", func(s *config.State) {
			s.Products["demo"].Rules[1].Cond = `req_method_in("POST") && req_path_prefix_in("/setting")`
		}, []string{"products.demo.rules[1].cond: column 26: req_path_prefix_in takes 2 arguments req_path_prefix_in(prefixes string, case_insensitive bool), have 1"}},
		{"hosts", func(s *config.State) {
			s.Products["other"] = config.Product{Hosts: []string{"DEMO.local", "", "x.local:8080"}, Rules: []config.Rule{{Cond: "default_t()", Cluster: "demo-main"}}}
			s.DefaultProduct = "missing"
		}, []string{
			"default_product: product \"missing\" does not exist",
			"products.other.hosts[0]: host \"DEMO.local\" is already used by product \"demo\"",
			"products.other.hosts[1]: host is empty",
			"products.other.hosts[2]: host \"x.local:8080\" must not include a port",
		}},
		{"no rules", func(s *config.State) {
			s.Products["other"] = config.Product{Hosts: []string{"o.local"}}
		}, []string{"products.other.rules: is empty; want at least a default rule (cond \"default_t()\")"}},
		{"names", func(s *config.State) {
			s.Clusters["bad/name"] = s.Clusters["demo-post"]
			s.Topology.ProxyClusters["..x"] = config.ProxyCluster{IDC: "IDC1"}
		}, []string{
			"clusters.bad/name: cluster name \"bad/name\" has '/' at 3; want 1..128 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit",
			"topology.proxy_clusters...x: proxy cluster name \"..x\" has '.' at 0; want 1..128 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit",
		}},
		{"topology", func(s *config.State) {
			s.Topology.IDCs = append(s.Topology.IDCs, "IDC1")
			s.Topology.ProxyClusters["BFE3"] = config.ProxyCluster{IDC: "IDC3", TrustedProxies: []string{"10.0.0.0/8", "10.0.0.1"}}
			s.Topology.LocalityCost["IDC1"]["IDC7"] = -1
		}, []string{
			"topology.idcs[2]: IDC \"IDC1\" is listed twice",
			"topology.locality_cost.IDC1.IDC7: IDC \"IDC7\" is not in topology.idcs",
			"topology.locality_cost.IDC1.IDC7: -1 is less than 0",
			"topology.proxy_clusters.BFE3.idc: IDC \"IDC3\" is not in topology.idcs",
			"topology.proxy_clusters.BFE3.trusted_proxies[1]: \"10.0.0.1\" is not a CIDR like 10.0.0.0/8 or fd00::/8",
		}},
		{"drains", func(s *config.State) {
			s.Drains = []config.Drain{{Cluster: "demo-main", SubCluster: "SC1"}, {Cluster: "demo-main", SubCluster: "SC1"},
				{Cluster: "demo-main", SubCluster: "SC9"}, {Cluster: "x", SubCluster: "SC1"}}
		}, []string{
			"drains[1]: cluster \"demo-main\" sub-cluster \"SC1\" is already drained by drains[0]",
			"drains[2].subcluster: sub-cluster \"SC9\" does not exist in cluster \"demo-main\"",
			"drains[3].cluster: cluster \"x\" does not exist",
		}},
		{"scheduler", func(s *config.State) {
			s.Scheduler = config.SchedulerSettings{Denominator: 1000, MaxStepPercent: 0, HysteresisPercent: 101,
				TargetUtilisationPercent: 0, CapacityPerWeightRPS: 0, DefaultDemandRPS: -1, History: 0,
				InstanceGrace: config.Duration(2 * time.Hour)}
		}, []string{
			"scheduler.capacity_per_weight_rps: 0 is less than 1",
			"scheduler.default_demand_rps: -1 is less than 0",
			"scheduler.denominator: 1000 is neither 100 nor 10000",
			"scheduler.history: 0 is outside 1..10000",
			"scheduler.hysteresis_percent: 101 is outside 0..100",
			"scheduler.instance_grace: 2h0m0s is longer than 1h0m0s",
			"scheduler.max_step_percent: 0 is outside 1..100",
			"scheduler.target_utilisation_percent: 0 is outside 1..100",
		}},
		{"policy balance", func(s *config.State) {
			cl := s.Clusters["demo-main"]
			cl.Policy.Balance = config.Balance{SubclusterMode: "modulo", Instance: "random(11)",
				Hash: config.Hash{Key: config.HashHeader}, HashType: "ring", BoundedLoadPercent: 50, StickyCookie: "a b"}
			s.Clusters["demo-main"] = cl
		}, []string{
			"clusters.demo-main.policy.balance.bounded_load_percent: 50 is neither 0 (off) nor in 100..1000",
			"clusters.demo-main.policy.balance.hash.header: is empty; hash key \"header\" needs a header name (or \"Cookie:NAME\")",
			"clusters.demo-main.policy.balance.hash_type: \"ring\" is not one of map-based, consistent",
			"clusters.demo-main.policy.balance.instance: \"random(11)\": N in random(N) must be an integer in 2..10",
			"clusters.demo-main.policy.balance.sticky_cookie: \"a b\" is not a valid cookie name (an HTTP token)",
			"clusters.demo-main.policy.balance.subcluster_mode: \"modulo\" is not one of consistent, bfe, request",
		}},
		{"policy instance modes", func(s *config.State) {
			cl := s.Clusters["demo-main"]
			cl.Policy.Balance.Instance = "fastest"
			cl.Policy.Balance.Hash = config.Hash{Key: config.HashHeaderOrIP, Header: "Cookie:"}
			s.Clusters["demo-main"] = cl
			cl2 := s.Clusters["demo-post"]
			cl2.Policy.Balance.Instance = "random(3)"
			cl2.Policy.Balance.Hash = config.Hash{Key: config.HashHeader, Header: "Cookie:uid"}
			s.Clusters["demo-post"] = cl2
		}, []string{
			"clusters.demo-main.policy.balance.hash.header: \"Cookie:\": cookie name \"\" is not an HTTP token",
			"clusters.demo-main.policy.balance.instance: \"fastest\" is not one of wrr, wlc, wlc-random, p2c-ewma, sticky, sticky-cookie, static-rr, roundrobin, leastconn, first, random, random(N), source, ring_hash, uri, uri whole, hdr(<name>), url_param(<name>)",
		}},
		{"policy retry and health", func(s *config.State) {
			cl := s.Clusters["demo-main"]
			cl.Policy.Retry = config.Retry{RetryMax: 11, CrossRetry: -1, MaxReplayBody: 65<<20 + 1, BudgetPercent: 101, BudgetMin: -1, OnStatus: []int{502, 99}}
			h := &cl.Policy.Health
			h.FailNum, h.SuccNum, h.Rise, h.Fall = 0, 101, 0, 0
			h.CheckInterval, h.Interval, h.Timeout = 0, config.Duration(-time.Second), config.Duration(2*time.Hour)
			h.Probe = config.Probe{Scheme: "ftp", Status: "6xx"}
			h.OutlierStatus = "5yy"
			h.PanicPercent, h.MaxEjectionPercent = -1, 101
			s.Clusters["demo-main"] = cl
		}, []string{
			"clusters.demo-main.policy.health.check_interval: 0s must be greater than 0",
			"clusters.demo-main.policy.health.fail_num: 0 is outside 1..100",
			"clusters.demo-main.policy.health.fall: 0 is outside 1..100",
			"clusters.demo-main.policy.health.interval: -1s must be greater than 0",
			"clusters.demo-main.policy.health.max_ejection_percent: 101 is outside 0..100",
			"clusters.demo-main.policy.health.outlier_status: status \"5yy\": \"5yy\" is not a status code in 100..599",
			"clusters.demo-main.policy.health.panic_percent: -1 is outside 0..100",
			"clusters.demo-main.policy.health.probe.scheme: \"ftp\" is not one of http, https, tcp, tls",
			"clusters.demo-main.policy.health.probe.status: status \"6xx\": \"6xx\" is not a class 1xx..5xx",
			"clusters.demo-main.policy.health.rise: 0 is outside 1..100",
			"clusters.demo-main.policy.health.succ_num: 101 is outside 1..100",
			"clusters.demo-main.policy.health.timeout: 2h0m0s is longer than 1h0m0s",
			"clusters.demo-main.policy.retry.budget_min: -1 is less than 0",
			"clusters.demo-main.policy.retry.budget_percent: 101 is outside 0..100",
			"clusters.demo-main.policy.retry.cross_retry: -1 is outside 0..10",
			"clusters.demo-main.policy.retry.max_replay_body: 68157441 is outside 0..67108864 (64 MiB)",
			"clusters.demo-main.policy.retry.on_status[1]: 99 is outside 100..599",
			"clusters.demo-main.policy.retry.retry_max: 11 is outside 0..10",
		}},
		{"policy pool timeouts slow start blackhole", func(s *config.State) {
			cl := s.Clusters["demo-main"]
			p := &cl.Policy
			p.Pool = config.Pool{MaxIdleConnsPerHost: -1, MaxConnsPerHost: -1, QueueTimeout: config.Duration(-1), IdleTimeout: config.Duration(61 * time.Minute)}
			p.Timeouts = config.Timeouts{Connect: config.Duration(2 * time.Minute), ResponseHeader: 0,
				PerTry: config.Duration(10 * time.Second), Request: config.Duration(5 * time.Second),
				ReadClient: config.Duration(time.Second), WriteClient: config.Duration(time.Second)}
			p.SlowStart = config.SlowStart{Window: config.Duration(-time.Second), FloorPercent: 0}
			p.Blackhole = config.BlackholePolicy{Status: 199, MaxPercent: 101}
			p.Health.Probe.Path = "healthz"
			s.Clusters["demo-main"] = cl
		}, []string{
			"clusters.demo-main.policy.blackhole.max_percent: 101 is outside 0..100",
			"clusters.demo-main.policy.blackhole.status: 199 is outside 200..599",
			"clusters.demo-main.policy.health.probe.path: \"healthz\" must start with \"/\"",
			"clusters.demo-main.policy.pool.idle_timeout: 1h1m0s is longer than 1h0m0s",
			"clusters.demo-main.policy.pool.max_conns_per_host: -1 is less than 0",
			"clusters.demo-main.policy.pool.max_idle_conns_per_host: -1 is less than 0",
			"clusters.demo-main.policy.pool.queue_timeout: -1ns must not be negative",
			"clusters.demo-main.policy.slow_start.floor_percent: 0 is outside 1..100",
			"clusters.demo-main.policy.slow_start.window: -1s must not be negative",
			"clusters.demo-main.policy.timeouts.connect: 2m0s is longer than 1m0s",
			"clusters.demo-main.policy.timeouts.per_try: 10s is longer than timeouts.request 5s",
			"clusters.demo-main.policy.timeouts.response_header: 0s must be greater than 0",
		}},
		{"sticky-cookie mode without a cookie name", func(s *config.State) {
			cl := s.Clusters["demo-main"]
			cl.Policy.Balance.Instance, cl.Policy.Balance.StickyCookie = config.InstanceStickyCookie, ""
			s.Clusters["demo-main"] = cl
		}, []string{"clusters.demo-main.policy.balance.sticky_cookie: is empty; instance mode sticky-cookie needs a cookie name"}},
		// The path and status rules are for http and https probes only.
		{"https probe path and status", func(s *config.State) {
			cl := s.Clusters["demo-main"]
			cl.Policy.Health.Probe = config.Probe{Scheme: "https", Path: "healthz"}
			s.Clusters["demo-main"] = cl
		}, []string{
			"clusters.demo-main.policy.health.probe.path: \"healthz\" must start with \"/\"",
			"clusters.demo-main.policy.health.probe.status: is empty; an https probe needs the statuses that count as success, e.g. \"2xx\"",
		}},
		{"tcp probe ignores path and status", func(s *config.State) {
			cl := s.Clusters["demo-main"]
			cl.Policy.Health.Probe = config.Probe{Scheme: "tcp", Path: "healthz"}
			s.Clusters["demo-main"] = cl
		}, nil},
		{"empty cluster", func(s *config.State) {
			s.Clusters["empty"] = config.Cluster{Policy: config.DefaultPolicy()}
		}, []string{"clusters.empty.subclusters: is empty; a cluster needs at least one sub-cluster"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := loadMission(t)
			tt.mutate(s)
			err := State(s)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("State() = %v, want nil", err)
				}
				return
			}
			es, ok := AsErrors(err)
			if !ok {
				t.Fatalf("State() = %v (%T), want Errors", err, err)
			}
			got := strings.Split(es.Error(), "\n")
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestStateNil(t *testing.T) {
	if err := State(nil); err == nil || err.Error() != ": desired state is missing" {
		t.Errorf("State(nil) = %v", err)
	}
}

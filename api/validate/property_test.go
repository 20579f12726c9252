package validate

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
	"pgregory.net/rapid"
)

// TestPropertyValidRoundTrip: every generated valid state passes State, and
// survives JSON encode → strict decode unchanged (defaults do not leak in,
// nothing is lost).
func TestPropertyValidRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genState().Draw(t, "state")
		if err := State(&s); err != nil {
			t.Fatalf("generated state is invalid:\n%v", err)
		}
		raw, err := json.Marshal(&s)
		if err != nil {
			t.Fatal(err)
		}
		var back config.State
		if err := codec.Unmarshal(raw, &back); err != nil {
			t.Fatalf("decode of encoded state: %v\n%s", err, raw)
		}
		if !reflect.DeepEqual(s, back) {
			t.Fatalf("round trip changed the state:\n%s", raw)
		}
		if err := State(&back); err != nil {
			t.Fatalf("decoded state is invalid: %v", err)
		}
	})
}

// TestPropertyBrokenRowRejected: a pin whose weights do not sum to 100 is
// always rejected, with the pin's path.
func TestPropertyBrokenRowRejected(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genState().Draw(t, "state")
		if len(s.Pins) == 0 {
			return
		}
		i := rapid.IntRange(0, len(s.Pins)-1).Draw(t, "pin")
		delta := rapid.IntRange(1, 50).Draw(t, "delta")
		ks := sortedKeys(s.Pins[i].Weights)
		k := ks[rapid.IntRange(0, len(ks)-1).Draw(t, "key")]
		w := map[string]int{}
		for kk, v := range s.Pins[i].Weights {
			w[kk] = v
		}
		w[k] += delta
		s.Pins[i].Weights = w
		es, ok := AsErrors(State(&s))
		if !ok {
			t.Fatalf("pin %d with weights %v summing to %d accepted", i, w, 100+delta)
		}
		want := fmt.Sprintf("pins[%d].weights", i)
		found := false
		for _, e := range es {
			if e.Path == want || len(e.Path) > len(want) && e.Path[:len(want)+1] == want+"." {
				found = true
			}
		}
		if !found {
			t.Fatalf("errors do not name %s: %v", want, es)
		}
	})
}

var (
	genName = rapid.StringMatching(`[A-Za-z0-9][A-Za-z0-9_-]{0,11}`)
	ips     = []string{"127.0.0.1", "10.0.0.7", "192.168.1.20", "::1", "2001:db8::5", "fe80::1"}
	conds   = []string{
		`req_path_prefix_in("/static", false)`,
		`req_method_in("POST") && req_path_prefix_in("/setting", false)`,
		`!req_proto_secure() || req_header_value_in("X-Tenant", "a|b", true)`,
		`req_cip_range("10.0.0.0", "10.255.255.255")`,
		`(req_query_key_in("debug") || req_cookie_value_in("beta", "1", false)) && req_host_in("a.local")`,
	}
	statuses = []string{"", "5xx", "502|503", "500-504"}
)

func distinctNames(t *rapid.T, label string, min, max int, except map[string]bool) []string {
	names := rapid.SliceOfNDistinct(genName, min, max, rapid.ID[string]).
		Filter(func(ns []string) bool {
			for _, n := range ns {
				if except[n] || n == config.Blackhole {
					return false
				}
			}
			return true
		}).Draw(t, label)
	sort.Strings(names)
	return names
}

func genDuration(t *rapid.T, label string, min, max time.Duration) config.Duration {
	ms := rapid.Int64Range(int64(min/time.Millisecond), int64(max/time.Millisecond)).Draw(t, label)
	return config.Duration(time.Duration(ms) * time.Millisecond)
}

func genPolicy(t *rapid.T) config.Policy {
	p := config.DefaultPolicy()
	b := &p.Balance
	b.SubclusterMode = rapid.SampledFrom([]string{config.SubclusterConsistent, config.SubclusterBFE, config.SubclusterRequest}).Draw(t, "subcluster_mode")
	b.Instance = rapid.SampledFrom([]string{"wrr", "wlc", "wlc-random", "p2c-ewma", "sticky", "sticky-cookie", "static-rr",
		"roundrobin", "leastconn", "first", "random", "random(2)", "random(10)", "source"}).Draw(t, "instance")
	b.Hash.Key = rapid.SampledFrom([]string{config.HashClientIP, config.HashHeader, config.HashHeaderOrIP, config.HashURI}).Draw(t, "hash_key")
	if b.Hash.Key == config.HashHeader || b.Hash.Key == config.HashHeaderOrIP {
		b.Hash.Header = rapid.SampledFrom([]string{"X-User", "Cookie:uid"}).Draw(t, "hash_header")
	}
	b.HashType = rapid.SampledFrom([]string{"", "map-based", "consistent"}).Draw(t, "hash_type")
	b.EffectiveWeights = rapid.Bool().Draw(t, "effective_weights")
	b.BoundedLoadPercent = rapid.SampledFrom([]int{0, 100, 125, 1000}).Draw(t, "bounded_load")
	b.StickyCookie = rapid.SampledFrom([]string{"SLUICE_STICKY", "sid", ""}).Draw(t, "sticky_cookie")
	if b.Instance == config.InstanceStickyCookie && b.StickyCookie == "" {
		b.StickyCookie = "sid"
	}
	b.FailFast = rapid.Bool().Draw(t, "fail_fast")

	r := &p.Retry
	r.RetryMax = rapid.IntRange(0, 10).Draw(t, "retry_max")
	r.CrossRetry = rapid.IntRange(0, 10).Draw(t, "cross_retry")
	r.NonIdempotent = rapid.Bool().Draw(t, "non_idempotent")
	r.MaxReplayBody = rapid.Int64Range(0, 64<<20).Draw(t, "max_replay_body")
	r.BudgetPercent = rapid.IntRange(0, 100).Draw(t, "budget_percent")
	r.BudgetMin = rapid.IntRange(0, 1000).Draw(t, "budget_min")
	if codes := rapid.SliceOfN(rapid.IntRange(100, 599), 0, 3).Draw(t, "on_status"); len(codes) > 0 {
		r.OnStatus = codes
	}

	h := &p.Health
	h.FailNum = rapid.IntRange(1, 100).Draw(t, "fail_num")
	h.SuccNum = rapid.IntRange(1, 100).Draw(t, "succ_num")
	h.Rise = rapid.IntRange(1, 100).Draw(t, "rise")
	h.Fall = rapid.IntRange(1, 100).Draw(t, "fall")
	h.Active = rapid.Bool().Draw(t, "active")
	h.CheckInterval = genDuration(t, "check_interval", time.Millisecond, time.Hour)
	h.Interval = genDuration(t, "interval", time.Millisecond, time.Hour)
	h.Timeout = genDuration(t, "timeout", time.Millisecond, time.Hour)
	h.Probe.Scheme = rapid.SampledFrom([]string{"http", "https", "tcp", "tls"}).Draw(t, "scheme")
	h.Probe.Path = rapid.SampledFrom([]string{"/healthz", "/", ""}).Draw(t, "probe_path")
	h.Probe.Status = rapid.SampledFrom([]string{"2xx", "200", "2xx|30x"}).Draw(t, "probe_status")
	h.Probe.Body = rapid.SampledFrom([]string{"", "ok"}).Draw(t, "probe_body")
	h.OutlierStatus = rapid.SampledFrom(statuses).Draw(t, "outlier_status")
	h.PanicPercent = rapid.IntRange(0, 100).Draw(t, "panic")
	h.MaxEjectionPercent = rapid.IntRange(0, 100).Draw(t, "max_ejection")

	p.Pool.MaxIdleConnsPerHost = rapid.IntRange(0, 1000).Draw(t, "max_idle")
	p.Pool.MaxConnsPerHost = rapid.IntRange(0, 1000).Draw(t, "max_conns")
	p.Pool.QueueTimeout = genDuration(t, "queue_timeout", 0, time.Hour)
	p.Pool.IdleTimeout = genDuration(t, "idle_timeout", 0, time.Hour)

	to := &p.Timeouts
	to.Connect = genDuration(t, "connect", time.Millisecond, time.Minute)
	to.ResponseHeader = genDuration(t, "response_header", time.Millisecond, time.Hour)
	to.Request = genDuration(t, "request", 0, time.Hour)
	to.PerTry = genDuration(t, "per_try", 0, time.Hour)
	if to.Request > 0 && to.PerTry > to.Request {
		to.PerTry = to.Request
	}
	to.ReadClient = genDuration(t, "read_client", time.Millisecond, time.Hour)
	to.WriteClient = genDuration(t, "write_client", time.Millisecond, time.Hour)

	p.SlowStart.Window = genDuration(t, "slow_start", 0, time.Hour)
	p.SlowStart.FloorPercent = rapid.IntRange(1, 100).Draw(t, "floor")
	p.Blackhole.Status = rapid.IntRange(200, 599).Draw(t, "bh_status")
	p.Blackhole.RetryAfter = genDuration(t, "retry_after", 0, time.Hour)
	p.Blackhole.MaxPercent = rapid.IntRange(0, 100).Draw(t, "bh_max")
	return p
}

// splitRow draws integers ≥ 0 over keys summing to total.
func splitRow(t *rapid.T, keys []string, total int) map[string]int {
	cuts := make([]int, len(keys)-1)
	for i := range cuts {
		cuts[i] = rapid.IntRange(0, total).Draw(t, "cut")
	}
	sort.Ints(cuts)
	w := map[string]int{}
	prev := 0
	for i, k := range keys {
		end := total
		if i < len(cuts) {
			end = cuts[i]
		}
		w[k] = end - prev
		prev = end
	}
	return w
}

func genState() *rapid.Generator[config.State] {
	return rapid.Custom(func(t *rapid.T) config.State {
		s := config.State{Scheduler: config.DefaultSchedulerSettings()}
		idcs := distinctNames(t, "idcs", 1, 3, nil)
		s.Topology.IDCs = idcs
		s.Topology.ProxyClusters = map[string]config.ProxyCluster{}
		for _, n := range distinctNames(t, "proxy_clusters", 1, 3, nil) {
			pc := config.ProxyCluster{IDC: rapid.SampledFrom(idcs).Draw(t, "pc_idc")}
			if rapid.Bool().Draw(t, "trusted") {
				pc.TrustedProxies = []string{"10.0.0.0/8", "fd00::/8"}
			}
			s.Topology.ProxyClusters[n] = pc
		}
		if rapid.Bool().Draw(t, "locality") {
			s.Topology.LocalityCost = map[string]map[string]int{idcs[0]: {idcs[len(idcs)-1]: rapid.IntRange(0, 1000).Draw(t, "cost")}}
		}

		clusterNames := distinctNames(t, "clusters", 1, 3, nil)
		s.Clusters = map[string]config.Cluster{}
		for _, cn := range clusterNames {
			cl := config.Cluster{SubClusters: map[string]config.SubCluster{}, Policy: genPolicy(t)}
			for _, sn := range distinctNames(t, "subclusters", 1, 3, nil) {
				sc := config.SubCluster{IDC: rapid.SampledFrom(idcs).Draw(t, "sc_idc"), Excluded: rapid.Bool().Draw(t, "excluded")}
				ports := rapid.SliceOfNDistinct(rapid.IntRange(1, 65535), 0, 4, rapid.ID[int]).Draw(t, "ports")
				for _, port := range ports {
					in := config.Instance{
						Addr:        rapid.SampledFrom(ips).Draw(t, "addr"),
						Port:        port,
						Weight:      rapid.IntRange(0, config.MaxInstanceWeight).Draw(t, "weight"),
						CapacityRPS: rapid.IntRange(0, 100000).Draw(t, "capacity"),
						State:       rapid.SampledFrom([]string{"", "healthy", "unhealthy", "draining"}).Draw(t, "state"),
					}
					if rapid.Bool().Draw(t, "labels") {
						in.Labels = map[string]string{"rack": strconv.Itoa(port % 7)}
					}
					sc.Instances = append(sc.Instances, in)
				}
				cl.SubClusters[sn] = sc
			}
			s.Clusters[cn] = cl
		}

		products := distinctNames(t, "products", 0, 2, nil)
		if len(products) > 0 {
			s.Products = map[string]config.Product{}
		}
		for i, pn := range products {
			p := config.Product{}
			for j := 0; j < rapid.IntRange(0, 2).Draw(t, "hosts"); j++ {
				p.Hosts = append(p.Hosts, fmt.Sprintf("h%d-%d.%s.local", i, j, pn))
			}
			n := rapid.IntRange(0, 3).Draw(t, "rules")
			for j := 0; j < n; j++ {
				p.Rules = append(p.Rules, config.Rule{
					Name:    rapid.SampledFrom([]string{"", "r" + strconv.Itoa(j)}).Draw(t, "rule_name"),
					Cond:    rapid.SampledFrom(conds).Draw(t, "cond"),
					Cluster: rapid.SampledFrom(clusterNames).Draw(t, "rule_cluster"),
				})
			}
			p.Rules = append(p.Rules, config.Rule{Cond: "default_t()", Cluster: rapid.SampledFrom(clusterNames).Draw(t, "default_cluster")})
			s.Products[pn] = p
		}
		if len(products) > 0 && rapid.Bool().Draw(t, "has_default") {
			s.DefaultProduct = rapid.SampledFrom(products).Draw(t, "default_product")
		}

		for _, pc := range sortedKeys(s.Topology.ProxyClusters) {
			for _, cn := range clusterNames {
				if !rapid.Bool().Draw(t, "pin") {
					continue
				}
				cl := s.Clusters[cn]
				var keys []string
				for _, sn := range sortedKeys(cl.SubClusters) {
					if !cl.SubClusters[sn].Excluded {
						keys = append(keys, sn)
					}
				}
				keys = append(keys, config.Blackhole)
				w := splitRow(t, keys, config.DefaultDenominator)
				pin := config.Pin{ProxyCluster: pc, Cluster: cn, Weights: w, Reason: rapid.SampledFrom([]string{"", "test"}).Draw(t, "reason")}
				if w[config.Blackhole] == config.DefaultDenominator {
					pin.AllowFullDrop = true
				} else {
					pin.AllowFullDrop = rapid.Bool().Draw(t, "allow_full_drop")
				}
				s.Pins = append(s.Pins, pin)
			}
		}
		for _, cn := range clusterNames {
			for _, sn := range sortedKeys(s.Clusters[cn].SubClusters) {
				if rapid.IntRange(0, 4).Draw(t, "drain") == 0 {
					s.Drains = append(s.Drains, config.Drain{Cluster: cn, SubCluster: sn, Author: "op"})
				}
			}
		}

		sc := &s.Scheduler
		sc.Denominator = rapid.SampledFrom([]int{100, 10000}).Draw(t, "denominator")
		sc.MaxStepPercent = rapid.IntRange(1, 100).Draw(t, "max_step")
		sc.HysteresisPercent = rapid.IntRange(0, 100).Draw(t, "hysteresis")
		sc.TargetUtilisationPercent = rapid.IntRange(1, 100).Draw(t, "target")
		sc.CapacityPerWeightRPS = rapid.IntRange(1, 10000).Draw(t, "cap_per_weight")
		sc.DefaultDemandRPS = rapid.IntRange(0, 100000).Draw(t, "default_demand")
		sc.InstanceGrace = genDuration(t, "grace", 0, time.Hour)
		sc.History = rapid.IntRange(1, 10000).Draw(t, "history")
		return s
	})
}

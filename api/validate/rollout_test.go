package validate

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
)

// TestRolloutRules: the rollout policy's rules, fleet-wide and per proxy
// cluster, each at its limit (accepted) and past it (the exact errors).
func TestRolloutRules(t *testing.T) {
	t.Run("limits accepted", func(t *testing.T) {
		s := loadMission(t)
		// Each kind of stage after the others (a stage that sets another
		// field is not "below" an earlier one), equal counts and percents
		// again, 100 percent, and every gate at its limit.
		s.Rollout = &config.RolloutPolicy{
			Stages: []config.RolloutStage{{Count: new(1)}, {Percent: new(50.0)}, {ProxyClusters: []string{"BFE1"}},
				{Count: new(1)}, {Percent: new(50.0)}, {Percent: new(100.0)}},
			Gates: config.RolloutGates{ApplyTimeout: new(config.Duration(1)), Max5xxRatio: new(1.0), Margin5xx: new(1.0), Confidence5xx: new(0.0),
				P99Factor: new(1.0), ShareTolerance: 100, BlackholeEpsilon: new(100.0), MinRequests: new(1)},
			Promotion: config.PromotionManual,
		}
		pc := s.Topology.ProxyClusters["BFE2"]
		// The explicit zeros that mean what they say, and the negative
		// values that turn a gate off.
		pc.Rollout = &config.RolloutPolicy{Stages: []config.RolloutStage{{Count: new(2), Bake: new(config.Duration(0))}},
			Gates: config.RolloutGates{Max5xxRatio: new(0.0), Margin5xx: new(0.0), Confidence5xx: new(0.9999), P99Factor: new(-1.0),
				BlackholeEpsilon: new(0.0)},
			Promotion: config.PromotionAuto}
		s.Topology.ProxyClusters["BFE2"] = pc
		if err := State(s); err != nil {
			t.Fatalf("State() = %v, want nil", err)
		}
	})
	t.Run("past the limits", func(t *testing.T) {
		s := loadMission(t)
		s.Rollout = &config.RolloutPolicy{Gates: config.RolloutGates{ApplyTimeout: new(config.Duration(0)), Confidence5xx: new(-0.5),
			P99Factor: new(0.0), MinRequests: new(0)}}
		pc := s.Topology.ProxyClusters["BFE2"]
		pc.Rollout = &config.RolloutPolicy{
			Stages: []config.RolloutStage{{}, {Count: new(2), Percent: new(10.0)}, {Count: new(-1)}, {Count: new(3)}, {Count: new(2)},
				{Percent: new(60.0)}, {Percent: new(50.0)}, {Percent: new(101.0)}, {Percent: new(-1.0)}, {ProxyClusters: []string{"BFE1", "NOPE"}},
				// Explicit zeros and an empty list select no proxy; a
				// selector written as 0 next to another is still written.
				{Count: new(0)}, {Percent: new(0.0)}, {ProxyClusters: []string{}}, {Count: new(0), Percent: new(60.0)},
				{Count: new(3), Percent: new(100.0), ProxyClusters: []string{"BFE1"}}},
			Gates: config.RolloutGates{Max5xxRatio: new(1.5), Margin5xx: new(2.0), Confidence5xx: new(99.0), P99Factor: new(0.5), ShareTolerance: 101,
				BlackholeEpsilon: new(150.0), MinRequests: new(-1)},
			Promotion: "sometimes",
		}
		s.Topology.ProxyClusters["BFE2"] = pc
		pc1 := s.Topology.ProxyClusters["BFE1"]
		pc1.Rollout = &config.RolloutPolicy{Stages: []config.RolloutStage{{Count: new(1)}}, Gates: config.RolloutGates{Confidence5xx: new(1.0),
			Margin5xx: new(-0.01), ShareTolerance: -1}}
		s.Topology.ProxyClusters["BFE1"] = pc1
		es, ok := AsErrors(State(s))
		if !ok {
			t.Fatalf("State() = %v, want Errors", State(s))
		}
		p := "topology.proxy_clusters.BFE2.rollout"
		want := []string{
			"rollout.gates.apply_timeout: 0s would fail every stage before its proxies could apply the candidate; want a duration > 0 (absent: 30s)",
			"rollout.gates.confidence_5xx: -0.5 is outside 0 < c < 1; write 0.99 for 99 % (0: off, the plain margin)",
			"rollout.gates.min_requests: 0 would judge a side with no answers; want at least 1 answer (absent: 20)",
			"rollout.gates.p99_factor: 0 would fail every stage with any latency; want a factor ≥ 1 (absent: 3), or a negative value to turn the p99 gate off",
			"rollout.stages: is empty; want at least one stage (or no rollout policy)",
			"topology.proxy_clusters.BFE1.rollout.gates.confidence_5xx: 1 is outside 0 < c < 1; write 0.99 for 99 % (0: off, the plain margin)",
			"topology.proxy_clusters.BFE1.rollout.gates.margin_5xx: -0.01 is negative; want a margin ≥ 0 over the stable proxies' ratio (0: none; absent: 0.02)",
			"topology.proxy_clusters.BFE1.rollout.gates.share_tolerance_points: -1 points is negative; want a tolerance ≥ 0 (0: off)",
			p + ".gates.blackhole_epsilon_points: 150 points is above 100",
			p + ".gates.confidence_5xx: 99 is outside 0 < c < 1; write 0.99 for 99 % (0: off, the plain margin)",
			p + ".gates.margin_5xx: 2 is a ratio above 1; write 0.05 for 5 %",
			p + ".gates.max_5xx_ratio: 1.5 is a ratio above 1; write 0.05 for 5 %",
			p + ".gates.min_requests: -1 would judge a side with no answers; want at least 1 answer (absent: 20)",
			p + ".gates.p99_factor: 0.5 would demand a canary faster than the stable proxies, failing a fair one by noise; want a factor ≥ 1 (absent: 3), or a negative value to turn the p99 gate off",
			p + ".gates.share_tolerance_points: 101 points is above 100",
			p + `.promotion: "sometimes" is neither "auto" nor "manual"`,
			p + ".stages[0]: sets none of count, percent and proxy_clusters; set exactly one",
			p + ".stages[1]: sets count and percent; set exactly one of count, percent and proxy_clusters",
			p + ".stages[2].count: -1 is negative; want a number of proxies ≥ 1",
			p + ".stages[4].count: 2 is below an earlier stage's 3; a stage includes the previous ones' proxies",
			p + ".stages[6].percent: 50 is below an earlier stage's 60; a stage includes the previous ones' proxies",
			p + ".stages[7].percent: 101 is outside 0 < p ≤ 100 (a percent of each proxy cluster's proxies)",
			p + ".stages[8].percent: -1 is outside 0 < p ≤ 100 (a percent of each proxy cluster's proxies)",
			p + `.stages[9].proxy_clusters[1]: proxy cluster "NOPE" is not in topology.proxy_clusters`,
			p + ".stages[10].count: 0 selects no proxy, and a stage must select at least one; want a number of proxies ≥ 1",
			p + ".stages[11].percent: 0 selects no proxy, and a stage must select at least one; want 0 < p ≤ 100 (a percent of each proxy cluster's proxies)",
			p + ".stages[12].proxy_clusters: [] selects no proxy, and a stage must select at least one; want at least one name of topology.proxy_clusters",
			p + ".stages[13]: sets count and percent; set exactly one of count, percent and proxy_clusters",
			p + ".stages[13].count: 0 selects no proxy, and a stage must select at least one; want a number of proxies ≥ 1",
			p + ".stages[14]: sets count, percent and proxy_clusters; set exactly one of count, percent and proxy_clusters",
		}
		if got := strings.Split(es.Error(), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}

// TestRolloutBadStageOneError: a stage's value refused by its rule is
// not then compared with the later stages' (percent: 101 followed by 100
// used to add "100 is below an earlier stage's 101"): exactly one error,
// naming the stage, the value and the rule.
func TestRolloutBadStageOneError(t *testing.T) {
	for _, c := range []struct {
		name   string
		stages []config.RolloutStage
		want   string
	}{
		{"percent above 100", []config.RolloutStage{{Percent: new(10.0)}, {Percent: new(101.0)}, {Percent: new(50.0)}, {Percent: new(100.0)}},
			"rollout.stages[1].percent: 101 is outside 0 < p ≤ 100 (a percent of each proxy cluster's proxies)"},
		{"percent negative", []config.RolloutStage{{Percent: new(-5.0)}, {Percent: new(1.0)}},
			"rollout.stages[0].percent: -5 is outside 0 < p ≤ 100 (a percent of each proxy cluster's proxies)"},
		{"count negative", []config.RolloutStage{{Count: new(-1)}, {Count: new(1)}, {Count: new(2)}},
			"rollout.stages[0].count: -1 is negative; want a number of proxies ≥ 1"},
	} {
		s := loadMission(t)
		s.Rollout = &config.RolloutPolicy{Stages: c.stages}
		es, ok := AsErrors(State(s))
		if !ok {
			t.Fatalf("%s: State() = %v, want Errors", c.name, State(s))
		}
		if got := es.Error(); got != c.want {
			t.Errorf("%s: errors:\n%s\nwant exactly:\n%s", c.name, got, c.want)
		}
	}
}

// TestRolloutExplicitZero: per field, an explicit 0 written in YAML either
// means what the field says (still 0 after the defaults, also after the
// JSON round trip of the stored state) or is refused with the field, the
// value and the rule; the field absent takes its default.
func TestRolloutExplicitZero(t *testing.T) {
	gates := func(p config.RolloutPolicy) config.RolloutGates { return p.Gates.WithDefaults() }
	for _, c := range []struct {
		field, zero string // field: in gates, but "bake" in the stage
		err         string // "": accepted
		// get is the value the rollout uses (durations in seconds).
		get          func(config.RolloutPolicy) float64
		zeroIs, dflt float64
	}{
		{"apply_timeout", "0s", "rollout.gates.apply_timeout: 0s would fail every stage before its proxies could apply the candidate; want a duration > 0 (absent: 30s)",
			func(p config.RolloutPolicy) float64 { return gates(p).ApplyTimeout.D().Seconds() }, 0, 30},
		{"max_5xx_ratio", "0", "", func(p config.RolloutPolicy) float64 { return *gates(p).Max5xxRatio }, 0, 0.05},
		{"margin_5xx", "0", "", func(p config.RolloutPolicy) float64 { return *gates(p).Margin5xx }, 0, 0.02},
		{"confidence_5xx", "0", "", func(p config.RolloutPolicy) float64 { return *gates(p).Confidence5xx }, 0, 0.99},
		{"p99_factor", "0", "rollout.gates.p99_factor: 0 would fail every stage with any latency; want a factor ≥ 1 (absent: 3), or a negative value to turn the p99 gate off",
			func(p config.RolloutPolicy) float64 { return *gates(p).P99Factor }, 0, 3},
		{"share_tolerance_points", "0", "", func(p config.RolloutPolicy) float64 { return gates(p).ShareTolerance }, 0, 0},
		{"blackhole_epsilon_points", "0", "", func(p config.RolloutPolicy) float64 { return *gates(p).BlackholeEpsilon }, 0, 5},
		{"min_requests", "0", "rollout.gates.min_requests: 0 would judge a side with no answers; want at least 1 answer (absent: 20)",
			func(p config.RolloutPolicy) float64 { return float64(*gates(p).MinRequests) }, 0, 20},
		{"bake", "0s", "", func(p config.RolloutPolicy) float64 { return p.Stages[0].BakeTime().Seconds() }, 0, 60},
	} {
		t.Run(c.field, func(t *testing.T) {
			decode := func(doc string) (*config.State, config.RolloutPolicy) {
				t.Helper()
				s := loadMission(t)
				s.Rollout = &config.RolloutPolicy{}
				if err := codec.Unmarshal([]byte(doc), s.Rollout); err != nil {
					t.Fatalf("decode %s: %v", doc, err)
				}
				// Stored as JSON (etcd) and read back: the explicit 0 stays.
				raw, err := json.Marshal(s.Rollout)
				if err != nil {
					t.Fatal(err)
				}
				var back config.RolloutPolicy
				if err := codec.Unmarshal(raw, &back); err != nil {
					t.Fatalf("decode %s: %v", raw, err)
				}
				return s, back
			}
			doc := func(with string) string {
				if c.field == "bake" {
					return "stages: [{count: 1" + with + "}]\n"
				}
				return "stages: [{count: 1}]\ngates: {" + strings.TrimPrefix(with, ", ") + "}\n"
			}
			s, back := decode(doc(", " + c.field + ": " + c.zero))
			if err := State(s); c.err == "" && err != nil {
				t.Errorf("%s: %s: State() = %v, want nil", c.field, c.zero, err)
			} else if c.err != "" && (err == nil || err.Error() != c.err) {
				t.Errorf("%s: %s: State() = %v\nwant %s", c.field, c.zero, err, c.err)
			}
			if c.err == "" {
				if got := c.get(back); got != c.zeroIs {
					t.Errorf("%s: %s is used as %v, want %v", c.field, c.zero, got, c.zeroIs)
				}
			}
			s, back = decode(doc(""))
			if err := State(s); err != nil {
				t.Errorf("%s absent: State() = %v, want nil", c.field, err)
			}
			if got := c.get(back); got != c.dflt {
				t.Errorf("%s absent: used as %v, want the default %v", c.field, got, c.dflt)
			}
		})
	}
}

// TestRolloutP99FactorBelowOne: p99_factor written in YAML is refused
// from 0 up to (not including) 1 — a factor below 1 demands a canary
// faster than the stable proxies — with the field, the value and the rule;
// 1 and above are used as written (also after the JSON round trip of the
// stored state), a negative value turns the gate off, absent is 3.
func TestRolloutP99FactorBelowOne(t *testing.T) {
	const rule = "; want a factor ≥ 1 (absent: 3), or a negative value to turn the p99 gate off"
	const faster = " would demand a canary faster than the stable proxies, failing a fair one by noise" + rule
	for _, c := range []struct {
		written string // "": absent
		err     string // "": accepted
		used    float64
	}{
		{"0", "rollout.gates.p99_factor: 0 would fail every stage with any latency" + rule, 0},
		{"0.001", "rollout.gates.p99_factor: 0.001" + faster, 0},
		{"0.5", "rollout.gates.p99_factor: 0.5" + faster, 0},
		{"0.999", "rollout.gates.p99_factor: 0.999" + faster, 0},
		{"1", "", 1},
		{"1.5", "", 1.5},
		{"-1", "", -1},
		{"-0.5", "", -0.5},
		{"", "", 3},
	} {
		gates := "{}"
		if c.written != "" {
			gates = "{p99_factor: " + c.written + "}"
		}
		s := loadMission(t)
		s.Rollout = &config.RolloutPolicy{}
		doc := "stages: [{count: 1}]\ngates: " + gates + "\n"
		if err := codec.Unmarshal([]byte(doc), s.Rollout); err != nil {
			t.Fatalf("decode %q: %v", doc, err)
		}
		err := State(s)
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("p99_factor: %s: State() = %v\nwant %s", c.written, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("p99_factor: %q: State() = %v, want nil", c.written, err)
			continue
		}
		raw, err := json.Marshal(s.Rollout)
		if err != nil {
			t.Fatal(err)
		}
		var back config.RolloutPolicy
		if err := codec.Unmarshal(raw, &back); err != nil {
			t.Fatalf("decode %s: %v", raw, err)
		}
		if got := *back.Gates.WithDefaults().P99Factor; got != c.used {
			t.Errorf("p99_factor: %q is used as %v after the round trip, want %v", c.written, got, c.used)
		}
	}
}

// TestRolloutStageExplicitZero: a stage selector written in YAML as 0 (or
// an empty proxy_clusters list) is written, never read as absent: next to
// another selector the stage names two and is refused, never taken as the
// other one; alone it is refused by its rule (a stage must select at least
// one proxy). Each error names the stage's field, the value and the rule,
// and is the same after the JSON round trip of the stored state (the
// explicit 0 and [] stay); an accepted stage is stored exactly as written.
func TestRolloutStageExplicitZero(t *testing.T) {
	const (
		sets2     = "rollout.stages[0]: sets %s; set exactly one of count, percent and proxy_clusters"
		count0    = "rollout.stages[0].count: 0 selects no proxy, and a stage must select at least one; want a number of proxies ≥ 1"
		percent0  = "rollout.stages[0].percent: 0 selects no proxy, and a stage must select at least one; want 0 < p ≤ 100 (a percent of each proxy cluster's proxies)"
		emptyList = "rollout.stages[0].proxy_clusters: [] selects no proxy, and a stage must select at least one; want at least one name of topology.proxy_clusters"
	)
	for _, c := range []struct {
		stage  string
		errs   []string // nil: accepted
		stored string   // the stage stored as JSON, when accepted
	}{
		{"{count: 0}", []string{count0}, ""},
		{"{percent: 0}", []string{percent0}, ""},
		{"{proxy_clusters: []}", []string{emptyList}, ""},
		{"{count: 0, percent: 50}", []string{fmt.Sprintf(sets2, "count and percent"), count0}, ""},
		{"{percent: 0, count: 2}", []string{fmt.Sprintf(sets2, "count and percent"), percent0}, ""},
		{"{count: 1, proxy_clusters: []}", []string{fmt.Sprintf(sets2, "count and proxy_clusters"), emptyList}, ""},
		{"{percent: 0, proxy_clusters: [BFE1]}", []string{fmt.Sprintf(sets2, "percent and proxy_clusters"), percent0}, ""},
		{"{count: 0, percent: 0, proxy_clusters: []}", []string{fmt.Sprintf(sets2, "count, percent and proxy_clusters"), count0, percent0, emptyList}, ""},
		{"{bake: 10s}", []string{"rollout.stages[0]: sets none of count, percent and proxy_clusters; set exactly one"}, ""},
		{"{count: 2}", nil, `{"count":2}`},
		{"{percent: 50}", nil, `{"percent":50}`},
		{"{percent: 100, count: null}", nil, `{"percent":100}`},
		{"{proxy_clusters: [BFE1]}", nil, `{"proxy_clusters":["BFE1"]}`},
	} {
		s := loadMission(t)
		s.Rollout = &config.RolloutPolicy{}
		doc := "stages: [" + c.stage + "]\n"
		if err := codec.Unmarshal([]byte(doc), s.Rollout); err != nil {
			t.Fatalf("decode %q: %v", doc, err)
		}
		want := strings.Join(c.errs, "\n")
		check := func(when string) {
			t.Helper()
			err := State(s)
			if got := fmt.Sprint(err); (err == nil) != (c.errs == nil) || (err != nil && got != want) {
				t.Errorf("%s %s: State() = %v\nwant %s", c.stage, when, err, want)
			}
		}
		check("from YAML")
		raw, err := json.Marshal(s.Rollout.Stages[0])
		if err != nil {
			t.Fatal(err)
		}
		if c.errs == nil && string(raw) != c.stored {
			t.Errorf("%s stored as %s, want %s", c.stage, raw, c.stored)
		}
		// Stored as JSON (etcd) and read back: what was written stays.
		var back config.RolloutStage
		if err := codec.Unmarshal(raw, &back); err != nil {
			t.Fatalf("decode %s: %v", raw, err)
		}
		s.Rollout.Stages[0] = back
		check("after the JSON round trip " + string(raw))
	}
}

package validate

import (
	"strings"
	"testing"

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
			Stages: []config.RolloutStage{{Count: 1}, {Percent: 50}, {ProxyClusters: []string{"BFE1"}},
				{Count: 1}, {Percent: 50}, {Percent: 100}},
			Gates:     config.RolloutGates{Max5xxRatio: 1, Margin5xx: 1, Confidence5xx: new(0.0), ShareTolerance: 100, BlackholeEpsilon: 100},
			Promotion: config.PromotionManual,
		}
		pc := s.Topology.ProxyClusters["BFE2"]
		pc.Rollout = &config.RolloutPolicy{Stages: []config.RolloutStage{{Count: 2}}, Gates: config.RolloutGates{Confidence5xx: new(0.9999)},
			Promotion: config.PromotionAuto}
		s.Topology.ProxyClusters["BFE2"] = pc
		if err := State(s); err != nil {
			t.Fatalf("State() = %v, want nil", err)
		}
	})
	t.Run("past the limits", func(t *testing.T) {
		s := loadMission(t)
		s.Rollout = &config.RolloutPolicy{Gates: config.RolloutGates{Confidence5xx: new(-0.5)}}
		pc := s.Topology.ProxyClusters["BFE2"]
		pc.Rollout = &config.RolloutPolicy{
			Stages: []config.RolloutStage{{}, {Count: 2, Percent: 10}, {Count: -1}, {Count: 3}, {Count: 2},
				{Percent: 60}, {Percent: 50}, {Percent: 101}, {Percent: -1}, {ProxyClusters: []string{"BFE1", "NOPE"}}},
			Gates: config.RolloutGates{Max5xxRatio: 1.5, Margin5xx: 2, Confidence5xx: new(99.0), ShareTolerance: 101, BlackholeEpsilon: 150,
				MinRequests: -1},
			Promotion: "sometimes",
		}
		s.Topology.ProxyClusters["BFE2"] = pc
		pc1 := s.Topology.ProxyClusters["BFE1"]
		pc1.Rollout = &config.RolloutPolicy{Stages: []config.RolloutStage{{Count: 1}}, Gates: config.RolloutGates{Confidence5xx: new(1.0)}}
		s.Topology.ProxyClusters["BFE1"] = pc1
		es, ok := AsErrors(State(s))
		if !ok {
			t.Fatalf("State() = %v, want Errors", State(s))
		}
		p := "topology.proxy_clusters.BFE2.rollout"
		want := []string{
			"rollout.gates.confidence_5xx: -0.5 is outside 0 < c < 1; write 0.99 for 99 % (0: off, the plain margin)",
			"rollout.stages: is empty; want at least one stage (or no rollout policy)",
			"topology.proxy_clusters.BFE1.rollout.gates.confidence_5xx: 1 is outside 0 < c < 1; write 0.99 for 99 % (0: off, the plain margin)",
			p + ".gates.blackhole_epsilon_points: 150 points is above 100",
			p + ".gates.confidence_5xx: 99 is outside 0 < c < 1; write 0.99 for 99 % (0: off, the plain margin)",
			p + ".gates.margin_5xx: 2 is a ratio above 1; write 0.05 for 5 %",
			p + ".gates.max_5xx_ratio: 1.5 is a ratio above 1; write 0.05 for 5 %",
			p + ".gates.min_requests: -1 is negative",
			p + ".gates.share_tolerance_points: 101 points is above 100",
			p + `.promotion: "sometimes" is neither "auto" nor "manual"`,
			p + ".stages[0]: sets 0 of count, percent and proxy_clusters; want exactly one",
			p + ".stages[1]: sets 2 of count, percent and proxy_clusters; want exactly one",
			p + ".stages[2].count: -1 is negative; want a number of proxies ≥ 1",
			p + ".stages[4].count: 2 is below an earlier stage's 3; a stage includes the previous ones' proxies",
			p + ".stages[6].percent: 50 is below an earlier stage's 60; a stage includes the previous ones' proxies",
			p + ".stages[7].percent: 101 is outside 0 < p ≤ 100 (a percent of each proxy cluster's proxies)",
			p + ".stages[8].percent: -1 is outside 0 < p ≤ 100 (a percent of each proxy cluster's proxies)",
			p + `.stages[9].proxy_clusters[1]: proxy cluster "NOPE" is not in topology.proxy_clusters`,
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
		{"percent above 100", []config.RolloutStage{{Percent: 10}, {Percent: 101}, {Percent: 50}, {Percent: 100}},
			"rollout.stages[1].percent: 101 is outside 0 < p ≤ 100 (a percent of each proxy cluster's proxies)"},
		{"percent negative", []config.RolloutStage{{Percent: -5}, {Percent: 1}},
			"rollout.stages[0].percent: -5 is outside 0 < p ≤ 100 (a percent of each proxy cluster's proxies)"},
		{"count negative", []config.RolloutStage{{Count: -1}, {Count: 1}, {Count: 2}},
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

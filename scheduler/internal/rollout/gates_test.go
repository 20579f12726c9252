package rollout

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
	rs "github.com/sluicelb/sluice/api/rollout"
)

// TestNormalQuantile: the quantiles the 5xx gate needs, to 3 decimals.
func TestNormalQuantile(t *testing.T) {
	for _, c := range []struct{ c, want float64 }{{0.5, 0}, {0.9, 1.282}, {0.95, 1.645}, {0.975, 1.960}, {0.99, 2.326}, {0.999, 3.090}} {
		if got := normalQuantile(c.c); math.Abs(got-c.want) > 0.0005 {
			t.Errorf("normalQuantile(%v) = %.4f, want %.3f", c.c, got, c.want)
		}
	}
}

// TestExcess5xx: the statistic by hand (unpooled, each side's ratio taken
// with one 5xx and one success added for its variance), and its edges:
// finite at 0 % and 100 %, larger with more answers at the same ratios.
func TestExcess5xx(t *testing.T) {
	for _, c := range []struct {
		name   string
		sr     float64
		ns     uint64
		br     float64
		nb     uint64
		margin float64
		want   float64
	}{
		// p̃ = 121/1002, 51/1002: 0.05 / √(p̃(1−p̃)/1002 + …) = 4.027 (checked with Python).
		{"12% of 1000 vs 5% of 1000", 0.12, 1000, 0.05, 1000, 0.02, 4.027},
		{"12% of 100 vs 5% of 100", 0.12, 100, 0.05, 100, 0.02, 1.237},
		{"difference exactly the margin", 0.32, 300, 0.30, 300, 0.02, 0},
		// p̃ = 11/12 and 1/12: 0.98 / √(2 · 11/144 / 12) = 8.685.
		{"100% of 10 vs 0% of 10", 1, 10, 0, 10, 0.02, 8.685},
		// −0.02 / √(2 · (1/402)(401/402) / 402) = −5.692.
		{"0% vs 0%", 0, 400, 0, 400, 0.02, -5.692},
		{"100% vs 100%", 1, 400, 1, 400, 0.02, -5.692},
		// No answers on a side: its ratio is 1/2 ± 0.35, not a division by zero.
		{"stable without answers", 0.5, 100, 0, 0, 0.02, 1.345},
	} {
		got := excess5xx(c.sr, c.ns, c.br, c.nb, c.margin)
		if math.IsNaN(got) || math.IsInf(got, 0) || math.Abs(got-c.want) > 0.0005 {
			t.Errorf("%s: excess5xx = %.4f, want %.3f", c.name, got, c.want)
		}
	}
	if a, b := excess5xx(0.12, 300, 0.05, 300, 0.02), excess5xx(0.12, 400, 0.05, 400, 0.02); !(a < b) {
		t.Errorf("same ratios, more answers: %.3f then %.3f, want larger", a, b)
	}
}

// gatesOnly5xx: the default gates with only the 5xx gate on, at confidence
// conf (nil: the default), judging from 10 answers a side (as the e2e
// scenarios).
func gatesOnly5xx(conf *float64) config.RolloutGates {
	return config.RolloutGates{P99Factor: new(-1.0), BlackholeEpsilon: new(-1.0), Confidence5xx: conf, MinRequests: new(10)}.WithDefaults()
}

// proxiesSide: the traffic of proxies proxies answering errors 5xx of
// answers.
func proxiesSide(proxies int, errors, answers uint64) side {
	return side{proxies: proxies, live: proxies, errors5xx: errors, answers: answers}
}

// TestFiveXXGateSampleSize: the 5xx gate's verdict and its words, case by
// case: noise within a few hundred answers does not fail a fair canary, a
// clearly worse one fails, a moderately worse one fails once the answers
// show it, confidence 0 is the plain margin.
func TestFiveXXGateSampleSize(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name          string
		conf          *float64
		stage, stable side
		base          *rs.Baseline
		ok, judged    bool
		detail        string
	}{
		{"the session's fair canary in a fleet-wide burst", nil, proxiesSide(1, 98, 301), proxiesSide(2, 91, 298), nil, true, true,
			"stage 5xx 32.6% of 301 answers (1 proxies), stable 30.5% of 298 answers (2 proxies); limit 5.0% and stable + 2.0% at 99% confidence: 0.01 standard errors over stable + 2.0% (needs 2.33)"},
		{"the same with the plain margin (confidence 0): failed, as before", new(0.0), proxiesSide(1, 98, 301), proxiesSide(2, 91, 298), nil, false, true,
			"stage 5xx 32.6% of 301 answers (1 proxies), stable 30.5% of 298 answers (2 proxies); limit 5.0% and stable + 2.0%"},
		{"clearly worse", nil, proxiesSide(1, 80, 400), proxiesSide(2, 8, 400), nil, false, true,
			"stage 5xx 20.0% of 400 answers (1 proxies), stable 2.0% of 400 answers (2 proxies); limit 5.0% and stable + 2.0% at 99% confidence: 7.50 standard errors over stable + 2.0% (needs 2.33)"},
		{"moderately worse, 300 answers a side: could be noise", nil, proxiesSide(1, 36, 300), proxiesSide(2, 15, 300), nil, true, true,
			"stage 5xx 12.0% of 300 answers (1 proxies), stable 5.0% of 300 answers (2 proxies); limit 5.0% and stable + 2.0% at 99% confidence: 2.19 standard errors over stable + 2.0% (needs 2.33)"},
		{"moderately worse, 400 answers a side: shown", nil, proxiesSide(1, 48, 400), proxiesSide(2, 20, 400), nil, false, true,
			"stage 5xx 12.0% of 400 answers (1 proxies), stable 5.0% of 400 answers (2 proxies); limit 5.0% and stable + 2.0% at 99% confidence: 2.53 standard errors over stable + 2.0% (needs 2.33)"},
		{"moderately worse, 300 answers a side, at 95%", new(0.95), proxiesSide(1, 36, 300), proxiesSide(2, 15, 300), nil, false, true,
			"stage 5xx 12.0% of 300 answers (1 proxies), stable 5.0% of 300 answers (2 proxies); limit 5.0% and stable + 2.0% at 95% confidence: 2.19 standard errors over stable + 2.0% (needs 1.64)"},
		{"better than stable", nil, proxiesSide(1, 20, 400), proxiesSide(2, 40, 400), nil, true, true,
			"stage 5xx 5.0% of 400 answers (1 proxies), stable 10.0% of 400 answers (2 proxies); limit 5.0% and stable + 2.0% at 99% confidence: 3.74 standard errors under stable + 2.0% (needs 2.33)"},
		{"0% vs 0%", nil, proxiesSide(1, 0, 400), proxiesSide(2, 0, 400), nil, true, true,
			"stage 5xx 0.0% of 400 answers (1 proxies), stable 0.0% of 400 answers (2 proxies); limit 5.0% and stable + 2.0% at 99% confidence: 5.69 standard errors under stable + 2.0% (needs 2.33)"},
		{"100% vs 100%", nil, proxiesSide(1, 400, 400), proxiesSide(2, 400, 400), nil, true, true,
			"stage 5xx 100.0% of 400 answers (1 proxies), stable 100.0% of 400 answers (2 proxies); limit 5.0% and stable + 2.0% at 99% confidence: 5.69 standard errors under stable + 2.0% (needs 2.33)"},
		{"100% of 10 vs 0% of 10: no variance on either side, still failed", nil, proxiesSide(1, 10, 10), proxiesSide(2, 0, 10), nil, false, true,
			"stage 5xx 100.0% of 10 answers (1 proxies), stable 0.0% of 10 answers (2 proxies); limit 5.0% and stable + 2.0% at 99% confidence: 8.69 standard errors over stable + 2.0% (needs 2.33)"},
		// A 100 % stage: the baseline's answers are the stable side's.
		{"against the baseline of 40 answers: could be noise", nil, proxiesSide(3, 120, 1000), side{}, &rs.Baseline{Ratio5xx: 0.05, Answers: 40, At: at}, true, true,
			"stage 5xx 12.0% of 1000 answers (3 proxies), stable 5.0% of 40 answers at 2026-12-01T12:00:00Z (no stable proxies now); limit 5.0% and stable + 2.0% at 99% confidence: 1.22 standard errors over stable + 2.0% (needs 2.33)"},
		{"against the baseline of 1000 answers: shown", nil, proxiesSide(3, 120, 1000), side{}, &rs.Baseline{Ratio5xx: 0.05, Answers: 1000, At: at}, false, true,
			"stage 5xx 12.0% of 1000 answers (3 proxies), stable 5.0% of 1000 answers at 2026-12-01T12:00:00Z (no stable proxies now); limit 5.0% and stable + 2.0% at 99% confidence: 4.03 standard errors over stable + 2.0% (needs 2.33)"},
		// No stable comparison at all: the limit alone, as before.
		{"no stable proxies, no baseline", nil, proxiesSide(3, 6, 100), side{}, nil, false, true,
			"stage 5xx 6.0% of 100 answers (3 proxies), stable not judged (0 answers); limit 5.0% and stable + 2.0% at 99% confidence"},
		{"stable proxies not reported yet", nil, proxiesSide(1, 60, 100), side{proxies: 2, live: 2, answers: 5}, nil, true, false,
			"stage 5xx 60.0% of 100 answers (1 proxies), stable not judged (5 answers); limit 5.0% and stable + 2.0% at 99% confidence; waiting for the stable proxies' reports"},
		{"stage too few answers", nil, proxiesSide(1, 9, 9), proxiesSide(2, 0, 400), nil, true, false,
			"stage 5xx 100.0% of 9 answers (1 proxies), stable 0.0% of 400 answers (2 proxies); limit 5.0% and stable + 2.0% at 99% confidence; fewer than 10 answers: not judged"},
	} {
		v := trafficGates(c.stage, c.stable, gatesOnly5xx(c.conf), snap(60), c.base, 1)
		if len(v.gates) != 1 {
			t.Fatalf("%s: gates %+v, want the 5xx gate alone", c.name, v.gates)
		}
		gt := v.gates[0]
		if gt.OK != c.ok || gt.Judged != c.judged || gt.Detail != c.detail {
			t.Errorf("%s: ok %v judged %v\n%s\nwant ok %v judged %v\n%s", c.name, gt.OK, gt.Judged, gt.Detail, c.ok, c.judged, c.detail)
		}
		if failed := v.failed == "5xx"; failed != !c.ok || (failed && v.reason != c.detail) {
			t.Errorf("%s: verdict failed %q reason %q, want failed %v with the detail", c.name, v.failed, v.reason, !c.ok)
		}
	}
}

// TestExplicitZeroGates: the explicit zeros the gates honour, each against
// the same traffic with the field absent (the default): max_5xx_ratio 0
// fails a stage under 5 % but over stable + margin; margin_5xx 0 at
// confidence 0 fails a stage 0.1 point over stable and over the limit;
// blackhole_epsilon_points 0 fails any drop beyond the blackhole weight.
func TestExplicitZeroGates(t *testing.T) {
	blackhole := func(dropped uint64) side {
		s := proxiesSide(1, 0, 100)
		s.perCluster = map[string]*report.Traffic{"demo-main": {Requests: 100,
			SubClusters: map[string]uint64{"SC1": 60 - dropped, "SC2": 40, config.Blackhole: dropped}}}
		return s
	}
	for _, c := range []struct {
		name          string
		zero, absent  config.RolloutGates
		stage, stable side
		gate          string
		detail        string // the failing gate's, with the zero
	}{
		{"max_5xx_ratio 0: 4% over a stable 0%, beyond the default margin",
			config.RolloutGates{Max5xxRatio: new(0.0), Confidence5xx: new(0.0)}, config.RolloutGates{Confidence5xx: new(0.0)},
			proxiesSide(1, 16, 400), proxiesSide(2, 0, 400), "5xx",
			"stage 5xx 4.0% of 400 answers (1 proxies), stable 0.0% of 400 answers (2 proxies); limit 0.0% and stable + 2.0%"},
		{"margin_5xx 0: 5.2% against a stable 5.1%, over the limit",
			config.RolloutGates{Margin5xx: new(0.0), Confidence5xx: new(0.0)}, config.RolloutGates{Confidence5xx: new(0.0)},
			proxiesSide(1, 52, 1000), proxiesSide(2, 51, 1000), "5xx",
			"stage 5xx 5.2% of 1000 answers (1 proxies), stable 5.1% of 1000 answers (2 proxies); limit 5.0% and stable + 0.0%"},
		{"blackhole_epsilon_points 0: 3 points dropped with a blackhole weight 0",
			config.RolloutGates{BlackholeEpsilon: new(0.0)}, config.RolloutGates{},
			blackhole(3), proxiesSide(2, 0, 100), "blackhole",
			"cluster demo-main: blackhole share 3.0 points, weight 0.0 + 0"},
	} {
		v := trafficGates(c.stage, c.stable, c.zero.WithDefaults(), snap(60), nil, 1)
		if v.failed != c.gate || v.reason != c.detail {
			t.Errorf("%s: failed %q: %s\nwant failed %q: %s", c.name, v.failed, v.reason, c.gate, c.detail)
		}
		if v := trafficGates(c.stage, c.stable, c.absent.WithDefaults(), snap(60), nil, 1); v.failed != "" {
			t.Errorf("%s, the field absent: failed %q: %s; want passed (the default)", c.name, v.failed, v.reason)
		}
	}
}

// TestJudgements: a stage is judged once a Tick over its bake, both ends
// included; bake 0 at most once.
func TestJudgements(t *testing.T) {
	for _, c := range []struct {
		bake time.Duration
		want int
	}{{0, 1}, {-time.Second, 1}, {time.Second, 2}, {1500 * time.Millisecond, 2}, {60 * time.Second, 61}} {
		if got := judgements(c.bake); got != c.want {
			t.Errorf("judgements(%s) = %d, want %d", c.bake, got, c.want)
		}
	}
}

// TestFiveXXGateOverTheBake: what a judgement needs grows with the bake's
// judgements, and the detail says over how many: the moderately worse
// stage shown at one judgement (2.53 standard errors, needs 2.33) is not
// blamed by one of the 61 of a 60-second bake (needs 3.59); the clearly
// worse one still is.
func TestFiveXXGateOverTheBake(t *testing.T) {
	looks := judgements(60 * time.Second)
	for _, c := range []struct {
		name          string
		stage, stable side
		ok            bool
		detail        string
	}{
		{"moderately worse, 400 answers a side", proxiesSide(1, 48, 400), proxiesSide(2, 20, 400), true,
			"stage 5xx 12.0% of 400 answers (1 proxies), stable 5.0% of 400 answers (2 proxies); limit 5.0% and stable + 2.0% at 99% confidence over the bake's 61 judgements: 2.53 standard errors over stable + 2.0% (needs 3.59)"},
		{"clearly worse", proxiesSide(1, 80, 400), proxiesSide(2, 8, 400), false,
			"stage 5xx 20.0% of 400 answers (1 proxies), stable 2.0% of 400 answers (2 proxies); limit 5.0% and stable + 2.0% at 99% confidence over the bake's 61 judgements: 7.50 standard errors over stable + 2.0% (needs 3.59)"},
	} {
		v := trafficGates(c.stage, c.stable, gatesOnly5xx(nil), snap(60), nil, looks)
		if gt := v.gates[0]; gt.OK != c.ok || gt.Detail != c.detail {
			t.Errorf("%s: ok %v\n%s\nwant ok %v\n%s", c.name, gt.OK, gt.Detail, c.ok, c.detail)
		}
	}
}

// TestFiveXXGateHoldsPerBake: confidence_5xx is the bake's, not each
// judgement's. 2 000 simulated 20-second bakes (21 judgements each) of a
// stage exactly at stable + margin (32 % against 30 %, 300 answers a side
// drawn anew at every judgement: independent looks, the worst case for the
// union bound) are blamed by chance in at most about 1 % of bakes at 0.99;
// judged at 0.99 each time, as before, some 1 − 0.99^21 ≈ 19 % of them were.
// The draws are seeded: the same outcome every run.
func TestFiveXXGateHoldsPerBake(t *testing.T) {
	const bakes, answers = 2000, 300
	looks := judgements(20 * time.Second)
	rng := rand.New(rand.NewPCG(1, 2))
	draw := func(p float64) uint64 {
		var n uint64
		for range answers {
			if rng.Float64() < p {
				n++
			}
		}
		return n
	}
	blamed := func(looksSaid int) float64 {
		failed := 0
		for range bakes {
			for range looks {
				stage, stable := proxiesSide(1, draw(0.32), answers), proxiesSide(2, draw(0.30), answers)
				if v := trafficGates(stage, stable, gatesOnly5xx(nil), snap(60), nil, looksSaid); v.failed != "" {
					failed++
					break
				}
			}
		}
		return float64(failed) / bakes
	}
	perBake, perJudgement := blamed(looks), blamed(1)
	t.Logf("stage at stable + margin, %d bakes of %d judgements: blamed in %.2f%% of bakes (per-bake confidence), %.2f%% judged at 0.99 each time", bakes, looks, 100*perBake, 100*perJudgement)
	if got := perBake; got > 0.015 {
		t.Errorf("a stage at stable + margin blamed in %.1f%% of %d bakes of %d judgements; want at most about 1%%", 100*got, bakes, looks)
	}
	if got := perJudgement; got < 0.10 {
		t.Errorf("judged at 0.99 each time: blamed in %.1f%% of bakes; want the ~19%% that made the bake's guarantee necessary", 100*got)
	}
}

package rollout

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
	rs "github.com/sluicelb/sluice/api/rollout"
	"github.com/sluicelb/sluice/api/snapshot"
)

// p99Floor is the least stable p99 the latency gate multiplies: the
// histogram's buckets are coarse below it (report.LatencyBoundsMs).
const p99Floor = 25.0

// verdict is a gate evaluation: the figures, and the first failed gate.
type verdict struct {
	gates  []rs.Gate
	failed string // gate name; "" none
	reason string
}

func (v *verdict) add(g rs.Gate) {
	v.gates = append(v.gates, g)
	if !g.OK && v.failed == "" {
		v.failed, v.reason = g.Name, g.Detail
	}
}

// applyGate: every selected proxy runs the candidate; a rejection fails at
// once, a proxy still missing after timeout fails too. done: all applied.
func applyGate(rec rs.Staged, live, selected []report.ProxyStatus, absent []string, timeout time.Duration, now time.Time) (v verdict, done bool) {
	missing := append([]string(nil), absent...)
	if len(live) == 0 && len(absent) == 0 {
		missing = append(missing, "(no live proxy reports a status)")
	}
	for _, st := range selected {
		onLineage := st.AppliedLineage == rec.Lineage
		switch {
		case onLineage && st.AppliedVersion == rec.CandidateVersion:
		case st.RejectedVersion == rec.CandidateVersion:
			v.add(rs.Gate{Name: "apply", Judged: true, Detail: fmt.Sprintf("proxy %s rejected v%d: %s", st.ID, rec.CandidateVersion, st.RejectedReason)})
			return v, false
		default:
			missing = append(missing, st.ID)
		}
	}
	sort.Strings(missing)
	waited := now.Sub(rec.StageStarted)
	switch {
	case len(missing) == 0:
		v.add(rs.Gate{Name: "apply", OK: true, Judged: true, Detail: fmt.Sprintf("%d of %d selected proxies run v%d", len(selected), len(selected), rec.CandidateVersion)})
		return v, true
	case waited > timeout:
		v.add(rs.Gate{Name: "apply", Judged: true, Detail: fmt.Sprintf("%d of %d selected proxies did not apply v%d within %s: %s",
			len(missing), len(selected)+len(absent), rec.CandidateVersion, timeout, strings.Join(missing, ", "))})
	default:
		v.add(rs.Gate{Name: "apply", OK: true, Detail: fmt.Sprintf("%d of %d selected proxies run v%d; waiting for %s (%s of %s)",
			max(0, len(selected)+len(absent)-len(missing)), len(selected)+len(absent), rec.CandidateVersion, strings.Join(missing, ", "), waited.Round(time.Second), timeout)})
	}
	return v, false
}

// side is the traffic of one group of proxies, summed.
type side struct {
	proxies int
	// live: the group's live proxies, reporting or not.
	live int
	all  report.Traffic
	// errors5xx and answers exclude the blackhole's drops when they answer
	// with a 5xx.
	errors5xx, answers uint64
	// perCluster for the share gates.
	perCluster map[string]*report.Traffic
}

func (s *side) add(d report.Demand, cand *snapshot.Snapshot) {
	s.proxies++
	for name, cd := range d.Clusters {
		if cd.Traffic == nil {
			continue
		}
		t := *cd.Traffic
		s.all.Add(t)
		drops := t.SubClusters[config.Blackhole]
		e5, n := t.Status.S5xx, t.Requests
		if c, ok := cand.Clusters[name]; ok && c.Policy.Blackhole.Status >= 500 {
			e5 -= min(drops, e5)
			n -= min(drops, n)
		}
		s.errors5xx += e5
		s.answers += n
		if s.perCluster == nil {
			s.perCluster = map[string]*report.Traffic{}
		}
		if s.perCluster[name] == nil {
			s.perCluster[name] = &report.Traffic{}
		}
		s.perCluster[name].Add(t)
	}
}

func (s side) ratio() float64 {
	if s.answers == 0 {
		return 0
	}
	return float64(s.errors5xx) / float64(s.answers)
}

// excess5xx is how many standard errors the stage's 5xx ratio sr (of ns
// answers) lies over the stable ratio br (of nb answers) + margin: the
// statistic of the one-sided two-proportion test of H0: p_stage − p_stable
// ≤ margin, unpooled. Each side's variance is taken at its ratio with one
// 5xx and one success added (Agresti–Caffo), never zero: 0 % against 0 %
// (or 100 % against 100 %) is not 0/0, and 100 % against 0 % is a large z,
// not an infinite one. The difference itself is the measured one.
func excess5xx(sr float64, ns uint64, br float64, nb uint64, margin float64) float64 {
	variance := func(r float64, n uint64) float64 {
		m := float64(n) + 2
		p := (r*float64(n) + 1) / m
		return p * (1 - p) / m
	}
	return (sr - br - margin) / math.Sqrt(variance(sr, ns)+variance(br, nb))
}

// normalQuantile is the standard normal distribution's c quantile
// (0 < c < 1): 2.33 at 0.99.
func normalQuantile(c float64) float64 { return math.Sqrt2 * math.Erfinv(2*c-1) }

// judgements is how many times the traffic gates judge a stage whose bake
// lasts bake: once a Tick from its start to its end, both included (1 for
// bake 0: judged at most once).
func judgements(bake time.Duration) int {
	if bake <= 0 {
		return 1
	}
	return int(bake/Tick) + 1
}

// perJudgement is the confidence each of n judgements needs so that the
// stage's whole bake holds conf: a fair stage is blamed by chance in one
// of them with a probability of at most 1 − conf (the union bound over
// the n tests, whatever their correlation; Bonferroni). Judging every
// Tick at conf itself would blame a stage exactly at stable + margin in
// about 1 − conf of every judgement, not of every bake.
func perJudgement(conf float64, n int) float64 {
	return 1 - (1-conf)/float64(max(n, 1))
}

// trafficGates judge the stage's proxies against the stable ones over the
// same report windows; without enough stable answers (a 100 % stage),
// against the baseline the stable proxies had earlier in the rollout. g has
// its defaults (WithDefaults); looks is how many judgements the stage's
// bake makes (judgements), over which confidence_5xx holds.
func trafficGates(stage, stable side, g config.RolloutGates, cand *snapshot.Snapshot, base *rs.Baseline, looks int) verdict {
	var v verdict
	min := uint64(*g.MinRequests)
	stageOK, stableOK := stage.answers >= min, stable.answers >= min
	pct := func(r float64) string { return fmt.Sprintf("%.1f%%", 100*r) }
	br, bp, bn := stable.ratio(), stable.all.Quantile(0.99), stable.answers
	if !stableOK && base != nil {
		stableOK, br, bp, bn = true, base.Ratio5xx, base.P99Ms, base.Answers
	}
	if *g.Max5xxRatio >= 0 {
		gt := rs.Gate{Name: "5xx", OK: true, Judged: stageOK}
		sr := stage.ratio()
		detail := fmt.Sprintf("stage 5xx %s of %d answers (%d proxies)", pct(sr), stage.answers, stage.proxies)
		switch {
		case stable.answers >= min:
			detail += fmt.Sprintf(", stable %s of %d answers (%d proxies)", pct(br), stable.answers, stable.proxies)
		case stableOK:
			detail += fmt.Sprintf(", stable %s of %d answers at %s (no stable proxies now)", pct(br), base.Answers, base.At.Format(time.RFC3339))
		default:
			detail += fmt.Sprintf(", stable not judged (%d answers)", stable.answers)
		}
		detail += fmt.Sprintf("; limit %s and stable + %s", pct(*g.Max5xxRatio), pct(*g.Margin5xx))
		worse := sr > br+*g.Margin5xx
		if conf := *g.Confidence5xx; conf > 0 {
			detail += fmt.Sprintf(" at %.4g%% confidence", 100*conf)
			if looks > 1 {
				detail += fmt.Sprintf(" over the bake's %d judgements", looks)
			}
			if stageOK && stableOK {
				z, need := excess5xx(sr, stage.answers, br, bn, *g.Margin5xx), normalQuantile(perJudgement(conf, looks))
				worse = z > need
				rel := "over"
				if z < 0 {
					rel = "under"
				}
				detail += fmt.Sprintf(": %.2f standard errors %s stable + %s (needs %.2f)", math.Abs(z), rel, pct(*g.Margin5xx), need)
			}
		}
		switch {
		case !stageOK:
			detail += fmt.Sprintf("; fewer than %d answers: not judged", *g.MinRequests)
		case !stableOK && stable.live > 0:
			// Stable proxies exist but have not reported enough since the
			// bake started: wait for them rather than blame the stage for
			// what may be a fleet-wide incident.
			gt.Judged = false
			detail += "; waiting for the stable proxies' reports"
		case sr > *g.Max5xxRatio && (!stableOK || worse):
			gt.OK = false
		}
		gt.Detail = detail
		v.add(gt)
	}
	if *g.P99Factor >= 0 {
		gt := rs.Gate{Name: "p99", OK: true, Judged: stageOK && stableOK}
		sp := stage.all.Quantile(0.99)
		limit := math.Max(bp, p99Floor) * *g.P99Factor
		gt.Detail = fmt.Sprintf("stage p99 ≤ %g ms, stable p99 ≤ %g ms; limit %g ms (stable, at least %g ms, × %g)", sp, bp, limit, p99Floor, *g.P99Factor)
		if gt.Judged && sp > limit {
			gt.OK = false
		}
		if !gt.Judged {
			gt.Detail += "; not judged (too few answers on a side)"
		}
		v.add(gt)
	}
	if g.ShareTolerance > 0 || *g.BlackholeEpsilon >= 0 {
		names := make([]string, 0, len(stage.perCluster))
		for n := range stage.perCluster {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, name := range names {
			t := stage.perCluster[name]
			c, ok := cand.Clusters[name]
			if !ok || c.Row.Denominator <= 0 || t.Requests < min {
				continue
			}
			subs := make([]string, 0, len(c.Row.Weights)+1)
			for s := range c.Row.Weights {
				subs = append(subs, s)
			}
			if _, ok := c.Row.Weights[config.Blackhole]; !ok {
				subs = append(subs, config.Blackhole) // weight 0: no drop intended
			}
			sort.Strings(subs)
			for _, sub := range subs {
				want := 100 * float64(c.Row.Weights[sub]) / float64(c.Row.Denominator)
				got := t.Share(sub)
				if sub == config.Blackhole && *g.BlackholeEpsilon >= 0 {
					gt := rs.Gate{Name: "blackhole", OK: got <= want+*g.BlackholeEpsilon, Judged: true,
						Detail: fmt.Sprintf("cluster %s: blackhole share %.1f points, weight %.1f + %g", name, got, want, *g.BlackholeEpsilon)}
					v.add(gt)
				}
				if g.ShareTolerance > 0 && (sub != config.Blackhole || c.Row.Weights[sub] > 0 || got > 0) {
					gt := rs.Gate{Name: "share", OK: math.Abs(got-want) <= g.ShareTolerance, Judged: true,
						Detail: fmt.Sprintf("cluster %s sub-cluster %s: realised %.1f points, weight %.1f ± %g", name, sub, got, want, g.ShareTolerance)}
					if !gt.OK || len(v.gates) < 12 { // keep the record small: failures always, passes a few
						v.add(gt)
					}
				}
			}
		}
	}
	return v
}

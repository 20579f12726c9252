package validate

import (
	"fmt"
	"strings"

	"github.com/sluicelb/sluice/api/config"
)

// rollouts checks the fleet-wide rollout policy and each proxy cluster's.
func (c *collector) rollouts(s *config.State) {
	if s.Rollout != nil {
		c.rollout("rollout", s.Rollout, s)
	}
	for _, name := range sortedKeys(s.Topology.ProxyClusters) {
		if p := s.Topology.ProxyClusters[name].Rollout; p != nil {
			c.rollout("topology.proxy_clusters."+name+".rollout", p, s)
		}
	}
}

func (c *collector) rollout(path string, p *config.RolloutPolicy, s *config.State) {
	if len(p.Stages) == 0 {
		c.add(path+".stages", "is empty; want at least one stage (or no rollout policy)")
	}
	lastPercent, lastCount := 0.0, 0
	for i, st := range p.Stages {
		sp := fmt.Sprintf("%s.stages[%d]", path, i)
		// A selector is set when it was written, whatever its value
		// (config.RolloutStage): an explicit 0 or empty list is never
		// skipped over for another selector.
		var set []string
		if st.Count != nil {
			set = append(set, "count")
		}
		if st.Percent != nil {
			set = append(set, "percent")
		}
		if st.ProxyClusters != nil {
			set = append(set, "proxy_clusters")
		}
		switch len(set) {
		case 0:
			c.add(sp, "sets none of count, percent and proxy_clusters; set exactly one")
		case 1:
		default:
			c.add(sp, "sets %s; set exactly one of count, percent and proxy_clusters", joinAnd(set))
		}
		// A value refused here is not compared with the later stages':
		// one wrong field gives one error, not one more per stage after it.
		if n := st.Count; n != nil {
			switch {
			case *n < 0:
				c.add(sp+".count", "%d is negative; want a number of proxies ≥ 1", *n)
			case *n == 0:
				c.add(sp+".count", "0 selects no proxy, and a stage must select at least one; want a number of proxies ≥ 1")
			case *n < lastCount:
				c.add(sp+".count", "%d is below an earlier stage's %d; a stage includes the previous ones' proxies", *n, lastCount)
			default:
				lastCount = *n
			}
		}
		if pct := st.Percent; pct != nil {
			switch {
			case *pct == 0:
				c.add(sp+".percent", "0 selects no proxy, and a stage must select at least one; want 0 < p ≤ 100 (a percent of each proxy cluster's proxies)")
			case *pct < 0 || *pct > 100:
				c.add(sp+".percent", "%v is outside 0 < p ≤ 100 (a percent of each proxy cluster's proxies)", *pct)
			case *pct < lastPercent:
				c.add(sp+".percent", "%v is below an earlier stage's %v; a stage includes the previous ones' proxies", *pct, lastPercent)
			default:
				lastPercent = *pct
			}
		}
		if st.ProxyClusters != nil && len(st.ProxyClusters) == 0 {
			c.add(sp+".proxy_clusters", "[] selects no proxy, and a stage must select at least one; want at least one name of topology.proxy_clusters")
		}
		for j, pc := range st.ProxyClusters {
			if _, ok := s.Topology.ProxyClusters[pc]; !ok {
				c.add(fmt.Sprintf("%s.proxy_clusters[%d]", sp, j), "proxy cluster %q is not in topology.proxy_clusters", pc)
			}
		}
	}
	switch p.Promotion {
	case "", config.PromotionAuto, config.PromotionManual:
	default:
		c.add(path+".promotion", "%q is neither %q nor %q", p.Promotion, config.PromotionAuto, config.PromotionManual)
	}
	c.rolloutGates(path+".gates.", p.Gates)
}

// rolloutGates checks the gates the operator wrote: an absent field (nil)
// takes its default and is not checked; an explicit 0 either means what
// the field says (config.RolloutGates) or is refused here, never replaced
// by the default.
func (c *collector) rolloutGates(path string, g config.RolloutGates) {
	if t := g.ApplyTimeout; t != nil && *t <= 0 {
		c.add(path+"apply_timeout", "%v would fail every stage before its proxies could apply the candidate; want a duration > 0 (absent: %v)",
			*t, config.DefaultRolloutApplyTimeout)
	}
	for _, r := range []struct {
		name string
		v    *float64
	}{{"max_5xx_ratio", g.Max5xxRatio}, {"margin_5xx", g.Margin5xx}} {
		if r.v != nil && *r.v > 1 {
			c.add(path+r.name, "%v is a ratio above 1; write 0.05 for 5 %%", *r.v)
		}
	}
	if m := g.Margin5xx; m != nil && *m < 0 {
		// (a negative margin would make the gate stricter than the stable
		// proxies, not turn it off as a negative max_5xx_ratio does)
		c.add(path+"margin_5xx", "%v is negative; want a margin ≥ 0 over the stable proxies' ratio (0: none; absent: %v)",
			*m, config.DefaultMargin5xx)
	}
	if g.ShareTolerance < 0 {
		c.add(path+"share_tolerance_points", "%v points is negative; want a tolerance ≥ 0 (0: off)", g.ShareTolerance)
	}
	if conf := g.Confidence5xx; conf != nil && (*conf < 0 || *conf >= 1) {
		c.add(path+"confidence_5xx", "%v is outside 0 < c < 1; write 0.99 for 99 %% (0: off, the plain margin)", *conf)
	}
	// (negative turns the gate off; 1 passes a canary as slow as the
	// stable proxies, and no slower)
	if f := g.P99Factor; f != nil && *f >= 0 && *f < 1 {
		why := "would demand a canary faster than the stable proxies, failing a fair one by noise"
		if *f == 0 {
			why = "would fail every stage with any latency"
		}
		c.add(path+"p99_factor", "%v %s; want a factor ≥ 1 (absent: %v), or a negative value to turn the p99 gate off",
			*f, why, config.DefaultP99Factor)
	}
	for _, r := range []struct {
		name string
		v    *float64
	}{{"share_tolerance_points", &g.ShareTolerance}, {"blackhole_epsilon_points", g.BlackholeEpsilon}} {
		if r.v != nil && *r.v > 100 {
			c.add(path+r.name, "%v points is above 100", *r.v)
		}
	}
	if n := g.MinRequests; n != nil && *n < 1 {
		c.add(path+"min_requests", "%d would judge a side with no answers; want at least 1 answer (absent: %d)", *n, config.DefaultMinRequests)
	}
}

// joinAnd is "a and b", "a, b and c".
func joinAnd(xs []string) string {
	if len(xs) < 2 {
		return strings.Join(xs, "")
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " and " + xs[len(xs)-1]
}

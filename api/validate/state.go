package validate

import (
	"fmt"
	"strings"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/route"
)

// State checks a desired-state document. It returns nil or Errors, every
// broken rule at once, sorted by path.
func State(s *config.State) error {
	var c collector
	if s == nil {
		c.add("", "desired state is missing")
		return c.err()
	}
	idcs := c.topology(s.Topology)
	idcOK := func(n string) bool { return idcs[n] }

	for _, name := range sortedKeys(s.Clusters) {
		cl := s.Clusters[name]
		path := "clusters." + name
		c.name(path, "cluster", name)
		c.subClusters(path+".subclusters", cl.SubClusters, idcOK)
		c.policy(path+".policy", cl.Policy)
	}
	c.products("products", s.Products, s.DefaultProduct, func(cluster string) bool {
		_, ok := s.Clusters[cluster]
		return ok
	})
	c.pins(s)
	c.drains(s)
	c.rollouts(s)
	c.scheduler("scheduler", s.Scheduler)
	return c.err()
}

// topology checks names and references and returns the set of IDCs.
func (c *collector) topology(t config.Topology) map[string]bool {
	idcs := map[string]bool{}
	if len(t.IDCs) == 0 {
		c.add("topology.idcs", "is empty; want at least one IDC")
	}
	for i, n := range t.IDCs {
		p := fmt.Sprintf("topology.idcs[%d]", i)
		c.name(p, "IDC", n)
		if idcs[n] {
			c.add(p, "IDC %q is listed twice", n)
		}
		idcs[n] = true
	}
	for _, name := range sortedKeys(t.ProxyClusters) {
		pc := t.ProxyClusters[name]
		p := "topology.proxy_clusters." + name
		c.name(p, "proxy cluster", name)
		if pc.IDC == "" {
			c.add(p+".idc", "is empty; want one of topology.idcs")
		} else if !idcs[pc.IDC] {
			c.add(p+".idc", "IDC %q is not in topology.idcs", pc.IDC)
		}
		c.trustedProxies(p+".trusted_proxies", pc.TrustedProxies)
	}
	for _, from := range sortedKeys(t.LocalityCost) {
		p := "topology.locality_cost." + from
		if !idcs[from] {
			c.add(p, "IDC %q is not in topology.idcs", from)
		}
		for _, to := range sortedKeys(t.LocalityCost[from]) {
			if !idcs[to] {
				c.add(p+"."+to, "IDC %q is not in topology.idcs", to)
			}
			c.atLeast(p+"."+to, t.LocalityCost[from][to], 0)
		}
	}
	return idcs
}

// products checks names, hosts, rules and cluster references.
func (c *collector) products(path string, products map[string]config.Product, defaultProduct string, clusterOK func(string) bool) {
	owner := map[string]string{}
	for _, name := range sortedKeys(products) {
		p := products[name]
		pp := path + "." + name
		c.name(pp, "product", name)
		for i, h := range p.Hosts {
			hp := fmt.Sprintf("%s.hosts[%d]", pp, i)
			key, err := route.NormalizeHost(h)
			if err != nil {
				c.add(hp, "%v", err)
				continue
			}
			if o, dup := owner[key]; dup {
				c.add(hp, "host %q is already used by product %q", h, o)
				continue
			}
			owner[key] = name
		}
		if len(p.Rules) == 0 {
			c.add(pp+".rules", "is empty; want at least a default rule (cond \"default_t()\")")
		}
		for i, r := range p.Rules {
			rp := fmt.Sprintf("%s.rules[%d]", pp, i)
			cond, err := route.Parse(r.Cond)
			switch {
			case err != nil:
				c.add(rp+".cond", "%v", err)
			case i == len(p.Rules)-1 && !cond.IsDefault():
				c.add(rp+".cond", "%q: the last rule must be the default rule \"default_t()\"", clip(r.Cond))
			}
			switch {
			case r.Cluster == "":
				c.add(rp+".cluster", "is empty; want a cluster name")
			case !clusterOK(r.Cluster):
				c.add(rp+".cluster", "cluster %q does not exist", r.Cluster)
			}
		}
	}
	if defaultProduct != "" {
		if _, ok := products[defaultProduct]; !ok {
			c.add("default_product", "product %q does not exist", defaultProduct)
		}
	}
}

func (c *collector) pins(s *config.State) {
	type pair struct{ pc, cl string }
	seen := map[pair]int{}
	for i, pin := range s.Pins {
		p := fmt.Sprintf("pins[%d]", i)
		if _, ok := s.Topology.ProxyClusters[pin.ProxyCluster]; !ok {
			c.add(p+".proxy_cluster", "proxy cluster %q does not exist", pin.ProxyCluster)
		}
		cl, ok := s.Clusters[pin.Cluster]
		if !ok {
			c.add(p+".cluster", "cluster %q does not exist", pin.Cluster)
		}
		k := pair{pin.ProxyCluster, pin.Cluster}
		if j, dup := seen[k]; dup {
			c.add(p, "proxy cluster %q and cluster %q are already pinned by pins[%d]", pin.ProxyCluster, pin.Cluster, j)
		} else {
			seen[k] = i
		}
		var scOK, excluded func(string) bool
		if ok {
			scOK = func(n string) bool { _, ok := cl.SubClusters[n]; return ok }
			excluded = func(n string) bool { return cl.SubClusters[n].Excluded }
		}
		c.row(p+".weights", pin.Weights, config.DefaultDenominator, pin.AllowFullDrop, scOK, excluded)
	}
}

func (c *collector) drains(s *config.State) {
	type pair struct{ cl, sc string }
	seen := map[pair]int{}
	for i, d := range s.Drains {
		p := fmt.Sprintf("drains[%d]", i)
		cl, ok := s.Clusters[d.Cluster]
		if !ok {
			c.add(p+".cluster", "cluster %q does not exist", d.Cluster)
		} else if _, ok := cl.SubClusters[d.SubCluster]; !ok {
			c.add(p+".subcluster", "sub-cluster %q does not exist in cluster %q", d.SubCluster, d.Cluster)
		}
		k := pair{d.Cluster, d.SubCluster}
		if j, dup := seen[k]; dup {
			c.add(p, "cluster %q sub-cluster %q is already drained by drains[%d]", d.Cluster, d.SubCluster, j)
		} else {
			seen[k] = i
		}
	}
}

func (c *collector) scheduler(p string, s config.SchedulerSettings) {
	if s.Denominator != 100 && s.Denominator != 10000 {
		c.add(p+".denominator", "%d is neither 100 nor 10000", s.Denominator)
	}
	c.inRange(p+".max_step_percent", s.MaxStepPercent, 1, 100)
	c.inRange(p+".hysteresis_percent", s.HysteresisPercent, 0, 100)
	c.inRange(p+".target_utilisation_percent", s.TargetUtilisationPercent, 1, 100)
	c.atLeast(p+".capacity_per_weight_rps", s.CapacityPerWeightRPS, 1)
	c.atLeast(p+".default_demand_rps", s.DefaultDemandRPS, 0)
	c.inRange(p+".history", s.History, 1, MaxHistory)
	c.duration(p+".instance_grace", s.InstanceGrace, false, MaxDuration)
}

func clip(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

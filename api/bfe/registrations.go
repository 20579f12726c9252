package bfe

import (
	"fmt"
	"sort"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
)

// WithRegistrations returns a copy of s whose sub-clusters also list the
// agents' registrations (keys.Layout.Instance), merged as the scheduler's
// inventory merges them (config.MergeInstance: a registration replaces the
// static instance at its address), so an export writes the instances the
// proxies are sent. s is not changed. The warnings name each registration of
// a cluster or sub-cluster s does not have (the scheduler ignores those too).
func WithRegistrations(s *config.State, regs []report.Instance) (*config.State, []string) {
	out := *s
	out.Clusters = make(map[string]config.Cluster, len(s.Clusters))
	for cn, c := range s.Clusters {
		subs := make(map[string]config.SubCluster, len(c.SubClusters))
		for sn, sc := range c.SubClusters {
			sc.Instances = append([]config.Instance(nil), sc.Instances...)
			subs[sn] = sc
		}
		c.SubClusters = subs
		out.Clusters[cn] = c
	}
	var warns []string
	for _, r := range regs {
		c, ok := out.Clusters[r.Cluster]
		if !ok {
			warns = append(warns, fmt.Sprintf("registration %s:%d: cluster %s is not in the desired state; not exported", r.Addr, r.Port, r.Cluster))
			continue
		}
		sc, ok := c.SubClusters[r.SubCluster]
		if !ok {
			warns = append(warns, fmt.Sprintf("registration %s:%d: cluster %s has no sub-cluster %s; not exported", r.Addr, r.Port, r.Cluster, r.SubCluster))
			continue
		}
		sc.Instances = config.MergeInstance(sc.Instances, config.Instance{Addr: r.Addr, Port: r.Port, Weight: r.Weight,
			CapacityRPS: r.CapacityRPS, State: r.State, Labels: r.Labels})
		c.SubClusters[r.SubCluster] = sc
	}
	sort.Strings(warns)
	return &out, warns
}

package lbproxy

import (
	"cmp"
	"slices"

	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/proxy/internal/balance"
)

// proxyInstances is the proxy's view of every instance of its table for the
// demand report: health, slow start and in-flight requests, sorted by
// cluster, sub-cluster and address, at most report.MaxReportedInstances
// (truncated says some were left out). A nil table has none.
func proxyInstances(t *balance.Table) (out []report.ProxyInstance, truncated bool) {
	if t == nil {
		return nil, false
	}
	for cname, c := range t.Describe().Clusters {
		for _, sc := range c.SubClusters {
			for _, in := range sc.Instances {
				pi := report.ProxyInstance{Cluster: cname, SubCluster: sc.Name, Addr: in.Addr, Health: in.Health,
					Available: in.Available, Excluded: in.AgentState == "excluded", InFlight: in.InFlight,
					Drained: in.Override != nil && in.Override.Drain}
				if in.SlowStart < 1 {
					pi.SlowStart = max(in.SlowStart, 0.01) // 0 would read as not ramping
				}
				out = append(out, pi)
			}
		}
	}
	slices.SortFunc(out, func(a, b report.ProxyInstance) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.SubCluster, b.SubCluster), cmp.Compare(a.Addr, b.Addr))
	})
	if len(out) > report.MaxReportedInstances {
		return out[:report.MaxReportedInstances], true
	}
	return out, false
}

package lbproxy

import (
	"net/netip"

	"github.com/sluicelb/sluice/proxy/balance"
)

// collectTable walks the live view of a table, one call per instance.
func collectTable(t *balance.Table, f func(cluster, sub string, addr netip.AddrPort, state string, available bool, inflight int64)) {
	for cname, c := range t.Describe().Clusters {
		for _, sc := range c.SubClusters {
			for _, in := range sc.Instances {
				a, err := netip.ParseAddrPort(in.Addr)
				if err != nil {
					continue
				}
				f(cname, sc.Name, a, in.Health, in.Available, in.InFlight)
			}
		}
	}
}

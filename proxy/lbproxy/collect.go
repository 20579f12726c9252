package lbproxy

import (
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelb/sluice/proxy/internal/balance"
	"github.com/sluicelb/sluice/proxy/server"
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

// tableCollector exports per-instance health and in-flight of the applied
// table at scrape time: only addresses in the current table get series.
type tableCollector struct {
	srv      *server.Server
	healthy  *prometheus.Desc
	inflight *prometheus.Desc
}

func newTableCollector(srv *server.Server) *tableCollector {
	return &tableCollector{
		srv: srv,
		healthy: prometheus.NewDesc("sluice_proxy_instance_healthy",
			"1 when the instance is available to the balancer, 0 when ejected, checking or excluded.",
			[]string{"cluster", "subcluster", "instance", "state"}, nil),
		inflight: prometheus.NewDesc("sluice_proxy_instance_inflight",
			"Requests in flight to the instance.", []string{"cluster", "subcluster", "instance"}, nil),
	}
}

func (c *tableCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.healthy
	ch <- c.inflight
}

func (c *tableCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.srv.Table()
	if t == nil {
		return
	}
	collectTable(t, func(cluster, sub string, addr netip.AddrPort, state string, healthy bool, inflight int64) {
		h := 0.0
		if healthy {
			h = 1
		}
		ch <- prometheus.MustNewConstMetric(c.healthy, prometheus.GaugeValue, h, cluster, sub, addr.String(), state)
		ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(inflight), cluster, sub, addr.String())
	})
}

package lbproxy

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelb/sluice/proxy/internal/connlimit"
)

// checkConnLimits checks and defaults the client connection limits.
func (c *Config) checkConnLimits() error {
	if c.MaxClientConns < -1 {
		return fmt.Errorf("lbproxy: max client conns %d: want -1 (no limit), 0 (from the open-file limit) or a positive count", c.MaxClientConns)
	}
	if c.MaxClientConnsPerIP < 0 {
		return fmt.Errorf("lbproxy: max client conns per IP %d: want 0 (no limit) or a positive count", c.MaxClientConnsPerIP)
	}
	if c.MaxClientConns == 0 {
		c.MaxClientConns = -1
		if fds, ok := connlimit.FDLimit(); ok {
			c.MaxClientConns = connlimit.DefaultMax(fds)
		}
	}
	return nil
}

// limitConns makes the limiter of the client listeners and its metrics, and
// warns when the total limit cannot be reached within the open-file limit.
func (p *proxy) limitConns() {
	lim := connlimit.New(connlimit.Options{Max: p.cfg.MaxClientConns, PerIP: p.cfg.MaxClientConnsPerIP, Logger: p.log})
	p.conns = lim
	if fds, ok := connlimit.FDLimit(); ok && lim.Max() > 0 && uint64(lim.Max()) > fds {
		p.log.Warn("--max-client-conns is above the open-file limit (RLIMIT_NOFILE): accepts fail (EMFILE) before it is reached",
			"max_client_conns", lim.Max(), "fd_limit", fds)
	}
	rejected := func(reason string) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "sluice_proxy_client_conns_rejected_total",
			Help:        "Client connections closed right after their accept: max (--max-client-conns reached, none idle) or per_ip (--max-client-conns-per-ip reached).",
			ConstLabels: prometheus.Labels{"reason": reason},
		}, func() float64 { return float64(lim.Rejected(reason)) })
	}
	p.promReg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_proxy_client_conns",
		Help: "Client connections open now (HTTP and HTTPS listeners).",
	}, func() float64 { return float64(lim.Open()) }), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_proxy_client_conns_idle",
		Help: "Client connections open now that wait for a request (the ones --max-client-conns may close, the oldest idle first); 0 without --max-client-conns.",
	}, func() float64 { return float64(lim.IdleConns()) }), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_proxy_client_conns_max",
		Help: "Bound on open client connections (--max-client-conns); 0: none.",
	}, func() float64 { return float64(lim.Max()) }),
		rejected(connlimit.ReasonMax), rejected(connlimit.ReasonPerIP),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_proxy_client_conns_evicted_total",
			Help: "Idle client connections closed, the oldest idle first, to admit a new one at --max-client-conns.",
		}, func() float64 { return float64(lim.Evicted()) }))
}

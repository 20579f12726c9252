package lbagent

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicelb/sluice/api/config"
)

// metrics are the agent's own Prometheus series, in a registry per Agent
// (no globals, so several agents can run in one process).
type metrics struct {
	reg           *prometheus.Registry
	probes        *prometheus.CounterVec
	probeDuration prometheus.Histogram
	state         *prometheus.GaugeVec
	writes        prometheus.Counter
	etcdErrors    *prometheus.CounterVec
	leases        prometheus.Counter
	inFlight      prometheus.Gauge
	rps           prometheus.Gauge
	cpu           prometheus.Gauge
	mem           prometheus.Gauge
	loadErrors    *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_agent_probes_total", Help: "Probes of the backend by result (success, failure).",
		}, []string{"result"}),
		probeDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_agent_probe_duration_seconds", Help: "Duration of one probe.",
			Buckets: []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_agent_state", Help: "1 for the instance's current state (healthy, unhealthy, draining).",
		}, []string{"state"}),
		writes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_agent_etcd_writes_total", Help: "Registration records written to etcd.",
		}),
		etcdErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_agent_etcd_errors_total", Help: "Failed etcd operations by op (grant, keepalive, put, revoke).",
		}, []string{"op"}),
		leases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_agent_lease_grants_total", Help: "Leases granted (1 + re-registrations).",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_agent_backend_in_flight", Help: "Backend in-flight requests (metrics endpoint)."}),
		rps:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_agent_backend_requests_per_second", Help: "Backend request rate (metrics endpoint)."}),
		cpu:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_agent_host_cpu_percent", Help: "Host CPU use in percent (/proc/stat)."}),
		mem:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_agent_host_memory_percent", Help: "Host memory use in percent (/proc/meminfo)."}),
		loadErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_agent_load_errors_total", Help: "Failed load readings by source (backend, host).",
		}, []string{"source"}),
	}
	m.reg.MustRegister(m.probes, m.probeDuration, m.state, m.writes, m.etcdErrors, m.leases,
		m.inFlight, m.rps, m.cpu, m.mem, m.loadErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, r := range []string{"success", "failure"} {
		m.probes.WithLabelValues(r)
	}
	for _, op := range []string{"grant", "keepalive", "put", "revoke"} {
		m.etcdErrors.WithLabelValues(op)
	}
	m.setState("")
	return m
}

func (m *metrics) setState(s string) {
	for _, st := range []string{config.StateHealthy, config.StateUnhealthy, config.StateDraining} {
		v := 0.0
		if st == s {
			v = 1
		}
		m.state.WithLabelValues(st).Set(v)
	}
}

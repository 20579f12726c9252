package lbscheduler

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelb/sluice/scheduler/plan"
)

type metrics struct {
	leader      prometheus.Gauge
	compute     prometheus.Histogram
	utilisation *prometheus.GaugeVec
}

func newMetrics(r prometheus.Registerer) *metrics {
	m := &metrics{
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_scheduler_leader",
			Help: "1 while this scheduler is the elected leader, else 0.",
		}),
		compute: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_scheduler_compute_seconds",
			Help:    "Time to compute the plan for every proxy cluster from the current inputs.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		utilisation: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_scheduler_projected_utilisation_ratio",
			Help: "Projected load / planned capacity per sub-cluster after the current plan (all proxy clusters).",
		}, []string{"cluster", "subcluster"}),
	}
	r.MustRegister(m.leader, m.compute, m.utilisation)
	return m
}

// observe exports the projected utilisation of the plan.
func (s *Scheduler) observe(clusters map[string]plan.ClusterPlan) {
	s.m.utilisation.Reset()
	for cn, c := range clusters {
		for sc, u := range c.Utilisation {
			s.m.utilisation.WithLabelValues(cn, sc).Set(u)
		}
	}
}

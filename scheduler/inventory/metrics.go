package inventory

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	resyncs          *prometheus.CounterVec
	behind           *prometheus.CounterVec
	invalid          *prometheus.CounterVec
	unknownInstances prometheus.Gauge
	debounced        prometheus.Gauge
}

func newMetrics(r prometheus.Registerer) metrics {
	m := metrics{
		resyncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_scheduler_inventory_resyncs_total",
			Help: "Watch restarts (list again) per input, after compaction, closed channels, stalls or errors.",
		}, []string{"input"}),
		behind: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_scheduler_inventory_lagging_member_total",
			Help: "Watch responses per input whose etcd revision went back while a quorum read showed the same store (a member catching up): not resyncs, the watch went on.",
		}, []string{"input"}),
		invalid: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_scheduler_inventory_invalid_total",
			Help: "Input values ignored because they failed decoding or validation, per input.",
		}, []string{"input"}),
		unknownInstances: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_scheduler_inventory_unknown_instances",
			Help: "Agent-registered instances ignored because their cluster or sub-cluster is not in the desired state.",
		}),
		debounced: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_scheduler_inventory_debounced_instances",
			Help: "Instances whose key vanished, kept for the grace period.",
		}),
	}
	if r != nil {
		r.MustRegister(m.resyncs, m.behind, m.invalid, m.unknownInstances, m.debounced)
	}
	return m
}

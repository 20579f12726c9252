package configwatch

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	restarts *prometheus.CounterVec
	applies  *prometheus.CounterVec
	applyDur prometheus.Histogram
	version  prometheus.Gauge
	// lineageChanges counts lineage changes followed.
	lineageChanges prometheus.Counter
}

// newMetrics builds the watcher's collectors and registers them with reg
// (nil: unregistered, still counted).
func newMetrics(reg prometheus.Registerer, w *Watcher) (*metrics, error) {
	m := &metrics{
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_proxy_watch_restarts_total",
			Help: "Snapshot watch restarts by reason (compacted, closed, watch_error, stall, sync_error, store_replaced).",
		}, []string{"reason"}),
		applies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_proxy_snapshot_applies_total",
			Help: "Snapshot pointers handled by result (applied, rejected, unchanged, older, cache_corrupt).",
		}, []string{"result"}),
		applyDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_proxy_snapshot_apply_duration_seconds",
			Help:    "Time spent in Apply (table build and swap), in seconds.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		version: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_proxy_snapshot_version",
			Help: "Version of the applied snapshot (0: none).",
		}),
		lineageChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_proxy_lineage_changes_total",
			Help: "Snapshot lineage changes followed (etcd wiped, replaced or restored): a snapshot of another lineage applied whatever its version.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	staleness := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_proxy_snapshot_staleness_seconds",
		Help: "Seconds since the proxy last heard from etcd while disconnected (0 when in sync).",
	}, func() float64 { return w.Status().StaleSeconds(w.cfg.Now()) })
	for _, c := range []prometheus.Collector{m.restarts, m.applies, m.applyDur, m.version, m.lineageChanges, staleness} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("register metrics: %w (one Watcher per registry)", err)
			}
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}

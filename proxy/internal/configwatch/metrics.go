package configwatch

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// SnapshotMetrics are the sluice_proxy_snapshot_* series, defined once for
// every config source: etcd (this package) and files (proxy/internal/filesource), so
// /metrics reads the same in every mode.
type SnapshotMetrics struct {
	Applies   *prometheus.CounterVec // by result: applied, rejected, unchanged (etcd also older, cache_corrupt)
	ApplyDur  prometheus.Histogram   // seconds in Apply (table build and swap)
	Version   prometheus.Gauge       // the applied snapshot's version (0: none)
	staleness prometheus.Collector
}

// NewSnapshotMetrics builds the series; staleness gives the seconds the
// applied snapshot may lag its source, stalenessHelp says what that means for
// the source.
func NewSnapshotMetrics(stalenessHelp string, staleness func() float64) SnapshotMetrics {
	return SnapshotMetrics{
		Applies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_proxy_snapshot_applies_total",
			Help: "Snapshots handled by result (applied, rejected, unchanged; from etcd also older and cache_corrupt).",
		}, []string{"result"}),
		ApplyDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_proxy_snapshot_apply_duration_seconds",
			Help:    "Time spent in Apply (table build and swap), in seconds.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		Version: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_proxy_snapshot_version",
			Help: "Version of the applied snapshot (0: none).",
		}),
		staleness: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_proxy_snapshot_staleness_seconds",
			Help: stalenessHelp,
		}, staleness),
	}
}

// Collectors lists the series, for registration.
func (m SnapshotMetrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Applies, m.ApplyDur, m.Version, m.staleness}
}

type metrics struct {
	SnapshotMetrics
	restarts *prometheus.CounterVec
	// behind counts responses from a member behind (the watch went on).
	behind prometheus.Counter
	// lineageChanges counts lineage changes followed.
	lineageChanges prometheus.Counter
}

// newMetrics builds the watcher's collectors and registers them with reg
// (nil: unregistered, still counted).
func newMetrics(reg prometheus.Registerer, w *Watcher) (*metrics, error) {
	m := &metrics{
		SnapshotMetrics: NewSnapshotMetrics("Seconds since the proxy last heard from etcd (a listing, watch event, progress notification or idle check), connected or not.",
			func() float64 { return w.Status().StaleSeconds(w.cfg.Now()) }),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_proxy_watch_restarts_total",
			Help: "Snapshot watch restarts by reason (compacted, closed, watch_error, stall, sync_error, store_replaced).",
		}, []string{"reason"}),
		behind: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_proxy_watch_lagging_member_total",
			Help: "Snapshot watch responses whose etcd revision went back while a quorum read showed the same store (a member catching up): not restarts, the watch went on.",
		}),
		lineageChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_proxy_lineage_changes_total",
			Help: "Snapshot lineage changes followed (etcd wiped, replaced or restored): a snapshot of another lineage applied whatever its version.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range append(m.Collectors(), m.restarts, m.behind, m.lineageChanges) {
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

package filesource

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/proxy/configwatch"
)

// SourceFile is the Source of a file's Status.
const SourceFile = "file"

// State is what Run reports about the source, in the etcd watcher's terms
// (configwatch.Status), so /v1/status reads the same in every mode: the
// applied version, hash and time, and the newest reload refused with its
// reason. Safe for concurrent use; the zero value is ready.
type State struct {
	mu sync.Mutex
	st configwatch.Status
}

// Status returns a copy of the current status. A file source is never
// stale: Connected is true.
func (s *State) Status() configwatch.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.Source, st.Connected = SourceFile, true
	return st
}

func (s *State) applied(m snapshot.Meta, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.AppliedVersion, s.st.AppliedHash, s.st.AppliedAt = m.Version, m.Hash, at
	s.st.LatestVersion, s.st.LastSync = max(s.st.LatestVersion, m.Version), at
	if s.st.RejectedVersion <= m.Version {
		s.st.RejectedVersion, s.st.RejectedReason = 0, ""
	}
}

func (s *State) rejected(version uint64, reason string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.RejectedVersion, s.st.RejectedReason, s.st.LastSync = version, reason, at
	s.st.LatestVersion = max(s.st.LatestVersion, version)
}

// snapshotMetrics are etcd mode's sluice_proxy_snapshot_* series, for a
// file source: the same names, help and results (applied, rejected,
// unchanged); staleness is always 0.
type snapshotMetrics struct {
	applies  *prometheus.CounterVec
	applyDur prometheus.Histogram
	version  prometheus.Gauge
	all      []prometheus.Collector
}

func newSnapshotMetrics() *snapshotMetrics {
	m := &snapshotMetrics{
		applies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_proxy_snapshot_applies_total",
			Help: "Snapshots handled by result (applied, rejected, unchanged).",
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
	}
	m.all = []prometheus.Collector{m.applies, m.applyDur, m.version,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_proxy_snapshot_staleness_seconds",
			Help: "Seconds the applied configuration may lag its source (always 0 for a file).",
		}, func() float64 { return 0 })}
	return m
}

// register adds the metrics to reg; the returned func removes them.
func (m *snapshotMetrics) register(reg prometheus.Registerer) (func(), error) {
	var done []prometheus.Collector
	undo := func() {
		for _, c := range done {
			reg.Unregister(c)
		}
	}
	for _, c := range m.all {
		if err := reg.Register(c); err != nil {
			undo()
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("file source: register metrics: %w (one source per registry)", err)
			}
			return nil, fmt.Errorf("file source: register metrics: %w", err)
		}
		done = append(done, c)
	}
	return undo, nil
}

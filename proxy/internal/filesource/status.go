package filesource

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/proxy/internal/configwatch"
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

// newSnapshotMetrics: etcd mode's sluice_proxy_snapshot_* series for a file
// source; staleness is always 0.
func newSnapshotMetrics() *snapshotMetrics {
	return &snapshotMetrics{configwatch.NewSnapshotMetrics(
		"Seconds the applied configuration may lag its source (always 0 for a file).", func() float64 { return 0 })}
}

type snapshotMetrics struct{ configwatch.SnapshotMetrics }

// register adds the metrics to reg; the returned func removes them.
func (m *snapshotMetrics) register(reg prometheus.Registerer) (func(), error) {
	var done []prometheus.Collector
	undo := func() {
		for _, c := range done {
			reg.Unregister(c)
		}
	}
	for _, c := range m.Collectors() {
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

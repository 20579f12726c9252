package configwatch

import (
	"time"

	"github.com/sluicelb/sluice/api/snapshot"
)

// Status is what the watcher has done so far.
type Status struct {
	// AppliedLineage and AppliedVersion identify the applied snapshot
	// ("" lineage: unknown, a snapshot older than lineages).
	AppliedLineage string
	AppliedVersion uint64
	AppliedHash    string
	AppliedAt      time.Time
	Source         string // SourceEtcd or SourceDiskCache
	// RejectedVersion is the newest version refused, with the reason.
	RejectedVersion uint64
	RejectedReason  string
	// LatestVersion is the newest pointer seen in the applied lineage.
	LatestVersion uint64
	// PointerLineage and PointerVersion are what the pointer named for this
	// proxy when last read (during a staged rollout: the candidate when the
	// stage selects the proxy, else the stable version).
	PointerLineage string
	PointerVersion uint64
	// Rollout and Stage name the staged rollout the pointer carried when
	// last read ("": none); InStage: its stage selects this proxy.
	Rollout string
	Stage   int
	InStage bool
	// Ahead: the pointer names an older version of the applied lineage (it
	// was moved back); the newer applied snapshot stays (I1).
	Ahead bool
	// LineageChanges counts the lineage changes followed; PreviousLineage is
	// the lineage left last.
	LineageChanges  uint64
	PreviousLineage string
	// Connected: the last etcd operation succeeded.
	Connected bool
	// LastSync is the last successful list, watch event or progress notification.
	LastSync time.Time
	// WatchRestarts counts restarts by reason.
	WatchRestarts map[string]uint64
	// PartsRead counts the snapshot parts read from etcd; parts the applied
	// snapshot shares with the next one are not read again.
	PartsRead uint64
	// SnapshotReads counts the etcd requests snapshot fetches made
	// (manifest gets, part transactions); ManifestsPushed the fetches whose
	// manifest came with the pointer (snapshot.Push) instead. A proxy that
	// ran the parent version makes none for a change the push carries whole.
	SnapshotReads   uint64
	ManifestsPushed uint64
	// WatchBehind counts watch responses whose revision went back while a
	// quorum read showed the same store (a member catching up): not
	// restarts, the watch went on (api/etcdwatch ReasonLaggingMember).
	WatchBehind uint64
}

// StaleSeconds is how long the applied configuration may lag etcd: the
// time since the proxy last heard from etcd that its view of the pointer was
// complete (LastSync: a listing, a watch event, a progress notification, or
// a read showing nothing newer than the watch had), connected or not — a
// watch that silently stopped delivering is "connected" until the stall
// timeout ends its round, and its staleness grows all the while. Before etcd
// was ever reached it is the time since the (cached) snapshot was applied;
// 0 with nothing at all.
func (s Status) StaleSeconds(now time.Time) float64 {
	switch {
	case !s.LastSync.IsZero():
		return max(0, now.Sub(s.LastSync).Seconds())
	case !s.AppliedAt.IsZero():
		return max(0, now.Sub(s.AppliedAt).Seconds())
	}
	return 0
}

// Status returns a copy of the current status.
func (w *Watcher) Status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.st
	s.PartsRead = w.partsRead.Load()
	s.SnapshotReads = w.snapshotReads.Load()
	s.ManifestsPushed = w.manifestsPushed.Load()
	s.WatchRestarts = make(map[string]uint64, len(w.st.WatchRestarts))
	for k, v := range w.st.WatchRestarts {
		s.WatchRestarts[k] = v
	}
	return s
}

func (w *Watcher) reject(p snapshot.Pointer, reason string) {
	w.mu.Lock()
	w.st.RejectedVersion, w.st.RejectedReason, w.rejected = p.Version, reason, p
	w.mu.Unlock()
	w.m.Applies.WithLabelValues("rejected").Inc()
	w.log.Error("snapshot rejected; keeping the last good one", "lineage", p.Lineage, "version", p.Version, "reason", reason)
	w.changed()
}

func (w *Watcher) changed() {
	if w.cfg.OnChange != nil {
		w.cfg.OnChange()
	}
}

func (w *Watcher) setSynced() {
	w.mu.Lock()
	flipped := !w.st.Connected
	w.st.Connected, w.st.LastSync = true, w.cfg.Now()
	w.mu.Unlock()
	if flipped {
		w.changed()
	}
}

func (w *Watcher) setDisconnected() {
	w.mu.Lock()
	flipped := w.st.Connected
	w.st.Connected = false
	w.mu.Unlock()
	if flipped {
		w.changed()
	}
}

func (w *Watcher) countRestart(reason string) {
	w.mu.Lock()
	w.st.WatchRestarts[reason]++
	w.mu.Unlock()
	w.m.restarts.WithLabelValues(reason).Inc()
}

func (w *Watcher) countBehind() {
	w.mu.Lock()
	w.st.WatchBehind++
	w.mu.Unlock()
	w.m.behind.Inc()
}

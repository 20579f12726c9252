package configwatch

import (
	"github.com/sluicelb/sluice/api/snapshot"
)

// A snapshot's identity is (lineage, version): versions compare only within
// a lineage. Within the applied lineage an older version is never applied
// (I1) — the proxy reports itself Ahead of a pointer moved back, until a
// version above its own is published. A pointer of another lineage (a wiped
// or replaced etcd whose scheduler minted a new lineage) is applied whatever
// its version: the history the proxy's versions belong to is gone.

// verdict is what to do with a pointer.
type verdict int

const (
	verdictApply        verdict = iota // fetch and apply
	verdictUnchanged                   // the applied snapshot
	verdictOlder                       // an older version of the applied lineage: refused (I1)
	verdictHashConflict                // the applied version with another hash: rejected
	verdictRejected                    // already rejected: not fetched again
)

// judge decides about pointer p given the applied snapshot.
func judge(appliedLineage string, applied uint64, appliedHash string, p snapshot.Pointer) verdict {
	switch {
	case applied == 0 || p.Lineage != appliedLineage:
		return verdictApply
	case p.Version < applied:
		return verdictOlder
	case p.Version == applied && p.Hash == appliedHash:
		return verdictUnchanged
	case p.Version == applied:
		return verdictHashConflict
	}
	return verdictApply
}

func pointerOf(s *snapshot.Snapshot) snapshot.Pointer {
	return snapshot.Pointer{Lineage: s.Meta.Lineage, Version: s.Meta.Version, Hash: s.Meta.Hash}
}

// notePointer records what the pointer names and judges it.
func (w *Watcher) notePointer(p snapshot.Pointer) verdict {
	w.mu.Lock()
	st := &w.st
	st.PointerLineage, st.PointerVersion = p.Lineage, p.Version
	v := judge(st.AppliedLineage, st.AppliedVersion, st.AppliedHash, p)
	if p.Lineage == st.AppliedLineage {
		st.LatestVersion = max(st.LatestVersion, p.Version)
	}
	flipped := st.Ahead != (v == verdictOlder)
	st.Ahead = v == verdictOlder
	if v == verdictApply && p == w.rejected {
		v = verdictRejected
	}
	// An older pointer is logged once per move, not on every resync.
	logOlder := v == verdictOlder && p != w.aheadLog
	w.aheadLog = snapshot.Pointer{}
	if v == verdictOlder {
		w.aheadLog = p
	}
	applied := st.AppliedVersion
	w.mu.Unlock()
	if v == verdictOlder {
		w.m.Applies.WithLabelValues("older").Inc()
	}
	if logOlder {
		w.log.Warn("pointer names an older version of the applied lineage (moved back?); keeping the applied snapshot until a newer one is published",
			"lineage", snapshot.LineageName(p.Lineage), "pointer_version", p.Version, "applied_version", applied)
	}
	if flipped {
		w.changed()
	}
	return v
}

// notePointerGone records that the pointer names nothing (deleted, or
// absent from a store listed again): the status no longer reports what a
// pointer that is gone named, nor a proxy ahead of it or in its stage.
func (w *Watcher) notePointerGone() {
	w.mu.Lock()
	st := &w.st
	changed := st.PointerLineage != "" || st.PointerVersion != 0 || st.Ahead || st.Rollout != "" || st.Stage != 0 || st.InStage
	st.PointerLineage, st.PointerVersion, st.Ahead = "", 0, false
	st.Rollout, st.Stage, st.InStage = "", 0, false
	w.aheadLog = snapshot.Pointer{}
	w.mu.Unlock()
	if changed {
		w.changed()
	}
}

// noteStage records the staged rollout the pointer carries (if any) and
// whether its stage selects this proxy.
func (w *Watcher) noteStage(p snapshot.Pointer) {
	w.mu.Lock()
	st := &w.st
	was := [3]any{st.Rollout, st.Stage, st.InStage}
	st.Rollout, st.Stage, st.InStage = "", 0, false
	if c := p.Candidate; c != nil {
		st.Rollout, st.Stage, st.InStage = c.Rollout, c.Stage, c.Selects(w.cfg.ID)
	}
	changed := was != [3]any{st.Rollout, st.Stage, st.InStage}
	in := st.InStage
	w.mu.Unlock()
	if changed && p.Candidate != nil {
		w.log.Info("staged rollout", "rollout", p.Candidate.Rollout, "stage", p.Candidate.Stage, "in_stage", in,
			"stable_version", p.Version, "candidate_version", p.Candidate.Version)
	}
	if changed {
		w.changed() // the status report says it soon, not an interval later
	}
}

// recordApplied records s as applied; a change of lineage is logged once at
// warn level and counted.
func (w *Watcher) recordApplied(s *snapshot.Snapshot, source string) {
	w.mu.Lock()
	st := &w.st
	from, fromVersion := st.AppliedLineage, st.AppliedVersion
	newLineage := fromVersion > 0 && s.Meta.Lineage != from
	st.AppliedLineage, st.AppliedVersion, st.AppliedHash = s.Meta.Lineage, s.Meta.Version, s.Meta.Hash
	st.AppliedAt, st.Source = w.cfg.Now(), source
	if newLineage {
		st.LineageChanges++
		st.PreviousLineage = from
		st.LatestVersion = s.Meta.Version
	} else {
		st.LatestVersion = max(st.LatestVersion, s.Meta.Version)
	}
	if w.rejected.Lineage != s.Meta.Lineage || st.RejectedVersion <= s.Meta.Version {
		st.RejectedVersion, st.RejectedReason, w.rejected = 0, "", snapshot.Pointer{}
	}
	st.Ahead = st.PointerVersion != 0 && st.PointerLineage == s.Meta.Lineage && st.PointerVersion < s.Meta.Version
	w.mu.Unlock()
	if newLineage {
		w.m.lineageChanges.Inc()
		w.log.Warn("following a new snapshot lineage (etcd wiped, replaced or restored): its versions do not compare with the old ones",
			"from_lineage", snapshot.LineageName(from), "from_version", fromVersion,
			"to_lineage", snapshot.LineageName(s.Meta.Lineage), "to_version", s.Meta.Version, "source", source)
	}
}

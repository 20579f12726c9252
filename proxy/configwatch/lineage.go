package configwatch

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

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
		w.m.applies.WithLabelValues("older").Inc()
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

// storeIdentity is which etcd a session listed: its cluster id, the value
// of its lineage key ("" none yet), and the highest revision seen from it
// since. A fresh etcd on the same address and configuration has the same
// cluster id, the same revisions for the same first writes, and may pass
// the old revision within seconds; its lineage record (absent, then minted
// anew with another id) is what tells it apart.
type storeIdentity struct {
	cluster uint64
	lineage atomic.Pointer[string] // lineage id; nil or "": none known yet
	seen    atomic.Int64
}

// knownLineage is the store's lineage id as far as the session knows.
func (id *storeIdentity) knownLineage() string {
	if p := id.lineage.Load(); p != nil {
		return *p
	}
	return ""
}

// learnLineage records the store's lineage id if none is known yet: from
// the listing, the first check, or an applied pointer (a proxy that listed
// before the first lineage was minted).
func (id *storeIdentity) learnLineage(lineage string) {
	if lineage != "" {
		id.lineage.CompareAndSwap(nil, &lineage)
	}
}

// replacedBy tells whether a response header comes from another store than
// the listed one: another cluster id, or a revision below one already seen
// (revisions never go back in one store).
func (id *storeIdentity) replacedBy(cluster uint64, rev int64) bool {
	return cluster != 0 && cluster != id.cluster || rev < id.seen.Load()
}

// lineageGone tells whether the listed lineage record is no longer there
// or is another one.
func (id *storeIdentity) lineageGone(kvs []*mvccpb.KeyValue) bool {
	known := id.knownLineage()
	return known != "" && lineageOf(kvs) != known
}

// lineageOf is the id of the lineage record in kvs ("" if none or unreadable).
func lineageOf(kvs []*mvccpb.KeyValue) string {
	if len(kvs) == 0 {
		return ""
	}
	var rec snapshot.LineageRecord
	if json.Unmarshal(kvs[0].Value, &rec) != nil {
		return ""
	}
	return rec.ID
}

// watchStore checks every StoreCheckInterval that etcd behind the endpoints
// is still the store the session listed, and closes replaced when it is not.
// A watch resumed on a wiped or restored etcd waits quietly for revisions
// the new store may reach much later, or never; etcd does not even answer
// progress requests for it. Only this check notices.
func (w *Watcher) watchStore(ctx context.Context, id *storeIdentity, replaced chan<- struct{}) {
	t := time.NewTicker(w.cfg.StoreCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		octx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
		resp, err := w.cfg.Client.Get(octx, w.lineageKey)
		cancel()
		if err != nil {
			continue // unreachable: the watch's own error handling applies
		}
		if id.replacedBy(resp.Header.ClusterId, resp.Header.Revision) || id.lineageGone(resp.Kvs) {
			w.log.Warn("etcd behind the endpoints is not the store listed (wiped, replaced or restored); resyncing",
				"listed_cluster_id", id.cluster, "cluster_id", resp.Header.ClusterId,
				"seen_revision", id.seen.Load(), "revision", resp.Header.Revision,
				"listed_lineage", id.knownLineage(), "lineage", lineageOf(resp.Kvs))
			close(replaced)
			return
		}
		id.raise(resp.Header.Revision)
		id.learnLineage(lineageOf(resp.Kvs))
	}
}

// raise records rev as seen.
func (id *storeIdentity) raise(rev int64) {
	for {
		cur := id.seen.Load()
		if rev <= cur || id.seen.CompareAndSwap(cur, rev) {
			return
		}
	}
}

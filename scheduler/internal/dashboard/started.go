package dashboard

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/rollout"
)

// startedAt is when one live version of a proxy cluster was published.
type startedAt struct {
	lineage string
	version uint64
	at      time.Time // zero: unknown (not in the kept history)
}

// recordsLocked is what the rollout verdict is computed from (d.mu held).
func (d *Dashboard) recordsLocked() records {
	rec := records{sts: d.sts, seen: d.seen, sched: d.sched, staged: d.staged, started: map[string]time.Time{}}
	for pc, s := range d.started {
		if p := d.ptrs[pc]; !s.at.IsZero() && p.Version == s.version && p.Lineage == s.lineage {
			rec.started[pc] = s.at
		}
	}
	return rec
}

// learnStarted reads, for each proxy cluster with a GONE proxy, when its
// live version was published (the manifest's creation time, as lbctl rollout
// status does), so that a proxy gone before the rollout is not counted.
// Each live version is looked up once; the reads are bounded by ctx and 2 s.
func (d *Dashboard) learnStarted(ctx context.Context) {
	if d.o.Snapshots == nil {
		return
	}
	d.mu.Lock()
	need := map[string]startedAt{}
	gone := rollout.GoneRecords(slices.Collect(maps.Values(d.sts)), slices.Collect(maps.Values(d.seen)), d.o.Now())
	for _, st := range gone {
		p := d.ptrs[st.ProxyCluster]
		if s := d.started[st.ProxyCluster]; p.Version != 0 && (s.version != p.Version || s.lineage != p.Lineage) {
			need[st.ProxyCluster] = startedAt{lineage: p.Lineage, version: p.Version}
		}
	}
	d.mu.Unlock()
	for pc, s := range need {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		h, err := d.o.Snapshots.History(cctx, pc)
		cancel()
		if err != nil {
			d.o.Logger.Warn("dashboard: version history unreadable; GONE proxies of this proxy cluster all count", "proxy_cluster", pc, "err", err)
		}
		for _, m := range h {
			if m.Version == s.version && (m.Lineage == s.lineage || m.Lineage == "") {
				s.at = m.CreatedAt
			}
		}
		d.mu.Lock()
		d.started[pc] = s
		d.mu.Unlock()
	}
}

// nextFlip is how long until a state changes by the clock alone (a live
// status turns STALE, a last-seen record leaves the GONE list), at most max.
func nextFlip(rec records, now time.Time, max time.Duration) time.Duration {
	wait := max
	at := func(t time.Time) {
		// The states flip once the age is past the limit: just after t.
		if d := t.Sub(now) + 10*time.Millisecond; d > 0 && d < wait {
			wait = d
		}
	}
	for _, st := range rec.sts {
		if !st.UpdatedAt.IsZero() {
			at(st.UpdatedAt.Add(st.StaleAfter()))
		}
	}
	for _, st := range rec.seen {
		at(st.UpdatedAt.Add(report.GoneFor))
	}
	return wait
}

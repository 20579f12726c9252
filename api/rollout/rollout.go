// Package rollout is the one place a proxy's rollout state is decided:
// lbctl rollout status, lbctl proxies and the scheduler's dashboard all
// feed it the same records (live proxy statuses, last-seen records, the
// pointers, the scheduler's status and the time) and show what it returns,
// so they always agree. It is pure: no I/O, no clock of its own.
package rollout

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/snapshot"
)

// Proxy rollout states.
const (
	Synced   = "SYNCED"
	Pending  = "PENDING"
	Rejected = "REJECTED"
	// Stale: the status key lives (its lease is kept alive) but was not
	// rewritten for two report intervals, or the proxy lost etcd.
	Stale = "STALE"
	// Gone: the proxy's status lease expired; it is listed from its
	// last-seen record for report.GoneFor, and counts as not converged for
	// a rollout that started before it went away.
	Gone = "GONE"
	// Ahead: the proxy applied a newer version of the target's lineage
	// than the pointer names (the pointer was moved back by hand or
	// restored); it keeps it (I1) until a version above it is published.
	Ahead = "AHEAD"
	// Waiting (a proxy cluster): the scheduler has not published the input
	// revision asked for yet.
	Waiting = "WAITING"
	// Blocked (a proxy cluster): its newest input was not published.
	Blocked = "BLOCKED"
)

// NoLeader is what is shown when no scheduler holds leadership.
const NoLeader = "no scheduler is leading: nothing new will be published until one is (is lbscheduler running?)"

// Target is what a proxy cluster's proxies should run: the pointer's
// lineage and version (AtLeast: that version or a later one of the
// lineage, as lbctl rollout status --version and --revision ask).
type Target struct {
	snapshot.Pointer
	AtLeast bool
}

// Input is everything a rollout verdict is computed from.
type Input struct {
	// Statuses are the live status records (status/<pc>/<id>).
	Statuses []report.ProxyStatus
	// LastSeen are the last-seen records (last-seen/<pc>/<id>); those of
	// live proxies and those older than report.GoneFor are ignored.
	LastSeen []report.ProxyStatus
	// Targets per proxy cluster (normally the live pointers).
	Targets map[string]Target
	// Started is when each proxy cluster's target was published (its
	// manifest's creation time); a GONE proxy last seen before it is not
	// counted. Optional: without an entry every GONE proxy counts.
	Started map[string]time.Time
	// Scheduler is the leader's status (nil: no scheduler is leading).
	Scheduler *report.SchedulerStatus
	// ProxyCluster, when set, limits the blocked proxy clusters to it.
	ProxyCluster string
	Now          time.Time
}

// Proxy is one proxy's rollout state.
type Proxy struct {
	ProxyCluster string    `json:"proxy_cluster"`
	ID           string    `json:"id"`
	State        string    `json:"state"`
	Applied      uint64    `json:"applied_version"`
	Target       uint64    `json:"target_version"`
	Lineage      string    `json:"applied_lineage,omitempty"`
	Reason       string    `json:"reason,omitempty"`
	Since        time.Time `json:"since,omitzero"`
	// NotCounted: a GONE proxy that went away before the target was
	// published does not hold the rollout back.
	NotCounted bool `json:"not_counted,omitempty"`
}

// Counts reports whether p holds a rollout back.
func (p Proxy) Counts() bool { return p.State != Synced && !p.NotCounted }

// Result is the rollout verdict.
type Result struct {
	// Proxies: the live ones sorted by proxy cluster and id, then the
	// GONE ones, sorted the same way.
	Proxies []Proxy
	// Blocked names each proxy cluster whose newest input the scheduler
	// could not publish, with the reason.
	Blocked map[string]string
	// NoLeader: no scheduler holds leadership (nothing new is published).
	NoLeader bool
	// Converged: at least one live proxy, none blocked, and every proxy
	// that counts is SYNCED.
	Converged bool
}

// Compute decides every proxy's state, the blocked proxy clusters and
// whether the rollout converged.
func Compute(in Input) Result {
	var r Result
	live := sortedCopy(in.Statuses)
	for _, st := range live {
		r.Proxies = append(r.Proxies, Classify(st, in.Targets[st.ProxyCluster], in.Now))
	}
	for _, st := range GoneRecords(live, in.LastSeen, in.Now) {
		tg := in.Targets[st.ProxyCluster]
		p := Proxy{ProxyCluster: st.ProxyCluster, ID: st.ID, State: Gone, Applied: st.AppliedVersion,
			Target: tg.Version, Lineage: st.AppliedLineage, Since: st.UpdatedAt,
			Reason: "status lease expired; last seen " + SeenAt(st.UpdatedAt, in.Now)}
		if t, ok := in.Started[st.ProxyCluster]; ok && st.UpdatedAt.Before(t) {
			p.NotCounted = true
			p.Reason += ", before this rollout: not counted"
		}
		r.Proxies = append(r.Proxies, p)
	}
	r.NoLeader = in.Scheduler == nil
	if in.Scheduler != nil {
		for name, res := range in.Scheduler.ProxyClusters {
			if in.ProxyCluster != "" && name != in.ProxyCluster {
				continue
			}
			if blocked, why := res.Blocked(); blocked {
				if r.Blocked == nil {
					r.Blocked = map[string]string{}
				}
				r.Blocked[name] = fmt.Sprintf("input revision %d not published: %s", res.InputRevision, why)
			}
		}
	}
	r.Converged = len(live) > 0 && len(r.Blocked) == 0
	for _, p := range r.Proxies {
		if p.Counts() {
			r.Converged = false
		}
	}
	return r
}

// Classify decides one live proxy's rollout state.
func Classify(st report.ProxyStatus, tg Target, now time.Time) Proxy {
	if tg.Candidate != nil && !tg.AtLeast {
		// A staged rollout: the proxy's target is what its stage runs.
		tg.Pointer = tg.Pointer.For(st.ID)
	}
	target := tg.Version
	p := Proxy{ProxyCluster: st.ProxyCluster, ID: st.ID, Applied: st.AppliedVersion, Target: target, Lineage: st.AppliedLineage}
	sameLineage := st.AppliedLineage == tg.Lineage
	switch {
	case StaleReason(st, now) != "":
		p.State, p.Since, p.Reason = Stale, st.UpdatedAt, StaleReason(st, now)
	case target == 0:
		p.State = Pending
	case !sameLineage:
		p.State = Pending
		p.Reason = fmt.Sprintf("applied lineage %s, target lineage %s", snapshot.LineageName(st.AppliedLineage), snapshot.LineageName(tg.Lineage))
		if st.PointerLineage == tg.Lineage && st.RejectedVersion >= target {
			p.State, p.Reason = Rejected, st.RejectedReason
		}
	case st.AppliedVersion == target && tg.Hash != "" && st.AppliedHash != "" && st.AppliedHash != tg.Hash:
		// The target's version number with other content (a scheduler
		// behind a restored etcd numbered a new snapshot like one the
		// proxy had applied): the proxy refuses it as a hash conflict and
		// runs what it had, which is not the target.
		p.State = Pending
		p.Reason = fmt.Sprintf("applied v%d of lineage %s has hash %s, the target hash %s", st.AppliedVersion,
			snapshot.LineageName(tg.Lineage), st.AppliedHash, tg.Hash)
		if st.RejectedVersion >= target {
			p.State, p.Reason = Rejected, st.RejectedReason
		}
	case st.AppliedVersion == target || st.AppliedVersion > target && tg.AtLeast:
		p.State = Synced
	case st.AppliedVersion > target:
		p.State = Ahead
		p.Reason = fmt.Sprintf("ahead of the pointer: applied v%d of lineage %s, the pointer names v%d (moved back?); it keeps v%d until a later version is published",
			st.AppliedVersion, snapshot.LineageName(tg.Lineage), target, st.AppliedVersion)
	case st.RejectedVersion >= target:
		p.State, p.Reason = Rejected, st.RejectedReason
	default:
		p.State = Pending
	}
	return p
}

// StaleReason says why a live status is STALE ("" if it is not).
func StaleReason(st report.ProxyStatus, now time.Time) string {
	switch {
	case !st.EtcdConnected:
		return "not connected to etcd"
	case !st.UpdatedAt.IsZero() && now.Sub(st.UpdatedAt) > st.StaleAfter():
		return "last seen " + SeenAt(st.UpdatedAt, now)
	}
	return ""
}

// SeenAt formats a last-seen time: "2026-12-01T09:30:00Z (12s ago)".
func SeenAt(t, now time.Time) string {
	return fmt.Sprintf("%s (%s ago)", t.UTC().Format(time.RFC3339), now.Sub(t).Round(time.Second))
}

// GoneRecords returns the last-seen records of proxies that have no live
// status and were seen within report.GoneFor, sorted by proxy cluster and id.
func GoneRecords(live, seen []report.ProxyStatus, now time.Time) []report.ProxyStatus {
	alive := map[string]bool{}
	for _, st := range live {
		alive[st.ProxyCluster+"/"+st.ID] = true
	}
	return slices.DeleteFunc(sortedCopy(seen), func(st report.ProxyStatus) bool {
		return alive[st.ProxyCluster+"/"+st.ID] || now.Sub(st.UpdatedAt) >= report.GoneFor
	})
}

// ForRevision turns targets into what the scheduler published for input
// revision rev or later, per proxy cluster: its last publish result, if it
// was computed from rev or later (a result "unchanged" means the live
// snapshot is what rev computes to). It returns the proxy clusters it has
// not published rev for yet (WAITING, with why), and final when waiting
// longer cannot help (a failed publish of rev or later: a later write is
// needed; the BLOCKED line says why).
func ForRevision(rev int64, sched *report.SchedulerStatus, targets map[string]Target) (waiting map[string]string, final bool) {
	waiting = map[string]string{}
	for pc := range targets {
		if sched == nil {
			waiting[pc] = "no scheduler is leading"
			continue
		}
		res, ok := sched.ProxyClusters[pc]
		switch {
		case !ok || res.InputRevision < rev:
			waiting[pc] = fmt.Sprintf("the scheduler has not published input revision %d yet (it last computed %d)", rev, res.InputRevision)
		case res.Result == report.PublishFailed || res.Result == report.PublishRolledBack:
			final = true
			fallthrough
		case res.Result == report.PublishFenced:
			waiting[pc] = fmt.Sprintf("input revision %d was not published", res.InputRevision)
		case res.Result == report.PublishRetrying:
			waiting[pc] = fmt.Sprintf("the scheduler is retrying the publish of input revision %d (last try: %s)", res.InputRevision, res.Reason)
		default:
			targets[pc] = Target{Pointer: snapshot.Pointer{Lineage: res.Lineage, Version: res.Version}, AtLeast: true}
		}
	}
	return waiting, final
}

// Laggards lists, sorted, what holds the rollout back: each blocked and
// waiting proxy cluster, then each proxy that counts and is not SYNCED, as
// "pc BLOCKED (why)", "pc WAITING (why)", "pc/id STATE (reason)".
func (r Result) Laggards(waiting map[string]string) []string {
	var lag []string
	for _, name := range slices.Sorted(maps.Keys(r.Blocked)) {
		lag = append(lag, fmt.Sprintf("%s %s (%s)", name, Blocked, r.Blocked[name]))
	}
	for _, name := range slices.Sorted(maps.Keys(waiting)) {
		lag = append(lag, fmt.Sprintf("%s %s (%s)", name, Waiting, waiting[name]))
	}
	for _, p := range r.Proxies {
		if p.Counts() {
			s := p.ProxyCluster + "/" + p.ID + " " + p.State
			if p.Reason != "" {
				s += " (" + p.Reason + ")"
			}
			lag = append(lag, s)
		}
	}
	return lag
}

func sortedCopy(sts []report.ProxyStatus) []report.ProxyStatus {
	out := slices.Clone(sts)
	slices.SortStableFunc(out, func(a, b report.ProxyStatus) int {
		if c := strings.Compare(a.ProxyCluster, b.ProxyCluster); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

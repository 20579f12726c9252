package rollout

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/snapshot"
)

var now = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func st(id string, lineage string, v uint64, mod func(*report.ProxyStatus)) report.ProxyStatus {
	s := report.ProxyStatus{ProxyCluster: "BFE1", ID: id, AppliedLineage: lineage, AppliedVersion: v, EtcdConnected: true,
		UpdatedAt: now.Add(-time.Second), ReportIntervalSeconds: 5}
	if mod != nil {
		mod(&s)
	}
	return s
}

func TestClassify(t *testing.T) {
	tg := Target{Pointer: snapshot.Pointer{Lineage: "L1", Version: 7}}
	for _, c := range []struct {
		name   string
		st     report.ProxyStatus
		tg     Target
		state  string
		reason string // substring
	}{
		{"synced", st("p1", "L1", 7, nil), tg, Synced, ""},
		{"pending behind", st("p1", "L1", 6, nil), tg, Pending, ""},
		{"pending no target", st("p1", "L1", 6, nil), Target{}, Pending, ""},
		{"rejected", st("p1", "L1", 6, func(s *report.ProxyStatus) { s.RejectedVersion, s.RejectedReason = 7, "bad row" }), tg, Rejected, "bad row"},
		{"rejected older only is pending", st("p1", "L1", 5, func(s *report.ProxyStatus) { s.RejectedVersion = 6 }), tg, Pending, ""},
		{"ahead", st("p1", "L1", 9, nil), tg, Ahead, "ahead of the pointer: applied v9"},
		{"at least counts later", st("p1", "L1", 9, nil), Target{Pointer: tg.Pointer, AtLeast: true}, Synced, ""},
		{"other lineage", st("p1", "L0", 15, nil), tg, Pending, "applied lineage"},
		{"other lineage rejected", st("p1", "L0", 15, func(s *report.ProxyStatus) {
			s.PointerLineage, s.RejectedVersion, s.RejectedReason = "L1", 7, "refused"
		}), tg, Rejected, "refused"},
		{"stale by age", st("p1", "L1", 7, func(s *report.ProxyStatus) { s.UpdatedAt = now.Add(-11 * time.Second) }), tg, Stale, "last seen 2026-12-01T09:59:49Z (11s ago)"},
		{"fresh within two intervals", st("p1", "L1", 7, func(s *report.ProxyStatus) { s.UpdatedAt = now.Add(-9 * time.Second) }), tg, Synced, ""},
		// The target's version with other content (a restored etcd's
		// scheduler re-used the number): not SYNCED, whatever the version.
		{"same version, other hash", st("p1", "L1", 7, func(s *report.ProxyStatus) { s.AppliedHash = "h-old" }),
			Target{Pointer: snapshot.Pointer{Lineage: "L1", Version: 7, Hash: "h-new"}}, Pending,
			"applied v7 of lineage L1 has hash h-old, the target hash h-new"},
		{"same version, other hash, refused", st("p1", "L1", 7, func(s *report.ProxyStatus) {
			s.AppliedHash, s.RejectedVersion, s.RejectedReason = "h-old", 7, "version 7 of lineage L1 is already applied with hash h-old; pointer says hash h-new"
		}), Target{Pointer: snapshot.Pointer{Lineage: "L1", Version: 7, Hash: "h-new"}}, Rejected,
			"version 7 of lineage L1 is already applied with hash h-old; pointer says hash h-new"},
		{"same version, same hash", st("p1", "L1", 7, func(s *report.ProxyStatus) { s.AppliedHash = "h7" }),
			Target{Pointer: snapshot.Pointer{Lineage: "L1", Version: 7, Hash: "h7"}}, Synced, ""},
		{"hash unknown to an older proxy", st("p1", "L1", 7, nil),
			Target{Pointer: snapshot.Pointer{Lineage: "L1", Version: 7, Hash: "h7"}}, Synced, ""},
		{"stale disconnected", st("p1", "L1", 7, func(s *report.ProxyStatus) { s.EtcdConnected = false }), tg, Stale, "not connected to etcd"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := Classify(c.st, c.tg, now)
			if p.State != c.state || !strings.Contains(p.Reason, c.reason) || (c.reason == "" && p.Reason != "") {
				t.Fatalf("Classify = %s (%q), want %s (%q)", p.State, p.Reason, c.state, c.reason)
			}
		})
	}
}

func TestCompute(t *testing.T) {
	ptr := map[string]Target{"BFE1": {Pointer: snapshot.Pointer{Lineage: "L1", Version: 7}}}
	leader := &report.SchedulerStatus{LeaderID: "s1", ProxyClusters: map[string]report.PublishResult{
		"BFE1": {Result: report.PublishPublished, Lineage: "L1", Version: 7, InputRevision: 40}}}
	goneRec := st("p9", "L1", 6, func(s *report.ProxyStatus) { s.UpdatedAt = now.Add(-time.Minute) })
	for _, c := range []struct {
		name      string
		in        Input
		states    string // "id=STATE,…" in order
		blocked   string
		converged bool
		noLeader  bool
	}{
		{name: "converged", in: Input{Statuses: []report.ProxyStatus{st("p2", "L1", 7, nil), st("p1", "L1", 7, nil)}, Targets: ptr, Scheduler: leader},
			states: "p1=SYNCED,p2=SYNCED", converged: true},
		{name: "no live proxy", in: Input{Targets: ptr, Scheduler: leader}, states: ""},
		{name: "no leader", in: Input{Statuses: []report.ProxyStatus{st("p1", "L1", 7, nil)}, Targets: ptr},
			states: "p1=SYNCED", converged: true, noLeader: true},
		{name: "gone counts", in: Input{Statuses: []report.ProxyStatus{st("p1", "L1", 7, nil)}, LastSeen: []report.ProxyStatus{goneRec, st("p1", "L1", 7, nil)}, Targets: ptr, Scheduler: leader},
			states: "p1=SYNCED,p9=GONE"},
		{name: "gone before the rollout not counted", in: Input{Statuses: []report.ProxyStatus{st("p1", "L1", 7, nil)}, LastSeen: []report.ProxyStatus{goneRec},
			Targets: ptr, Started: map[string]time.Time{"BFE1": now.Add(-30 * time.Second)}, Scheduler: leader},
			states: "p1=SYNCED,p9=GONE", converged: true},
		{name: "gone too long ago dropped", in: Input{Statuses: []report.ProxyStatus{st("p1", "L1", 7, nil)},
			LastSeen: []report.ProxyStatus{st("p9", "L1", 6, func(s *report.ProxyStatus) { s.UpdatedAt = now.Add(-report.GoneFor) })}, Targets: ptr, Scheduler: leader},
			states: "p1=SYNCED", converged: true},
		{name: "blocked", in: Input{Statuses: []report.ProxyStatus{st("p1", "L1", 7, nil)}, Targets: ptr, Scheduler: &report.SchedulerStatus{ProxyClusters: map[string]report.PublishResult{
			"BFE1": {Result: report.PublishFailed, InputRevision: 41, Reason: "row BFE1/demo-main would drop 100%"}, "BFE2": {Result: report.PublishFenced}}}, ProxyCluster: "BFE1"},
			states: "p1=SYNCED", blocked: "BFE1=input revision 41 not published: row BFE1/demo-main would drop 100%"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.in.Now = now
			r := Compute(c.in)
			var got []string
			for _, p := range r.Proxies {
				got = append(got, p.ID+"="+p.State)
			}
			var blocked []string
			for pc, why := range r.Blocked {
				blocked = append(blocked, pc+"="+why)
			}
			if strings.Join(got, ",") != c.states || strings.Join(blocked, ",") != c.blocked || r.Converged != c.converged || r.NoLeader != c.noLeader {
				t.Fatalf("Compute = %v blocked %v converged %v noLeader %v; want %s blocked %q converged %v noLeader %v",
					got, blocked, r.Converged, r.NoLeader, c.states, c.blocked, c.converged, c.noLeader)
			}
		})
	}
}

func TestForRevision(t *testing.T) {
	sched := &report.SchedulerStatus{ProxyClusters: map[string]report.PublishResult{
		"A": {Result: report.PublishPublished, Lineage: "L1", Version: 9, InputRevision: 50},
		"B": {Result: report.PublishUnchanged, Lineage: "L1", Version: 3, InputRevision: 40},
		"C": {Result: report.PublishFailed, InputRevision: 50, Reason: "no"},
	}}
	targets := map[string]Target{"A": {}, "B": {}, "C": {}, "D": {}}
	waiting, final := ForRevision(45, sched, targets)
	if !final || len(waiting) != 3 || waiting["C"] != "input revision 50 was not published" ||
		waiting["B"] != "the scheduler has not published input revision 45 yet (it last computed 40)" || waiting["D"] == "" {
		t.Fatalf("waiting %v final %v", waiting, final)
	}
	if a := targets["A"]; a.Version != 9 || a.Lineage != "L1" || !a.AtLeast {
		t.Fatalf("target A = %+v, want L1 v9 at least", a)
	}
	if w, _ := ForRevision(1, nil, map[string]Target{"A": {}}); w["A"] != "no scheduler is leading" {
		t.Fatalf("no leader: %v", w)
	}
	// etcd trouble: the leader retries, so the wait goes on (not final,
	// not BLOCKED), saying what the last try met
	retry := report.PublishResult{Result: report.PublishRetrying, Lineage: "L1", Version: 3, InputRevision: 50, Reason: "publish A v4: commit: context deadline exceeded"}
	sched = &report.SchedulerStatus{ProxyClusters: map[string]report.PublishResult{"A": retry}}
	waiting, final = ForRevision(45, sched, map[string]Target{"A": {}})
	if final || waiting["A"] != "the scheduler is retrying the publish of input revision 50 (last try: publish A v4: commit: context deadline exceeded)" {
		t.Fatalf("retrying: waiting %v final %v", waiting, final)
	}
	if blocked, why := retry.Blocked(); blocked {
		t.Fatalf("a retrying publish is BLOCKED (%s)", why)
	}
}

func TestLaggards(t *testing.T) {
	r := Result{Blocked: map[string]string{"B": "why"}, Proxies: []Proxy{
		{ProxyCluster: "A", ID: "p1", State: Synced}, {ProxyCluster: "A", ID: "p2", State: Gone, NotCounted: true},
		{ProxyCluster: "A", ID: "p3", State: Stale, Reason: "last seen T"}}}
	got := strings.Join(r.Laggards(map[string]string{"C": "w"}), "; ")
	if want := "B BLOCKED (why); C WAITING (w); A/p3 STALE (last seen T)"; got != want {
		t.Fatalf("Laggards = %q, want %q", got, want)
	}
}

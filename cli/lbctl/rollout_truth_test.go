package lbctl

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/testkit/poll"
)

// publishIn publishes s in lineage (the pointer carries it too).
func (h *harness) publishIn(lineage string, s *snapshot.Snapshot) {
	h.t.Helper()
	s.Meta.Lineage = lineage
	h.publish(s)
	h.point(snapshot.Pointer{Lineage: lineage, Version: s.Meta.Version, Hash: s.Meta.Hash}, s.Meta.ProxyCluster)
}

// point moves current/<pc> by hand.
func (h *harness) point(p snapshot.Pointer, pc string) {
	h.t.Helper()
	ck, _ := h.layout.Current(pc)
	pj, _ := json.Marshal(p)
	if _, err := h.cli.Put(context.Background(), ck, string(pj)); err != nil {
		h.t.Fatal(err)
	}
}

func TestRolloutAheadAndLineages(t *testing.T) {
	h := newHarness(t)
	row := map[string]int{"SC1": 50, "SC2": 50}
	v5 := demoSnapshot("BFE1", 5, row, false)
	h.publishIn("L1", v5)
	h.publishIn("L1", demoSnapshot("BFE1", 6, map[string]int{"SC1": 60, "SC2": 40}, false))
	now := time.Now().UTC()
	ok := func(id string, lineage string, v uint64) {
		h.status(report.ProxyStatus{ProxyCluster: "BFE1", ID: id, AppliedLineage: lineage, AppliedVersion: v, EtcdConnected: true, UpdatedAt: now})
	}
	ok("p1", "L1", 6)
	ok("p2", "L1", 6)
	h.mustRun("rollout", "status")

	// The pointer is moved back to v5 by hand: both proxies keep v6 and are
	// AHEAD — not converged, exit 4 (never "SYNCED APPLIED v6 TARGET v5").
	h.point(snapshot.Pointer{Lineage: "L1", Version: 5, Hash: v5.Meta.Hash}, "BFE1")
	out, errs, code := h.run("", "rollout", "status")
	if code != ExitNotConverged {
		t.Fatalf("exit %d, want %d\n%s\n%s", code, ExitNotConverged, out, errs)
	}
	wantDetail := "ahead of the pointer: applied v6 of lineage L1, the pointer names v5 (moved back?); it keeps v6 until a later version is published"
	if !strings.Contains(errs, "BFE1/p1 AHEAD ("+wantDetail+")") || !strings.Contains(out, "BFE1           p2     AHEAD  v6       v5      "+wantDetail) {
		t.Fatalf("out:\n%s\nerr:\n%s", out, errs)
	}
	if strings.Contains(out, "converged") {
		t.Fatalf("says converged:\n%s", out)
	}
	// --version 5 asks for "v5 or later": v6 of the same lineage is that.
	h.mustRun("rollout", "status", "--proxy-cluster", "BFE1", "--version", "5")

	// A new lineage (etcd wiped): its v1 is the target; proxies still on L1
	// are PENDING whatever their version; once they follow, converged.
	h.publishIn("L2", demoSnapshot("BFE1", 1, row, false))
	out, errs, code = h.run("", "rollout", "status")
	if code != ExitNotConverged || !strings.Contains(errs, "BFE1/p1 PENDING (applied lineage L1, target lineage L2)") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if _, errs, code := h.run("", "rollout", "status", "--proxy-cluster", "BFE1", "--version", "1"); code != ExitNotConverged || !strings.Contains(errs, "p2 PENDING (applied lineage L1") {
		t.Fatalf("--version 1 with proxies on v6 of the old lineage: exit %d %s", code, errs)
	}
	ok("p1", "L2", 1)
	h.status(report.ProxyStatus{ProxyCluster: "BFE1", ID: "p2", AppliedLineage: "L1", AppliedVersion: 6, PointerLineage: "L2",
		RejectedVersion: 1, RejectedReason: "apply: boom", EtcdConnected: true, UpdatedAt: now})
	if _, errs, code := h.run("", "rollout", "status"); code != ExitNotConverged || !strings.Contains(errs, "BFE1/p2 REJECTED (apply: boom)") {
		t.Fatalf("rejected new lineage: exit %d %s", code, errs)
	}
	ok("p2", "L2", 1)
	var r rolloutReport
	if err := json.Unmarshal([]byte(h.mustRun("-o", "json", "rollout", "status")), &r); err != nil {
		t.Fatal(err)
	}
	if !r.Converged || r.TargetLineages["BFE1"] != "L2" || r.Targets["BFE1"] != 1 || r.Proxies[0].Lineage != "L2" {
		t.Fatalf("json %+v", r)
	}
}

// seen writes a last-seen record (what a proxy leaves when its lease expires).
func (h *harness) seen(st report.ProxyStatus) {
	h.t.Helper()
	k, _ := h.layout.LastSeen(st.ProxyCluster, st.ID)
	b, _ := json.Marshal(st)
	if _, err := h.cli.Put(context.Background(), k, string(b)); err != nil {
		h.t.Fatal(err)
	}
}

// lastSeen is each text lbctl may print for a proxy last seen at t:
// "last seen <t> (<age> ago)", the age rounded to the second from lbctl's own
// clock, which it reads once somewhere between from and to (before and
// after the run). A test that fixed one age failed when the run crossed a
// rounding boundary on a slow machine.
func lastSeen(t, from, to time.Time) []string {
	var out []string
	for d := from.Sub(t).Round(time.Second); d <= to.Sub(t).Round(time.Second); d += time.Second {
		out = append(out, "last seen "+t.UTC().Format(time.RFC3339)+" ("+d.String()+" ago)")
	}
	return out
}

// containsOne says whether s contains prefix followed by one of texts.
func containsOne(s, prefix string, texts []string) bool {
	for _, x := range texts {
		if strings.Contains(s, prefix+x) {
			return true
		}
	}
	return false
}

func TestRolloutStaleAndGone(t *testing.T) {
	h := newHarness(t)
	now := time.Now().UTC()
	s := demoSnapshot("BFE1", 4, map[string]int{"SC1": 50, "SC2": 50}, false)
	s.Meta.CreatedAt = now.Add(-time.Minute) // the rollout started a minute ago
	h.publishIn("L1", s)
	st := func(id string, updated time.Time) report.ProxyStatus {
		return report.ProxyStatus{ProxyCluster: "BFE1", ID: id, AppliedLineage: "L1", AppliedVersion: 4, EtcdConnected: true,
			UpdatedAt: updated, ReportIntervalSeconds: 5}
	}
	h.status(st("p1", now))
	h.seen(st("p1", now))
	h.status(st("p2", now.Add(-11*time.Second))) // two 5 s intervals missed
	h.seen(st("p3", now.Add(-20*time.Second)))   // lease expired during the rollout
	h.seen(st("p4", now.Add(-2*time.Minute)))    // gone before the rollout
	h.seen(st("p5", now.Add(-11*time.Minute)))   // gone long ago: forgotten
	out, errs, code := h.run("", "rollout", "status")
	done := time.Now()
	if code != ExitNotConverged {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	for _, want := range []struct {
		prefix string
		texts  []string
	}{
		{"BFE1/p2 STALE (", lastSeen(now.Add(-11*time.Second), now, done)},
		{"BFE1/p3 GONE (status lease expired; ", lastSeen(now.Add(-20*time.Second), now, done)},
	} {
		if !containsOne(errs, want.prefix, want.texts) {
			t.Errorf("stderr lacks %q followed by one of %q:\n%s", want.prefix, want.texts, errs)
		}
	}
	if strings.Contains(errs, "p4") || strings.Contains(out, "p5") || strings.Contains(errs, "p1") {
		t.Errorf("p4 (gone before), p5 (forgotten) or p1 (synced) held against the rollout:\n%s\n%s", out, errs)
	}
	if !strings.Contains(out, "p4     GONE    v4       v4      status lease expired; last seen ") || !strings.Contains(out, "before this rollout: not counted") {
		t.Errorf("p4 not listed as GONE, not counted:\n%s", out)
	}
	// p2 reports again and p3's record is collected: converged, p4 listed.
	h.status(st("p2", time.Now().UTC()))
	k, _ := h.layout.LastSeen("BFE1", "p3")
	if _, err := h.cli.Delete(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	out = h.mustRun("rollout", "status")
	if !strings.Contains(out, "converged: every live proxy runs its target version") || !strings.Contains(out, "p4") {
		t.Fatalf("%s", out)
	}
}

func TestProxiesListsStaleGoneAndAhead(t *testing.T) {
	h := newHarness(t)
	now := time.Now().UTC()
	h.publishIn("L1", demoSnapshot("BFE1", 4, map[string]int{"SC1": 50, "SC2": 50}, false))
	h.status(report.ProxyStatus{ProxyCluster: "BFE1", ID: "p1", AppliedLineage: "L1", AppliedVersion: 5, PointerVersion: 4, Ahead: true,
		EtcdConnected: true, UpdatedAt: now, ReportIntervalSeconds: 5})
	h.status(report.ProxyStatus{ProxyCluster: "BFE1", ID: "p2", AppliedVersion: 4, EtcdConnected: true, UpdatedAt: now.Add(-30 * time.Second), WatchLagSeconds: 0.5})
	h.seen(report.ProxyStatus{ProxyCluster: "BFE1", ID: "p3", AppliedVersion: 4, EtcdConnected: true, UpdatedAt: now.Add(-time.Minute)})
	out := h.mustRun("proxies")
	done := time.Now()
	for _, want := range []string{"p1     LIVE  ", "AHEAD of the pointer (v4)"} {
		if !strings.Contains(out, want) {
			t.Errorf("proxies lacks %q:\n%s", want, out)
		}
	}
	for _, want := range []struct {
		prefix string
		texts  []string
	}{
		{"p2     STALE (", lastSeen(now.Add(-30*time.Second), now, done)},
		{"p3     GONE (", lastSeen(now.Add(-time.Minute), now, done)},
	} {
		if !containsOne(out, want.prefix, want.texts) {
			t.Errorf("proxies lacks %q followed by one of %q:\n%s", want.prefix, want.texts, out)
		}
	}
	// WATCH LAG is as of now: the 0.5 s p2 reported 30 s ago, plus those
	// 30 s (it has written nothing since), not the 0.5 s it last wrote.
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, " p2 ") {
			continue
		}
		m := regexp.MustCompile(`\s(\d+\.\d)s\s`).FindStringSubmatch(line)
		lag, err := 0.0, error(nil)
		if m != nil {
			lag, err = strconv.ParseFloat(m[1], 64)
		}
		if hi := 30.5 + done.Sub(now).Seconds() + 0.1; m == nil || err != nil || lag < 30.4 || lag > hi {
			t.Errorf("p2's watch lag %v (%v) in %q; want 30.5 s to %.1f s", m, err, line, hi)
		}
	}
	var rows []proxyRow
	if err := json.Unmarshal([]byte(h.mustRun("-o", "json", "proxies")), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || rows[0].State != "LIVE" || rows[1].State != "STALE" || rows[2].State != "GONE" || rows[2].ID != "p3" {
		t.Fatalf("json rows %+v", rows)
	}
}

func TestRolloutBlockedAndNoLeader(t *testing.T) {
	h := newHarness(t)
	now := time.Now().UTC()
	h.publishIn("L1", demoSnapshot("BFE1", 4, map[string]int{"SC1": 50, "SC2": 50}, false))
	h.status(report.ProxyStatus{ProxyCluster: "BFE1", ID: "p1", AppliedLineage: "L1", AppliedVersion: 4, EtcdConnected: true, UpdatedAt: now})
	// No scheduler status: nobody leads. Converged on what is live, and said.
	out, errs, code := h.run("", "rollout", "status")
	if code != 0 || !strings.Contains(errs, "no scheduler is leading") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if _, errs, _ := h.run("", "proxies"); !strings.Contains(errs, "no scheduler is leading") {
		t.Fatalf("proxies does not say nobody leads: %s", errs)
	}
	// The leader failed to publish BFE1's newest input.
	why := "publish BFE1 v5: invalid snapshot: clusters.demo-main.row.weights.GSLB_BLACKHOLE: 100 drops all traffic; set allow_full_drop to allow it"
	b, _ := json.Marshal(report.SchedulerStatus{LeaderID: "S1", InputRevision: 42, ProxyClusters: map[string]report.PublishResult{
		"BFE1": {Result: report.PublishFailed, Lineage: "L1", Version: 4, InputRevision: 42, Reason: why},
		"BFE2": {Result: report.PublishPublished, Lineage: "L1", Version: 9, InputRevision: 42},
	}})
	if _, err := h.cli.Put(context.Background(), h.layout.SchedulerStatus(), string(b)); err != nil {
		t.Fatal(err)
	}
	out, errs, code = h.run("", "rollout", "status")
	want := "BLOCKED (input revision 42 not published: " + why + ")"
	if code != ExitNotConverged || !strings.Contains(out, "BFE1           "+want) || !strings.Contains(errs, "not converged: BFE1 "+want) {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if strings.Contains(out, "converged: every") || strings.Contains(errs, "no scheduler is leading") {
		t.Fatalf("%s\n%s", out, errs)
	}
	// Only BFE2 asked: not blocked, converged.
	h.publishIn("L1", demoSnapshot("BFE2", 9, map[string]int{"SC1": 50, "SC2": 50}, false))
	h.status(report.ProxyStatus{ProxyCluster: "BFE2", ID: "q1", AppliedLineage: "L1", AppliedVersion: 9, EtcdConnected: true, UpdatedAt: now})
	if out, errs, code := h.run("", "rollout", "status", "--proxy-cluster", "BFE2"); code != 0 || strings.Contains(out+errs, "BLOCKED") {
		t.Fatalf("BFE2: exit %d %s %s", code, out, errs)
	}
}

// schedStatus writes the leader's status as the scheduler would.
func (h *harness) schedStatus(st report.SchedulerStatus) {
	h.t.Helper()
	b, _ := json.Marshal(st)
	if _, err := h.cli.Put(context.Background(), h.layout.SchedulerStatus(), string(b)); err != nil {
		h.t.Fatal(err)
	}
}

// --wait after a write returns only once every live proxy applied a
// snapshot computed from that write's revision or later — never on the old
// version that was converged before the write.
func TestWriteWaitWaitsForItsRevision(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	_, rev0 := h.desired()
	now := time.Now().UTC()
	h.publishIn("L1", demoSnapshot("BFE1", 4, map[string]int{"SC1": 50, "SC2": 50}, false))
	synced := func(v uint64) {
		h.status(report.ProxyStatus{ProxyCluster: "BFE1", ID: "p1", AppliedLineage: "L1", AppliedVersion: v, EtcdConnected: true, UpdatedAt: now})
	}
	synced(4)
	published := func(rev int64, v uint64, result string) {
		h.schedStatus(report.SchedulerStatus{LeaderID: "S1", InputRevision: rev, ProxyClusters: map[string]report.PublishResult{
			"BFE1": {Result: result, Lineage: "L1", Version: v, InputRevision: rev, Reason: map[string]string{report.PublishFailed: "invalid snapshot: boom"}[result]}}})
	}
	published(rev0, 4, report.PublishPublished)

	done := h.runAsync("weights", "set", "--cluster", "demo-main", "--proxy-cluster", "BFE1", "SC1=30", "SC2=70", "--wait", "--wait-timeout", "30s")
	rev := h.nextRevision(rev0)
	// Everything is converged on v4, but v4 was computed before the write.
	if _, errs, code := h.run("", "rollout", "status", "--revision", fmt.Sprint(rev)); code != ExitNotConverged ||
		!strings.Contains(errs, fmt.Sprintf("BFE1 WAITING (the scheduler has not published input revision %d yet (it last computed %d))", rev, rev0)) {
		t.Fatalf("rollout status --revision %d: exit %d %s", rev, code, errs)
	}
	select {
	case r := <-done:
		t.Fatalf("--wait returned before the write was published: %+v", r)
	case <-time.After(300 * time.Millisecond): // it must still be waiting
	}
	// The scheduler publishes v5 from the write; the proxy applies it.
	h.publishIn("L1", demoSnapshot("BFE1", 5, map[string]int{"SC1": 30, "SC2": 70}, false))
	published(rev, 5, report.PublishPublished)
	synced(5)
	r := <-done
	if r.code != 0 || !strings.Contains(r.out, "converged: every live proxy") {
		t.Fatalf("weights set --wait: exit %d\n%s\n%s", r.code, r.out, r.errs)
	}
	// With --wait the first line is the write's, and no "not live yet"
	// hint follows: the wait's table says how the fleet stands.
	if first, _, _ := strings.Cut(r.out, "\n"); first != fmt.Sprintf("Pinned BFE1 row of demo-main to SC1=30 SC2=70 (desired state revision %d).", rev) ||
		strings.Contains(r.out, "Written to the desired state only") {
		t.Fatalf("weights set --wait: stdout\n%s", r.out)
	}

	// A write the scheduler cannot publish: --wait gives up at once, exit 4.
	done = h.runAsync("drain", "--cluster", "demo-main", "--subcluster", "SC1", "--wait", "--wait-timeout", "30s")
	rev = h.nextRevision(rev)
	published(rev, 5, report.PublishFailed)
	start := time.Now()
	r = <-done
	if r.code != ExitNotConverged || !strings.Contains(r.errs, fmt.Sprintf("BFE1 BLOCKED (input revision %d not published: invalid snapshot: boom)", rev)) {
		t.Fatalf("drain --wait of an unpublishable write: exit %d\n%s\n%s", r.code, r.out, r.errs)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("--wait took %v to give up on a failed publish", time.Since(start))
	}
	// Its last table says what rollout status says then: BLOCKED, not
	// WAITING as well.
	status, _, _ := h.run("", "rollout", "status")
	if got, want := clusterLines(r.out), clusterLines(status); len(want) != 1 || !slices.Equal(got, want) {
		t.Fatalf("drain --wait's last table says %q, rollout status %q (want one BLOCKED line in both)\n%s\n%s", got, want, r.out, status)
	}
}

// lbctlResult is one lbctl run's outcome.
type lbctlResult struct {
	out, errs string
	code      int
}

// runAsync runs lbctl in the background (a --wait); the outcome comes on
// the channel.
func (h *harness) runAsync(args ...string) <-chan lbctlResult {
	done := make(chan lbctlResult, 1)
	go func() {
		out, errs, code := h.run("", args...)
		done <- lbctlResult{out, errs, code}
	}()
	return done
}

// nextRevision waits until the desired state's revision passes rev (a
// write runAsync started landed) and returns it.
func (h *harness) nextRevision(rev int64) int64 {
	h.t.Helper()
	var next int64
	poll.EventuallyTrue(h.t, 20*time.Second, "the write", func() bool { _, next = h.desired(); return next > rev })
	return next
}

// clusterLines are a rollout table's per-proxy-cluster lines (BLOCKED,
// WAITING), spaces squeezed.
func clusterLines(table string) []string {
	var out []string
	for _, l := range strings.Split(table, "\n") {
		f := strings.Fields(l)
		if len(f) > 1 && (strings.HasPrefix(f[1], "BLOCKED") || strings.HasPrefix(f[1], "WAITING")) {
			out = append(out, strings.Join(f, " "))
		}
	}
	return out
}

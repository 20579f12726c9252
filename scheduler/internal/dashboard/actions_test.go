package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/testkit/etcdtest"
)

// A write of the desired state from the page answers lbctl's first line
// and that it is not live yet — never that it is done in the traffic — with
// the revision and the proxy cluster the page then watches (as strings: a
// reader of {"message": …} into a map of strings still decodes it).
func TestDesiredStateActionsSayNotLive(t *testing.T) {
	_, cli := etcdtest.New(t)
	st := plannableState()
	act := actionServer(t, cli, st)
	rev := func() int64 {
		t.Helper()
		r, err := cli.Get(context.Background(), layout.Desired())
		if err != nil || len(r.Kvs) == 0 {
			t.Fatalf("desired state: %v", err)
		}
		return r.Kvs[0].ModRevision
	}
	const all = "Written to the desired state only: not live until the scheduler publishes it and the proxies apply it."
	const bfe1 = "Written to the desired state only: not live until the scheduler publishes it and the proxies of BFE1 apply it."
	for _, c := range []struct {
		body, first, notLive, pc string
	}{
		{`{"kind":"undrain","cluster":"c","subcluster":"SC2"}`, "Undrained c/SC2 (desired state revision %d).", all, ""},
		{`{"kind":"drain","cluster":"c","subcluster":"SC2","reason":"idc2 maintenance"}`, "Drained c/SC2 (desired state revision %d).", all, ""},
		{`{"kind":"pin","cluster":"c","proxy_cluster":"BFE1","weights":{"SC1":90,"GSLB_BLACKHOLE":10}}`, "Pinned BFE1 row of c to SC1=90 GSLB_BLACKHOLE=10 (desired state revision %d).", bfe1, "BFE1"},
		{`{"kind":"unpin","cluster":"c","proxy_cluster":"BFE1"}`, "Unpinned BFE1 row of c (desired state revision %d).", bfe1, "BFE1"},
	} {
		code, out := act(c.body)
		r := rev()
		want := map[string]string{"message": fmt.Sprintf(c.first, r) + " " + c.notLive, "revision": fmt.Sprint(r)}
		if c.pc != "" {
			want["proxy_cluster"] = c.pc
		}
		if code != http.StatusOK || fmt.Sprint(out) != fmt.Sprint(want) {
			t.Errorf("%s: %d %q\nwant 200 %q", c.body, code, out, want)
		}
	}
}

// A shift's pause, resume and abort from the page answer lbctl's sentence
// with the revision of their write to the shift intent, that it is not
// live yet, and the shift's proxy cluster: the page follows that revision
// as it follows a desired-state write's (the scheduler's input revision
// covers the shift intents). A refused one names no revision.
func TestShiftStateActionsCarryRevision(t *testing.T) {
	_, cli := etcdtest.New(t)
	act := actionServer(t, cli, state())
	k := putShift(t, cli, config.Shift{ID: "s-1", ProxyCluster: "BFE1", Cluster: "c", From: "IDC1", To: "IDC2", Percent: 30,
		Ramp: config.Duration(time.Hour), StepPercent: 10, State: config.ShiftPending}, nil)
	const notLive = "Not live until the scheduler runs it and the proxies of BFE1 apply it."
	for _, c := range []struct{ kind, state string }{
		{"shift-pause", config.ShiftPaused}, {"shift-resume", config.ShiftRunning}, {"shift-pause", config.ShiftPaused}, {"shift-abort", config.ShiftAborted},
	} {
		code, out := act(`{"kind":"` + c.kind + `","id":"s-1"}`)
		rev := etcdtest.ModRevision(t, cli, k)
		want := map[string]string{"message": fmt.Sprintf("Shift s-1 is now %s (revision %d). %s", c.state, rev, notLive),
			"revision": fmt.Sprint(rev), "proxy_cluster": "BFE1"}
		if code != http.StatusOK || fmt.Sprint(out) != fmt.Sprint(want) {
			t.Errorf("%s: %d %q\nwant 200 %q", c.kind, code, out, want)
		}
		r, err := cli.Get(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		var got config.Shift
		if err := json.Unmarshal(r.Kvs[0].Value, &got); err != nil || got.State != c.state {
			t.Errorf("%s: the intent is %q (%v), want %q", c.kind, got.State, err, c.state)
		}
	}
	rev := etcdtest.ModRevision(t, cli, k)
	code, out := act(`{"kind":"shift-abort","id":"s-1"}`)
	if want := map[string]string{"error": "shift s-1 is aborted: cannot abort it; nothing was written"}; code != http.StatusBadRequest || fmt.Sprint(out) != fmt.Sprint(want) {
		t.Errorf("abort of an aborted shift: %d %q\nwant 400 %q", code, out, want)
	}
	if got := etcdtest.ModRevision(t, cli, k); got != rev {
		t.Errorf("a refused abort wrote the intent: revision %d → %d", rev, got)
	}
}

// putShift stores shift sh (and its progress, when p is not nil) as lbctl
// and the scheduler write them, and returns the intent key.
func putShift(t *testing.T, cli *clientv3.Client, sh config.Shift, p *config.ShiftProgress) string {
	t.Helper()
	k, err := layout.Shift(sh.ID)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(sh)
	if _, err := cli.Put(context.Background(), k, string(b)); err != nil {
		t.Fatal(err)
	}
	if p != nil {
		pk, _ := layout.ShiftProgress(sh.ID)
		b, _ := json.Marshal(p)
		if _, err := cli.Put(context.Background(), pk, string(b)); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

// A shift pause, resume or abort from the page is judged as lbctl judges
// it — with the scheduler's progress, so a finished shift is not paused —
// and a refusal says, in lbctl's words, that nothing was written (the
// intent's revision does not move).
func TestShiftStateActionsRefuseAsLbctl(t *testing.T) {
	_, cli := etcdtest.New(t)
	act := actionServer(t, cli, state())
	done := putShift(t, cli, config.Shift{ID: "s-done", ProxyCluster: "BFE1", Cluster: "c", From: "IDC1", To: "IDC2", Percent: 20,
		StepPercent: 10, State: config.ShiftRunning}, &config.ShiftProgress{ID: "s-done", AppliedPercent: 20, TargetPercent: 20, State: config.ShiftDone, Version: 7})
	paused := putShift(t, cli, config.Shift{ID: "s-paused", ProxyCluster: "BFE1", Cluster: "c", From: "IDC1", To: "IDC2", Percent: 20,
		StepPercent: 10, State: config.ShiftPaused}, nil)
	revs := map[string]int64{done: etcdtest.ModRevision(t, cli, done), paused: etcdtest.ModRevision(t, cli, paused)}
	for _, c := range []struct {
		body string
		code int
		err  string
	}{
		{`{"kind":"shift-pause","id":"s-done"}`, http.StatusBadRequest,
			"shift s-done is done (20 of 20 points moved): cannot pause it (it is finished; abort it to put the rows back); nothing was written"},
		{`{"kind":"shift-resume","id":"s-done"}`, http.StatusBadRequest,
			"shift s-done is done (20 of 20 points moved): cannot resume it (it is finished; abort it to put the rows back); nothing was written"},
		{`{"kind":"shift-pause","id":"s-paused"}`, http.StatusBadRequest, "shift s-paused is paused: cannot pause it (already paused); nothing was written"},
		{`{"kind":"shift-pause","id":"nope"}`, http.StatusNotFound, `no shift "nope"; nothing was written`},
	} {
		code, out := act(c.body)
		if want := map[string]string{"error": c.err}; code != c.code || fmt.Sprint(out) != fmt.Sprint(want) {
			t.Errorf("%s: %d %q\nwant %d %q", c.body, code, out, c.code, want)
		}
	}
	for k, rev := range revs {
		if got := etcdtest.ModRevision(t, cli, k); got != rev {
			t.Errorf("a refused action wrote %s: revision %d → %d", k, rev, got)
		}
	}
}

// The urgent mark is the write's (lbctl --urgent): a write from the page,
// which is never urgent, clears it as an lbctl write without --urgent
// does, so the page's change goes through the rollout stages.
func TestPageWriteClearsTheUrgentMark(t *testing.T) {
	_, cli := etcdtest.New(t)
	st := plannableState()
	st.Urgent = &config.Urgent{Author: "alice", What: "lbctl weights set"}
	act := actionServer(t, cli, st)
	if code, out := act(`{"kind":"undrain","cluster":"c","subcluster":"SC2"}`); code != http.StatusOK {
		t.Fatalf("undrain: %d %q", code, out)
	}
	if got := stored(t, cli); got.Urgent != nil || len(got.Drains) != 0 {
		t.Fatalf("stored urgent %+v, drains %+v: want no mark, SC2 undrained", got.Urgent, got.Drains)
	}
}

// stored is the desired state in etcd.
func stored(t *testing.T, cli *clientv3.Client) *config.State {
	t.Helper()
	r, err := cli.Get(context.Background(), layout.Desired())
	if err != nil || len(r.Kvs) == 0 {
		t.Fatalf("desired state: %v", err)
	}
	var st config.State
	if err := json.Unmarshal(r.Kvs[0].Value, &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

// plannableState is state() with the scheduler's settings and a cluster
// policy, and BFE1's pin on SC1: a state the scheduler can plan, so the
// page's writes pass its plan check.
func plannableState() *config.State {
	st := state()
	st.Scheduler = config.DefaultSchedulerSettings()
	c := st.Clusters["c"]
	c.Policy = config.DefaultPolicy()
	st.Clusters["c"] = c
	st.Pins[0].Weights = map[string]int{"SC1": 100}
	return st
}

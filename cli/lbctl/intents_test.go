package lbctl

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/config"
)

// shiftKeys counts the stored shift intents.
func (h *harness) shiftKeys() int64 {
	h.t.Helper()
	r, err := h.cli.Get(context.Background(), h.layout.ShiftsPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		h.t.Fatal(err)
	}
	return r.Count
}

func TestShiftRulesRefuseBeforeWriting(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	base := []string{"shift", "--cluster", "demo-main", "--proxy-cluster", "BFE1", "--from", "IDC1", "--to", "IDC2"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--percent", "30", "--ramp", "-5s"}, "--ramp -5s"},
		{[]string{"--percent", "30", "--ramp", "0s"}, "--ramp 0s: a ramp must be positive"},
		{[]string{"--percent", "5", "--ramp", "1m", "--step", "10"}, "--step 10 is larger than --percent 5"},
		{[]string{"--percent", "30", "--ramp", "1s", "--step", "10"}, "under the 1s minimum"},
		{[]string{"--percent", "0"}, "--percent 0 is outside 1..100"},
		{[]string{"--percent", "30", "--step", "101", "--ramp", "1m"}, "--step 101 is outside 1..100"},
	} {
		out, errs, code := h.run("", append(append([]string(nil), base...), c.args...)...)
		if code != ExitError || !strings.Contains(errs, c.want) || !strings.Contains(errs, "nothing was written") || out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 naming %q", c.args, code, out, errs, c.want)
		}
	}
	if n := h.shiftKeys(); n != 0 {
		t.Fatalf("%d shifts written by refused commands", n)
	}
}

func TestShiftControlOfFinishedOrUnknownShiftRefused(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	sh := config.Shift{ID: "shift-done", ProxyCluster: "BFE1", Cluster: "demo-main", From: "IDC1", To: "IDC2", Percent: 50,
		State: config.ShiftPending, Author: "test", CreatedAt: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}
	b, _ := json.Marshal(sh)
	k, _ := h.layout.Shift(sh.ID)
	if _, err := h.cli.Put(context.Background(), k, string(b)); err != nil {
		t.Fatal(err)
	}
	pk, _ := h.layout.ShiftProgress(sh.ID)
	pb, _ := json.Marshal(config.ShiftProgress{ID: sh.ID, AppliedPercent: 15, TargetPercent: 50, State: config.ShiftDone, Version: 5,
		Message: "15 of 50 points: IDC1 had 15"})
	if _, err := h.cli.Put(context.Background(), pk, string(pb)); err != nil {
		t.Fatal(err)
	}
	before, _ := h.cli.Get(context.Background(), k)
	for _, verb := range []string{"pause", "resume"} {
		out, errs, code := h.run("", "shift", verb, "--id", sh.ID)
		if code != ExitError || out != "" || !strings.Contains(errs, "shift shift-done is done (15 of 50 points moved): cannot "+verb+" it") {
			t.Errorf("%s of a done shift: exit %d, stdout %q, stderr %q", verb, code, out, errs)
		}
	}
	if _, errs, code := h.run("", "shift", "pause", "--id", "shift-nope"); code != ExitError || !strings.Contains(errs, `no shift "shift-nope"`) {
		t.Errorf("pause of an unknown shift: exit %d, %q", code, errs)
	}
	after, _ := h.cli.Get(context.Background(), k)
	if after.Kvs[0].ModRevision != before.Kvs[0].ModRevision {
		t.Fatalf("a refused command wrote the shift")
	}
	list := h.mustRun("shift", "list")
	if !strings.Contains(list, "15/50") || !strings.Contains(list, "15 of 50 points: IDC1 had 15") {
		t.Fatalf("shift list does not show the cap:\n%s", list)
	}
	// Abort of a done shift puts its rows back; a second abort is refused.
	h.mustRun("shift", "abort", "--id", sh.ID)
	if _, errs, code := h.run("", "shift", "abort", "--id", sh.ID); code != ExitError || !strings.Contains(errs, "is aborted: cannot abort it") {
		t.Errorf("second abort: exit %d, %q", code, errs)
	}
}

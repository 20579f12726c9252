package stateio_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/edit"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/stateio"
	"github.com/sluicelb/sluice/testkit/etcdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var layout = keys.MustNew("/sluice")

func state() *config.State {
	policy := config.DefaultPolicy()
	return &config.State{
		Scheduler: config.DefaultSchedulerSettings(),
		Topology:  config.Topology{IDCs: []string{"IDC1", "IDC2"}, ProxyClusters: map[string]config.ProxyCluster{"BFE1": {IDC: "IDC1"}}},
		Clusters: map[string]config.Cluster{"c": {SubClusters: map[string]config.SubCluster{
			"SC1": {IDC: "IDC1", Instances: []config.Instance{{Addr: "10.0.0.1", Port: 80, Weight: 10}}},
			"SC2": {IDC: "IDC2", Instances: []config.Instance{{Addr: "10.0.0.2", Port: 80, Weight: 10}}},
		}, Policy: policy}},
	}
}

func put(t *testing.T, cli *clientv3.Client, k string, v any) int64 {
	t.Helper()
	b, _ := json.Marshal(v)
	r, err := cli.Put(context.Background(), k, string(b))
	if err != nil {
		t.Fatal(err)
	}
	return r.Header.Revision
}

// An edit re-reads and re-applies itself after a concurrent write, so the
// other writer's change is kept; the mark of an urgent write is the
// write's; every refusal is typed and writes nothing.
func TestUpdate(t *testing.T) {
	_, cli := etcdtest.New(t)
	s := stateio.Store{KV: cli, Layout: layout}
	ctx := context.Background()

	_, err := s.Update(ctx, func(*config.State) error { return nil }, stateio.Write{})
	if !errors.Is(err, stateio.ErrNoState) || err.Error() != "no desired state stored at /sluice/desired: write one with lbctl apply -f FILE" {
		t.Fatalf("no state: %v", err)
	}

	st := state()
	st.Urgent = &config.Urgent{Author: "alice", What: "lbctl drain"}
	put(t, cli, layout.Desired(), st)
	calls := 0
	rev, err := s.Update(ctx, func(st *config.State) error {
		calls++
		if calls == 1 { // someone else drains SC1 between the read and the write
			other := state()
			other.Drains = []config.Drain{{Cluster: "c", SubCluster: "SC1"}}
			put(t, cli, layout.Desired(), other)
		}
		return edit.Drain(st, config.Drain{Cluster: "c", SubCluster: "SC2", AllowFullDrop: true})
	}, stateio.Write{})
	if err != nil || calls != 2 || rev != etcdtest.ModRevision(t, cli, layout.Desired()) {
		t.Fatalf("update: rev %d, err %v, %d calls", rev, err, calls)
	}
	got, err := s.ReadStored(ctx)
	if err != nil || len(got.State.Drains) != 2 || got.State.Urgent != nil || got.Revision != rev {
		t.Fatalf("stored %+v (%v): want both drains, no urgent mark, revision %d", got, err, rev)
	}

	rev = etcdtest.ModRevision(t, cli, layout.Desired())
	var refused *stateio.Refused
	if _, err := s.Update(ctx, func(st *config.State) error { return edit.Drain(st, config.Drain{Cluster: "c", SubCluster: "SC2"}) }, stateio.Write{}); !errors.As(err, &refused) || err.Error() != "c/SC2 is already drained" {
		t.Errorf("drain twice: %v", err)
	}
	if _, err := s.Update(ctx, func(st *config.State) error {
		edit.Pin(st, config.Pin{ProxyCluster: "BFE1", Cluster: "c", Weights: map[string]int{"SC1": 50}})
		return nil
	}, stateio.Write{}); !errors.As(err, &refused) || !strings.HasPrefix(err.Error(), "invalid change; nothing was written:\nrow BFE1 of c: ") {
		t.Errorf("bad pin: %v", err)
	}
	plan := errors.New("the plan refuses it")
	var checked *config.State
	if _, err := s.Update(ctx, func(st *config.State) error { _, err := edit.Undrain(st, "c", "SC1"); return err },
		stateio.Write{Check: func(_ context.Context, next *config.State) error { checked = next; return plan }}); err != plan || checked == nil || len(checked.Drains) != 1 {
		t.Errorf("checked: %v %+v", err, checked)
	}
	if now := etcdtest.ModRevision(t, cli, layout.Desired()); now != rev {
		t.Fatalf("refusals wrote the desired state: revision %d → %d", rev, now)
	}

	// A writer that always gets in between: a conflict after Attempts.
	calls = 0
	_, err = s.Update(ctx, func(*config.State) error { calls++; put(t, cli, layout.Desired(), state()); return nil }, stateio.Write{})
	if !errors.Is(err, stateio.ErrConflict) || calls != stateio.Attempts || err.Error() != "conflict: the desired state kept changing; nothing was written" {
		t.Fatalf("always changing: %v after %d calls", err, calls)
	}

	// Put: compare-and-swap on the revision given; the urgent mark given.
	rev = etcdtest.ModRevision(t, cli, layout.Desired())
	if _, err := s.Put(ctx, state(), rev-1, stateio.Write{}); !errors.Is(err, stateio.ErrConflict) {
		t.Errorf("put at an old revision: %v", err)
	}
	mark := &config.Urgent{Author: "bob", What: "lbctl apply"}
	if _, err := s.Put(ctx, state(), rev, stateio.Write{Urgent: mark}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Read(ctx); got.State.Urgent == nil || *got.State.Urgent != *mark {
		t.Errorf("urgent mark %+v, want %+v", got.State.Urgent, mark)
	}
}

// A shift intent is created once, and moved to a state with the
// scheduler's progress, compare-and-swap on the intent.
func TestShifts(t *testing.T) {
	_, cli := etcdtest.New(t)
	s := stateio.Store{KV: cli, Layout: layout}
	ctx := context.Background()
	put(t, cli, layout.Desired(), state())
	sh := config.Shift{ID: "s-1", ProxyCluster: "BFE1", Cluster: "c", From: "IDC1", To: "IDC2", Percent: 30, StepPercent: 10, State: config.ShiftPending}
	k, _ := layout.Shift(sh.ID)

	var refused *stateio.Refused
	bad := sh
	bad.To = "IDC9"
	if _, err := s.CreateShift(ctx, bad, nil); !errors.As(err, &refused) || !strings.HasPrefix(err.Error(), "invalid shift; nothing was written: ") {
		t.Errorf("bad shift: %v", err)
	}
	no := errors.New("the plan refuses it")
	if _, err := s.CreateShift(ctx, sh, func(context.Context) error { return no }); err != no {
		t.Errorf("checked shift: %v", err)
	}
	if etcdtest.ModRevision(t, cli, k) != 0 {
		t.Fatal("a refused shift was written")
	}
	rev, err := s.CreateShift(ctx, sh, nil)
	if err != nil || rev != etcdtest.ModRevision(t, cli, k) {
		t.Fatalf("create: %d %v", rev, err)
	}
	if _, err := s.CreateShift(ctx, sh, nil); !errors.Is(err, stateio.ErrConflict) || err.Error() != "shift s-1 already exists" {
		t.Errorf("create twice: %v", err)
	}

	got, rev, err := s.SetShiftState(ctx, "s-1", config.ShiftPaused)
	if err != nil || got.State != config.ShiftPaused || rev != etcdtest.ModRevision(t, cli, k) {
		t.Fatalf("pause: %+v %d %v", got, rev, err)
	}
	if _, _, err := s.SetShiftState(ctx, "s-1", config.ShiftPaused); !errors.As(err, &refused) || err.Error() != "shift s-1 is paused: cannot pause it (already paused); nothing was written" {
		t.Errorf("pause twice: %v", err)
	}
	pk, _ := layout.ShiftProgress("s-1")
	put(t, cli, pk, config.ShiftProgress{ID: "s-1", AppliedPercent: 30, TargetPercent: 30, State: config.ShiftDone, Version: 3})
	if _, _, err := s.SetShiftState(ctx, "s-1", config.ShiftRunning); !errors.As(err, &refused) || !strings.HasPrefix(err.Error(), "shift s-1 is done (30 of 30 points moved): cannot resume it") {
		t.Errorf("resume a finished shift: %v", err)
	}
	if _, _, err := s.SetShiftState(ctx, "nope", config.ShiftPaused); !errors.Is(err, stateio.ErrNoShift) {
		t.Errorf("no shift: %v", err)
	}
	if etcdtest.ModRevision(t, cli, k) != rev {
		t.Fatal("a refused state change was written")
	}
}

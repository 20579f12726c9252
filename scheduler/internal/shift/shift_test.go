package shift

import (
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
)

func intent(state string, percent, step int, ramp time.Duration) map[string]config.Shift {
	return map[string]config.Shift{"s1": {
		ID: "s1", ProxyCluster: "BFE1", Cluster: "demo-main", From: "IDC1", To: "IDC2",
		Percent: percent, StepPercent: step, Ramp: config.Duration(ramp), State: state,
	}}
}

func applied(t *testing.T, act []Active) int {
	t.Helper()
	switch len(act) {
	case 0:
		return 0
	case 1:
		return act[0].AppliedPercent
	}
	t.Fatalf("want at most one active shift, got %v", act)
	return 0
}

func TestRampStepsPauseResumeAbort(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e := NewExecutor(nil, t0)
	// 30 points over 3m in 10-point steps: one step a minute, the first at once.
	in := intent(config.ShiftPending, 30, 10, 3*time.Minute)
	steps := []struct {
		at    time.Duration
		state string
		want  int
		st    string
	}{
		{0, config.ShiftPending, 10, config.ShiftRunning},
		{30 * time.Second, config.ShiftRunning, 10, config.ShiftRunning},
		{time.Minute, config.ShiftRunning, 20, config.ShiftRunning},
		// Paused 30 s into the minute after the second step: resumed, the
		// third step falls due 30 s later, not at once.
		{90 * time.Second, config.ShiftPaused, 20, config.ShiftPaused},
		{10 * time.Minute, config.ShiftPaused, 20, config.ShiftPaused},
		{11 * time.Minute, config.ShiftRunning, 20, config.ShiftRunning},
		{11*time.Minute + 29*time.Second, config.ShiftRunning, 20, config.ShiftRunning},
		{11*time.Minute + 30*time.Second, config.ShiftRunning, 30, config.ShiftDone},
		{20 * time.Minute, config.ShiftRunning, 30, config.ShiftDone},
		{21 * time.Minute, config.ShiftAborted, 0, config.ShiftAborted},
	}
	for _, s := range steps {
		sh := in["s1"]
		sh.State = s.state
		in["s1"] = sh
		got := applied(t, e.Step(t0.Add(s.at), in))
		if got != s.want {
			t.Fatalf("at %v (%s): applied %d, want %d", s.at, s.state, got, s.want)
		}
		ps := e.Progress(t0.Add(s.at), in, func(config.Shift) uint64 { return 7 })
		var st string
		if len(ps) == 1 {
			st = ps[0].State
			if ps[0].AppliedPercent != s.want || ps[0].TargetPercent != 30 || ps[0].Version != 7 {
				t.Fatalf("at %v: progress %+v", s.at, ps[0])
			}
			e.MarkWritten(ps[0])
		} else if len(ps) == 0 {
			st = e.tracks["s1"].state
		} else {
			t.Fatalf("at %v: progress %v", s.at, ps)
		}
		if st != s.st {
			t.Fatalf("at %v: state %q, want %q", s.at, st, s.st)
		}
	}
}

func TestNoRampAppliesAtOnceAndDeletionForgets(t *testing.T) {
	t0 := time.Unix(1000, 0)
	e := NewExecutor(nil, t0)
	in := intent(config.ShiftPending, 40, 0, 0)
	if got := applied(t, e.Step(t0, in)); got != 40 {
		t.Fatalf("applied %d, want 40", got)
	}
	if !e.NextDue(in).IsZero() {
		t.Fatalf("a finished shift has no next step")
	}
	if got := e.Step(t0, nil); len(got) != 0 {
		t.Fatalf("deleted shift still active: %v", got)
	}
	if len(e.tracks) != 0 {
		t.Fatalf("deleted shift still tracked")
	}
}

func TestResumeFromProgressAndNextDue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	prog := map[string]config.ShiftProgress{"s1": {ID: "s1", AppliedPercent: 20, TargetPercent: 50, State: config.ShiftRunning, Version: 3}}
	e := NewExecutor(prog, t0)
	in := intent(config.ShiftRunning, 50, 20, 30*time.Second) // 3 steps, 10s apart
	if got := applied(t, e.Step(t0, in)); got != 20 {
		t.Fatalf("applied %d right after takeover, want 20 (no extra step)", got)
	}
	if due := e.NextDue(in); !due.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("next due %v, want %v", due, t0.Add(10*time.Second))
	}
	if got := applied(t, e.Step(t0.Add(10*time.Second), in)); got != 40 {
		t.Fatalf("applied %d, want 40", got)
	}
	if got := applied(t, e.Step(t0.Add(25*time.Second), in)); got != 50 {
		t.Fatalf("applied %d, want 50 (capped at the target)", got)
	}
	// Unchanged progress is not rewritten.
	ps := e.Progress(t0, in, func(config.Shift) uint64 { return 4 })
	if len(ps) != 1 || ps[0].State != config.ShiftDone {
		t.Fatalf("progress %v", ps)
	}
	e.MarkWritten(ps[0])
	if ps := e.Progress(t0, in, func(config.Shift) uint64 { return 4 }); len(ps) != 0 {
		t.Fatalf("unchanged progress rewritten: %v", ps)
	}
}

// A pause and resume never hurries a step: toggled right after a step, the
// next one still comes a whole interval after it; paused before its first
// step, a shift starts at once when resumed; paused under an earlier
// leader, it waits a whole interval after the resume.
func TestResumeKeepsThePace(t *testing.T) {
	t0 := time.Unix(1000, 0)
	in := intent(config.ShiftPending, 30, 10, 3*time.Minute) // a step a minute
	at := func(e *Executor, d time.Duration, state string) int {
		t.Helper()
		sh := in["s1"]
		sh.State = state
		in["s1"] = sh
		return applied(t, e.Step(t0.Add(d), in))
	}
	e := NewExecutor(nil, t0)
	for _, c := range []struct {
		at    time.Duration
		state string
		want  int
	}{
		{0, config.ShiftPending, 10},
		{time.Second, config.ShiftPaused, 10},
		{2 * time.Second, config.ShiftRunning, 10}, // not a step: 59 s of the minute were left
		{3 * time.Second, config.ShiftPaused, 10},
		{4 * time.Second, config.ShiftRunning, 10},
		{61 * time.Second, config.ShiftRunning, 10}, // the 2 s paused do not count
		{62 * time.Second, config.ShiftRunning, 20},
	} {
		if got := at(e, c.at, c.state); got != c.want {
			t.Fatalf("at %v (%s): applied %d, want %d", c.at, c.state, got, c.want)
		}
	}
	if due := e.NextDue(in); !due.Equal(t0.Add(122 * time.Second)) {
		t.Fatalf("next due %v, want %v", due, t0.Add(122*time.Second))
	}

	// Paused before the scheduler ever ran it: resumed, the first step at once.
	e = NewExecutor(nil, t0)
	if got := at(e, 0, config.ShiftPaused); got != 0 {
		t.Fatalf("paused before its first step: applied %d, want 0", got)
	}
	if got := at(e, 5*time.Second, config.ShiftRunning); got != 10 {
		t.Fatalf("resumed before its first step: applied %d, want 10 at once", got)
	}

	// Paused under an earlier leader: a whole interval after the resume.
	e = NewExecutor(map[string]config.ShiftProgress{"s1": {ID: "s1", AppliedPercent: 10, TargetPercent: 30, State: config.ShiftPaused}}, t0)
	if got := at(e, 10*time.Second, config.ShiftPaused); got != 10 {
		t.Fatalf("paused: applied %d, want 10", got)
	}
	if got := at(e, 20*time.Second, config.ShiftRunning); got != 10 {
		t.Fatalf("resumed: applied %d, want 10 (no step at once)", got)
	}
	if got := at(e, 79*time.Second, config.ShiftRunning); got != 10 {
		t.Fatalf("59 s after the resume: applied %d, want 10", got)
	}
	if got := at(e, 80*time.Second, config.ShiftRunning); got != 20 {
		t.Fatalf("a minute after the resume: applied %d, want 20", got)
	}
}

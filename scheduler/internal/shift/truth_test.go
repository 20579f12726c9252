package shift

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
)

func TestInvalidIntentIsRecordedNotRun(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e := NewExecutor(nil, t0)
	in := intent(config.ShiftPending, 30, 10, 0)
	sh := in["s1"]
	sh.Ramp = config.Duration(-5 * time.Second)
	in["s1"] = sh
	if act := e.Step(t0, in); len(act) != 0 {
		t.Fatalf("invalid shift applied: %v", act)
	}
	ps := e.Progress(t0, in, func(config.Shift) uint64 { return 3 })
	if len(ps) != 1 || ps[0].State != config.ShiftInvalid || ps[0].AppliedPercent != 0 || !strings.Contains(ps[0].Message, "--ramp -5s is negative") {
		t.Fatalf("progress %+v, want invalid naming the ramp", ps)
	}
	e.MarkWritten(ps[0])
	if again := e.Progress(t0, in, func(config.Shift) uint64 { return 3 }); len(again) != 0 {
		t.Fatalf("unchanged progress rewritten: %+v", again)
	}
	// Step larger than the percent is refused by the same rule set.
	in2 := intent(config.ShiftPending, 5, 10, time.Minute)
	e.Step(t0, in2)
	ps = e.Progress(t0, in2, func(config.Shift) uint64 { return 3 })
	if len(ps) != 1 || ps[0].State != config.ShiftInvalid || !strings.Contains(ps[0].Message, "--step 10 is larger than --percent 5") {
		t.Fatalf("progress %+v", ps)
	}
}

func TestCappedShiftReportsWhatItMoved(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e := NewExecutor(nil, t0)
	in := intent(config.ShiftPending, 50, 10, 0)
	act := e.Step(t0, in)
	if applied(t, act) != 50 {
		t.Fatalf("applied %v", act)
	}
	e.Observe(act, map[string]Result{"s1": {Moved: 15, Reason: "IDC1 had 15"}})
	ps := e.Progress(t0, in, func(config.Shift) uint64 { return 7 })
	want := config.ShiftProgress{ID: "s1", AppliedPercent: 15, TargetPercent: 50, State: config.ShiftDone, Version: 7,
		Message: "15 of 50 points: IDC1 had 15", UpdatedAt: t0}
	if len(ps) != 1 || ps[0] != want {
		t.Fatalf("progress %+v, want %+v", ps, want)
	}
	// A new leader resumes a capped done shift as done, asking all 50.
	e2 := NewExecutor(map[string]config.ShiftProgress{"s1": ps[0]}, t0)
	if a := applied(t, e2.Step(t0, in)); a != 50 {
		t.Fatalf("new leader applies %d, want 50", a)
	}
	// An active shift whose row was not planned moved nothing, and says so.
	e.Observe(act, nil)
	ps = e.Progress(t0, in, func(config.Shift) uint64 { return 7 })
	if len(ps) != 1 || ps[0].AppliedPercent != 0 || ps[0].Message != "0 of 50 points: proxy cluster BFE1 has no planned row for cluster demo-main" {
		t.Fatalf("progress %+v", ps)
	}
}

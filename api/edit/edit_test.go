package edit

import (
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

func TestPinReplacesTheSameRow(t *testing.T) {
	s := &config.State{}
	Pin(s, config.Pin{ProxyCluster: "BFE1", Cluster: "c", Weights: map[string]int{"SC1": 100}})
	Pin(s, config.Pin{ProxyCluster: "BFE2", Cluster: "c", Weights: map[string]int{"SC1": 100}})
	Pin(s, config.Pin{ProxyCluster: "BFE1", Cluster: "c", Weights: map[string]int{"SC2": 100}, Reason: "r"})
	if len(s.Pins) != 2 || s.Pins[0].Reason != "r" || s.Pins[0].Weights["SC2"] != 100 {
		t.Fatalf("pins = %+v", s.Pins)
	}
	if err := Unpin(s, "c", "BFE1"); err != nil || len(s.Pins) != 1 || s.Pins[0].ProxyCluster != "BFE2" {
		t.Fatalf("unpin: %v %+v", err, s.Pins)
	}
	err := Unpin(s, "c", "BFE1")
	if err == nil || err.Error() != `no pinned row for cluster "c" and proxy cluster "BFE1"` {
		t.Fatalf("second unpin: %v", err)
	}
	if len(s.Pins) != 1 {
		t.Fatalf("a refused unpin changed the pins: %+v", s.Pins)
	}
}

func TestDrainUndrain(t *testing.T) {
	s := &config.State{}
	if err := Drain(s, config.Drain{Cluster: "c", SubCluster: "SC1", Reason: "idc"}); err != nil {
		t.Fatal(err)
	}
	if err := Drain(s, config.Drain{Cluster: "c", SubCluster: "SC1"}); err == nil || err.Error() != "c/SC1 is already drained" {
		t.Fatalf("second drain: %v", err)
	}
	d, err := Undrain(s, "c", "SC1")
	if err != nil || d.Reason != "idc" || len(s.Drains) != 0 {
		t.Fatalf("undrain: %v %+v %+v", err, d, s.Drains)
	}
	if _, err := Undrain(s, "c", "SC1"); err == nil || err.Error() != "c/SC1 is not drained" {
		t.Fatalf("second undrain: %v", err)
	}
}

func TestSetShiftState(t *testing.T) {
	for _, c := range []struct{ from, to, err string }{
		{config.ShiftRunning, config.ShiftPaused, ""},
		{config.ShiftPaused, config.ShiftRunning, ""},
		{config.ShiftDone, config.ShiftAborted, ""},
		{config.ShiftDone, config.ShiftPaused, "shift s is done: cannot pause it (it is finished; abort it to put the rows back)"},
		{config.ShiftPaused, config.ShiftPaused, "shift s is paused: cannot pause it (already paused)"},
		{config.ShiftRunning, config.ShiftRunning, "shift s is running: cannot resume it (only a paused shift resumes)"},
		{config.ShiftAborted, config.ShiftRunning, "shift s is aborted: cannot resume it"},
		{config.ShiftAborted, config.ShiftAborted, "shift s is aborted: cannot abort it"},
		{config.ShiftRunning, "done", `shift s: state "done" is not one of paused, running, aborted`},
	} {
		sh := config.Shift{ID: "s", State: c.from}
		err := SetShiftState(&sh, c.to)
		switch {
		case c.err == "" && (err != nil || sh.State != c.to):
			t.Errorf("%s→%s: %v, state %s", c.from, c.to, err, sh.State)
		case c.err != "" && (err == nil || err.Error() != c.err || sh.State != c.from):
			t.Errorf("%s→%s: err %v (want %q), state %s", c.from, c.to, err, c.err, sh.State)
		}
	}
}

func TestCheckNamesTheRule(t *testing.T) {
	err := Check(&config.State{})
	if err == nil || !strings.HasPrefix(err.Error(), "the new desired state is invalid; nothing was written:\n") {
		t.Fatalf("Check(empty) = %v", err)
	}
}

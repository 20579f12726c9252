package probe

import (
	"errors"
	"testing"
)

func TestTrackerRiseFall(t *testing.T) {
	fail := errors.New("down")
	tr, err := NewTracker(2, 3)
	if err != nil {
		t.Fatal(err)
	}
	if tr.State() != Unknown {
		t.Fatalf("initial %v", tr.State())
	}
	steps := []struct {
		err     error
		changed bool
		state   State
	}{
		{nil, true, Up},    // first result decides
		{fail, false, Up},  // 1 of 3
		{fail, false, Up},  // 2 of 3
		{nil, false, Up},   // resets the failure run
		{fail, false, Up},  // 1
		{fail, false, Up},  // 2
		{fail, true, Down}, // 3 → down
		{nil, false, Down}, // 1 of 2
		{fail, false, Down},
		{nil, false, Down}, // 1 of 2 again
		{nil, true, Up},    // 2 → up
	}
	for i, s := range steps {
		if got := tr.Observe(s.err); got != s.changed || tr.State() != s.state {
			t.Fatalf("step %d: changed=%v state=%v, want %v %v", i, got, tr.State(), s.changed, s.state)
		}
		if tr.LastErr() != s.err {
			t.Fatalf("step %d: LastErr %v", i, tr.LastErr())
		}
	}
}

func TestTrackerFirstFailure(t *testing.T) {
	tr, _ := NewTracker(1, 1)
	if !tr.Observe(errors.New("x")) || tr.State() != Down {
		t.Fatalf("first failure should decide Down, got %v", tr.State())
	}
	if !tr.Observe(nil) || tr.State() != Up {
		t.Fatalf("rise=1: one success should bring it up, got %v", tr.State())
	}
}

func TestTrackerBadThresholds(t *testing.T) {
	if _, err := NewTracker(0, 1); err == nil {
		t.Fatal("rise 0 accepted")
	}
	if _, err := NewTracker(1, 0); err == nil {
		t.Fatal("fall 0 accepted")
	}
}

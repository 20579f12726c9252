package probe

import "fmt"

// State is what a Tracker concluded from a run of probe results.
type State int

// Tracker states.
const (
	// Unknown: no probe has finished yet.
	Unknown State = iota
	// Up: healthy.
	Up
	// Down: unhealthy.
	Down
)

func (s State) String() string {
	switch s {
	case Up:
		return "up"
	case Down:
		return "down"
	default:
		return "unknown"
	}
}

// Tracker turns probe results into a state with rise/fall hysteresis: a
// Down target becomes Up after Rise consecutive successes, an Up target
// becomes Down after Fall consecutive failures. The very first result
// decides an Unknown target at once, so a fresh instance is neither kept
// out for Rise probes nor sent traffic before it answered.
//
// A Tracker is a plain value owned by one goroutine; it is not safe for
// concurrent use.
type Tracker struct {
	rise, fall int
	state      State
	succ, fail int // consecutive results of the other sign than state
	lastErr    error
}

// NewTracker returns an Unknown tracker. rise and fall must be ≥ 1.
func NewTracker(rise, fall int) (*Tracker, error) {
	if rise < 1 {
		return nil, fmt.Errorf("rise %d must be at least 1", rise)
	}
	if fall < 1 {
		return nil, fmt.Errorf("fall %d must be at least 1", fall)
	}
	return &Tracker{rise: rise, fall: fall}, nil
}

// Observe records one probe result (nil = success) and reports whether the
// state changed.
func (t *Tracker) Observe(err error) (changed bool) {
	t.lastErr = err
	ok := err == nil
	switch t.state {
	case Unknown:
		if ok {
			t.state = Up
		} else {
			t.state = Down
		}
		t.succ, t.fail = 0, 0
		return true
	case Up:
		if ok {
			t.fail = 0
			return false
		}
		t.fail++
		if t.fail >= t.fall {
			t.state, t.fail = Down, 0
			return true
		}
	case Down:
		if !ok {
			t.succ = 0
			return false
		}
		t.succ++
		if t.succ >= t.rise {
			t.state, t.succ = Up, 0
			return true
		}
	}
	return false
}

// State returns the current state.
func (t *Tracker) State() State { return t.state }

// LastErr returns the error of the most recent probe (nil after a success).
func (t *Tracker) LastErr() error { return t.lastErr }

// Package shift executes shift intents over time: it decides, at each
// moment, how many points of each shift are applied, and the progress to
// record. It is pure (the clock is a parameter) and not safe for concurrent
// use: the scheduler's control loop owns one Executor.
//
// Rules:
//   - pending or running: AppliedPercent rises by StepPercent (default 10)
//     every Ramp / ceil(Percent / StepPercent), capped at Percent; with
//     Ramp 0 the whole Percent applies at once.
//   - paused: AppliedPercent holds; running again continues the ramp where
//     it stood: the next step falls due after what was left of its
//     interval when the shift paused (a pause and resume never hurries a
//     step; a shift paused before its first step starts at once).
//   - aborted: the shift leaves the view (rows go back), progress says aborted.
//   - done (AppliedPercent = Percent): the shift stays applied as a standing
//     intent as long as its key exists; deleting the key (or aborting) ends it.
//   - invalid: an intent breaking a rule of config.Shift.Check is never run;
//     its progress says invalid with the rule it breaks (never a log line
//     only).
//
// Progress reports what the planner really moved (Observe): a shift capped
// by what its From IDC had says "15 of 50 points: IDC1 had 15".
package shift

import (
	"fmt"
	"sort"
	"time"

	"github.com/sluicelb/sluice/api/config"
)

// DefaultStep is the step in points when a shift gives none.
const DefaultStep = config.ShiftDefaultStep

// Active is a shift with the points applied now (the planner's input).
type Active struct {
	Shift          config.Shift
	AppliedPercent int
}

type track struct {
	applied  int
	lastStep time.Time
	// pausedAt is when the shift paused (zero: not paused, or paused
	// before this leader knew when).
	pausedAt time.Time
	state    string
	// version carrying applied, once published (0: not yet)
	version uint64
	written config.ShiftProgress
	// invalid is why the intent is not run (config.Shift.Check).
	invalid string
	// result is what the last plan moved, once observed.
	result   Result
	observed bool
}

// Result is what the planner moved for one shift, in percent of the row.
type Result struct {
	Moved int
	// Reason is why Moved is below what was asked, e.g. "IDC1 had 15".
	Reason string
}

// Executor tracks every shift's applied points.
type Executor struct {
	tracks map[string]*track
}

// NewExecutor starts from the progress recorded in etcd (a new leader
// continues where the previous one stopped).
func NewExecutor(progress map[string]config.ShiftProgress, now time.Time) *Executor {
	e := &Executor{tracks: map[string]*track{}}
	for id, p := range progress {
		applied := p.AppliedPercent
		if p.State == config.ShiftDone {
			// A capped shift records what it moved; what it asks is all.
			applied = max(applied, p.TargetPercent)
		}
		t := &track{applied: applied, lastStep: now, state: p.State, version: p.Version, written: p}
		if p.State == config.ShiftPaused {
			// Paused under an earlier leader: resumed, the next step is
			// a whole interval away.
			t.pausedAt = now
		}
		e.tracks[id] = t
	}
	return e
}

// Step advances every shift to now and returns the active shifts (sorted by
// id) for the planner. Shifts missing from intents are forgotten.
func (e *Executor) Step(now time.Time, intents map[string]config.Shift) []Active {
	for id := range e.tracks {
		if _, ok := intents[id]; !ok {
			delete(e.tracks, id)
		}
	}
	ids := make([]string, 0, len(intents))
	for id := range intents {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []Active
	for _, id := range ids {
		sh := intents[id]
		t := e.tracks[id]
		if t == nil {
			t = &track{lastStep: now}
			e.tracks[id] = t
		}
		target := max(0, min(sh.Percent, 100))
		if err := sh.Check(); err != nil {
			t.state, t.invalid, t.applied = config.ShiftInvalid, err.Error(), 0
			continue
		}
		t.invalid = ""
		switch sh.State {
		case config.ShiftAborted:
			t.state = config.ShiftAborted
			continue
		case config.ShiftPaused:
			if t.state != config.ShiftPaused {
				t.pausedAt = now
			}
			t.state = config.ShiftPaused
		case config.ShiftPending, config.ShiftRunning, config.ShiftDone, "":
			if t.applied >= target {
				t.applied = target
				t.state = config.ShiftDone
				break
			}
			switch {
			case t.state == config.ShiftRunning:
			case t.state == config.ShiftPaused && t.applied > 0 && !t.pausedAt.IsZero():
				// Resuming: the time paused does not count toward the
				// next step.
				t.lastStep = t.lastStep.Add(now.Sub(t.pausedAt))
			default:
				// Starting: the first step is due at once.
				t.lastStep = now.Add(-interval(sh))
			}
			t.state, t.pausedAt = config.ShiftRunning, time.Time{}
			iv := interval(sh)
			for t.applied < target && !now.Before(t.lastStep.Add(iv)) {
				t.applied = min(target, t.applied+step(sh, target))
				t.lastStep = t.lastStep.Add(iv)
				if iv == 0 {
					break
				}
			}
			if t.applied >= target {
				t.state = config.ShiftDone
			}
		default:
			// Unknown state: hold what is applied.
		}
		if t.applied > 0 {
			out = append(out, Active{Shift: sh, AppliedPercent: t.applied})
		}
	}
	return out
}

// NextDue is when the next ramp step falls due (zero: nothing scheduled).
func (e *Executor) NextDue(intents map[string]config.Shift) time.Time {
	var next time.Time
	for id, sh := range intents {
		t := e.tracks[id]
		if t == nil || t.state != config.ShiftRunning || t.applied >= sh.Percent {
			continue
		}
		d := t.lastStep.Add(interval(sh))
		if next.IsZero() || d.Before(next) {
			next = d
		}
	}
	return next
}

// Progress returns the progress records that differ from what was last
// written (MarkWritten), given the version that now carries each shift.
func (e *Executor) Progress(now time.Time, intents map[string]config.Shift, version func(config.Shift) uint64) []config.ShiftProgress {
	ids := make([]string, 0, len(e.tracks))
	for id := range e.tracks {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []config.ShiftProgress
	for _, id := range ids {
		t := e.tracks[id]
		sh, ok := intents[id]
		if !ok {
			continue
		}
		applied := t.applied
		target := max(0, min(sh.Percent, 100))
		msg := ""
		switch {
		case t.state == config.ShiftAborted || t.state == config.ShiftInvalid:
			applied = 0
			msg = t.invalid
		case t.observed && applied > 0 && t.result.Moved < applied:
			applied = max(0, t.result.Moved)
			msg = fmt.Sprintf("%d of %d points: %s", applied, target, t.result.Reason)
		}
		p := config.ShiftProgress{
			ID: id, AppliedPercent: applied, TargetPercent: target,
			State: t.state, Version: version(sh), Message: msg,
		}
		w := t.written
		if w.AppliedPercent == p.AppliedPercent && w.TargetPercent == p.TargetPercent &&
			w.State == p.State && w.Version == p.Version && w.Message == p.Message {
			continue
		}
		p.UpdatedAt = now.UTC()
		out = append(out, p)
	}
	return out
}

// Observe records what the planner moved for the active shifts (by id);
// an active shift missing from results moved nothing because its row was
// not planned.
func (e *Executor) Observe(active []Active, results map[string]Result) {
	for _, a := range active {
		t := e.tracks[a.Shift.ID]
		if t == nil {
			continue
		}
		r, ok := results[a.Shift.ID]
		if !ok {
			r = Result{Reason: fmt.Sprintf("proxy cluster %s has no planned row for cluster %s", a.Shift.ProxyCluster, a.Shift.Cluster)}
		}
		t.result, t.observed = r, true
	}
}

// MarkWritten records that p is stored in etcd.
func (e *Executor) MarkWritten(p config.ShiftProgress) {
	if t := e.tracks[p.ID]; t != nil {
		t.written = p
	}
}

func step(sh config.Shift, target int) int {
	if sh.Ramp.D() <= 0 {
		return target
	}
	s := sh.StepPercent
	if s <= 0 {
		s = DefaultStep
	}
	return s
}

// interval is Ramp / number of steps; 0 without a ramp.
func interval(sh config.Shift) time.Duration {
	if sh.Ramp.D() <= 0 || sh.Percent <= 0 {
		return 0
	}
	s := sh.StepPercent
	if s <= 0 {
		s = DefaultStep
	}
	n := (sh.Percent + s - 1) / s
	return sh.Ramp.D() / time.Duration(n)
}

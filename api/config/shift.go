package config

import (
	"fmt"
	"strings"
	"time"
)

// Shift states. The operator writes pending, paused, running (resume) and
// aborted; the scheduler moves a shift to running and done.
const (
	ShiftPending = "pending"
	ShiftRunning = "running"
	ShiftPaused  = "paused"
	ShiftAborted = "aborted"
	ShiftDone    = "done"
)

// Shift is an operator's intent to move Percent points of a proxy cluster's
// traffic for one backend cluster from the sub-clusters in IDC From to those
// in IDC To, optionally ramped over Ramp in steps of StepPercent points.
// It is stored under its own key (api/keys Shift) so that pause, resume and
// abort are compare-and-swap edits of one small value.
type Shift struct {
	ID           string `json:"id"`
	ProxyCluster string `json:"proxy_cluster"`
	Cluster      string `json:"cluster"`
	From         string `json:"from"`
	To           string `json:"to"`
	// Percent is points of the row's denominator (as a percentage) to move,
	// 1..100; capped by what the From IDC has.
	Percent int `json:"percent"`
	// Ramp spreads the move over this long; 0 moves at once.
	Ramp Duration `json:"ramp,omitempty"`
	// StepPercent is the size of each ramp step in points. Default 10.
	StepPercent int    `json:"step_percent,omitempty"`
	State       string `json:"state"`
	Reason      string `json:"reason,omitempty"`
	Author      string `json:"author,omitempty"`
	// Urgent (lbctl shift --urgent): every step skips the rollout stages.
	Urgent    bool      `json:"urgent,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// ShiftProgress is written by the scheduler under api/keys ShiftProgress.
type ShiftProgress struct {
	ID string `json:"id"`
	// AppliedPercent is how many points have been moved so far: what the
	// planner really moved, below the ramp's step when the From IDC had
	// less (Message says so, e.g. "15 of 50 points: IDC1 had 15").
	AppliedPercent int `json:"applied_percent"`
	// TargetPercent is the shift's Percent.
	TargetPercent int    `json:"target_percent"`
	State         string `json:"state"`
	// Version is the snapshot version that carries AppliedPercent.
	Version   uint64    `json:"version"`
	UpdatedAt time.Time `json:"updated_at"`
	// Message says why a shift moved less than asked, or why it was not
	// run (state invalid).
	Message string `json:"message,omitempty"`
}

// Shift limits shared by lbctl (before writing) and the scheduler (before
// running an intent).
const (
	// ShiftDefaultStep is the step in points when a shift gives none.
	ShiftDefaultStep = 10
	// ShiftMinStepInterval is the shortest time between two ramp steps: a
	// ramp too short for its number of steps is a typo, not an intent.
	ShiftMinStepInterval = time.Second
)

// ShiftProgress states the scheduler writes besides the shift states:
// invalid means the intent breaks a rule of Shift.Check and was not run
// (the reason is in Message).
const ShiftInvalid = "invalid"

// Check applies the rules every shift intent must follow, the same in lbctl
// and in the scheduler. It names the field (as lbctl's flag), the value and
// the rule. It does not check the names against the desired state.
func (s Shift) Check() error {
	var errs []string
	add := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	if s.ProxyCluster == "" {
		add("--proxy-cluster is empty")
	}
	if s.Cluster == "" {
		add("--cluster is empty")
	}
	if s.From == "" || s.To == "" {
		add("--from and --to must both name an IDC")
	} else if s.From == s.To {
		add("--from and --to are both %q: a shift moves traffic between two IDCs", s.From)
	}
	if s.Percent < 1 || s.Percent > 100 {
		add("--percent %d is outside 1..100", s.Percent)
	}
	if s.Ramp < 0 {
		add("--ramp %s is negative: give a positive ramp, or none to move at once", s.Ramp)
	}
	if s.StepPercent < 0 || s.StepPercent > 100 {
		add("--step %d is outside 1..100", s.StepPercent)
	}
	if s.Ramp > 0 {
		step := s.StepPercent
		if step == 0 {
			step = ShiftDefaultStep
		}
		if s.Percent >= 1 && step > s.Percent {
			add("--step %d is larger than --percent %d: the ramp would move everything in one step", step, s.Percent)
		}
		if s.Percent >= 1 && step >= 1 && step <= 100 {
			n := (s.Percent + step - 1) / step
			if iv := s.Ramp.D() / time.Duration(n); iv < ShiftMinStepInterval {
				add("--ramp %s in %d steps of %d points is %s per step, under the %s minimum", s.Ramp, n, step, iv, ShiftMinStepInterval)
			}
		}
	}
	switch s.State {
	case ShiftPending, ShiftRunning, ShiftPaused, ShiftAborted, ShiftDone:
	default:
		add("state %q is not one of %s, %s, %s, %s, %s", s.State, ShiftPending, ShiftRunning, ShiftPaused, ShiftAborted, ShiftDone)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("shift %s: %s", s.ID, strings.Join(errs, "; "))
}

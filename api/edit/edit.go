// Package edit holds the operator's targeted edits of the desired state and
// of shift intents — pin/unpin a row, drain/undrain a sub-cluster, pause,
// resume or abort a shift — as pure functions with the error texts operators
// see. lbctl and the scheduler's dashboard both write through them (each
// then validates with Check and writes with compare-and-swap), so the two
// accept and refuse exactly the same changes, in the same words.
package edit

import (
	"fmt"
	"slices"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/validate"
)

// Pin sets p as the pinned row of its proxy cluster and cluster, replacing
// an earlier pin of the same row. The weights are checked by Check.
func Pin(s *config.State, p config.Pin) {
	if i := slices.IndexFunc(s.Pins, func(x config.Pin) bool { return x.Cluster == p.Cluster && x.ProxyCluster == p.ProxyCluster }); i >= 0 {
		s.Pins[i] = p
		return
	}
	s.Pins = append(s.Pins, p)
}

// Unpin removes the pinned row of proxyCluster for cluster.
func Unpin(s *config.State, cluster, proxyCluster string) error {
	i := slices.IndexFunc(s.Pins, func(p config.Pin) bool { return p.Cluster == cluster && p.ProxyCluster == proxyCluster })
	if i < 0 {
		return fmt.Errorf("no pinned row for cluster %q and proxy cluster %q", cluster, proxyCluster)
	}
	s.Pins = slices.Delete(s.Pins, i, i+1)
	return nil
}

// Drain adds d; a sub-cluster is drained once.
func Drain(s *config.State, d config.Drain) error {
	if slices.ContainsFunc(s.Drains, func(x config.Drain) bool { return x.Cluster == d.Cluster && x.SubCluster == d.SubCluster }) {
		return fmt.Errorf("%s/%s is already drained", d.Cluster, d.SubCluster)
	}
	s.Drains = append(s.Drains, d)
	return nil
}

// Undrain removes the drain of cluster/subCluster and returns it.
func Undrain(s *config.State, cluster, subCluster string) (config.Drain, error) {
	i := slices.IndexFunc(s.Drains, func(d config.Drain) bool { return d.Cluster == cluster && d.SubCluster == subCluster })
	if i < 0 {
		return config.Drain{}, fmt.Errorf("%s/%s is not drained", cluster, subCluster)
	}
	d := s.Drains[i]
	s.Drains = slices.Delete(s.Drains, i, i+1)
	return d, nil
}

// SetShiftState moves a shift intent to state (config.ShiftPaused,
// ShiftRunning or ShiftAborted); see ShiftState.
func SetShiftState(sh *config.Shift, state string) error {
	return ShiftState(sh, nil, state)
}

// ShiftState moves a shift intent to state (config.ShiftPaused, ShiftRunning
// to resume, or ShiftAborted), given the scheduler's progress (nil: none
// yet). Pause applies to a pending or running shift, resume to a paused
// one; abort to any shift not already aborted (aborting a done shift puts
// its rows back). Anything else is an error naming the shift and its state.
func ShiftState(sh *config.Shift, p *config.ShiftProgress, state string) error {
	switch state {
	case config.ShiftPaused, config.ShiftRunning, config.ShiftAborted:
	default:
		return fmt.Errorf("shift %s: state %q is not one of %s, %s, %s", sh.ID, state, config.ShiftPaused, config.ShiftRunning, config.ShiftAborted)
	}
	cur := sh.State
	detail := ""
	if p != nil && cur != config.ShiftAborted {
		switch p.State {
		case config.ShiftDone:
			cur = config.ShiftDone
			detail = fmt.Sprintf(" (%d of %d points moved)", p.AppliedPercent, p.TargetPercent)
		case config.ShiftInvalid:
			cur = config.ShiftInvalid
			detail = ": " + p.Message
		}
	}
	verb := map[string]string{config.ShiftPaused: "pause", config.ShiftRunning: "resume", config.ShiftAborted: "abort"}[state]
	refuse := func(why string) error {
		return fmt.Errorf("shift %s is %s%s: cannot %s it%s", sh.ID, cur, detail, verb, why)
	}
	switch {
	case cur == config.ShiftAborted:
		return refuse("")
	case cur == config.ShiftDone && state != config.ShiftAborted:
		return refuse(" (it is finished; abort it to put the rows back)")
	case cur == config.ShiftInvalid && state != config.ShiftAborted:
		return refuse(" (abort it and create a valid one)")
	case state == config.ShiftPaused && cur == config.ShiftPaused:
		return refuse(" (already paused)")
	case state == config.ShiftRunning && cur != config.ShiftPaused:
		return refuse(" (only a paused shift resumes)")
	}
	sh.State = state
	return nil
}

// Check validates the desired state about to be written.
func Check(s *config.State) error {
	if err := validate.State(s); err != nil {
		return fmt.Errorf("the new desired state is invalid; nothing was written:\n%w", err)
	}
	return nil
}

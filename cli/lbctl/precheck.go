package lbctl

import (
	"context"
	"fmt"
	"slices"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/scheduler/plan"
	"github.com/sluicelb/sluice/scheduler/precheck"
)

// A write the scheduler could not publish is refused before it is written
// (scheduler/precheck, which the dashboard calls too): lbctl plans the
// would-be inputs with the scheduler's own planner and compares with the
// plan of the inputs as stored, so that only what the write breaks is
// refused.

// allowFullDropFlag overrides the one rule an operator may choose to break.
const allowFullDropFlag = precheck.AllowFullDropFlag

// checkPlan refuses (exit 1, nothing written) when the scheduler could not
// publish the inputs with next as the desired state where it could before.
// With --allow-full-drop (apply), pins whose rows would drop everything get
// allow_full_drop, and next is checked again.
func (e *env) checkPlan(ctx context.Context, next *config.State, what string) error {
	ec, err := e.etcd()
	if err != nil {
		return err
	}
	fresh, err := precheck.Fresh(ctx, ec, e.layout, next, nil)
	if err != nil {
		return err
	}
	if len(fresh) == 0 {
		return nil
	}
	if next != nil && e.c.Bool(allowFullDropFlag) {
		if notes, ok := allowPins(next, fresh); ok {
			// Said once the state with those pins passes the check, so
			// a refusal is never preceded by a line that did not happen.
			if err := e.checkPlan(ctx, next, what); err != nil {
				return err
			}
			for _, n := range notes {
				fmt.Fprintln(e.info(), n)
			}
			return nil
		}
	}
	return withCode(ExitError, &precheck.Refusal{What: what, Rejections: fresh, Override: e.fullDropOverride()})
}

// noFlagOverride is what a refusal of full drops says to a command without
// --allow-full-drop (undrain, weights unpin, shift, history rollback...).
const noFlagOverride = "No flag of this command overrides this: change the write."

// fullDropOverride is a full-drop refusal's last line for the running
// command: empty (precheck's "run again with --allow-full-drop") when the
// command has that flag, noFlagOverride when it has not, so a refusal
// never points to a flag the command would reject.
func (e *env) fullDropOverride() string {
	if e.c != nil && e.c.Command != nil && findFlag(e.c.Command.Flags, allowFullDropFlag) != nil {
		return ""
	}
	return noFlagOverride
}

// checkShiftPlan refuses (exit 1, nothing written) a new shift the
// scheduler could not publish once it moved its whole percent.
func (e *env) checkShiftPlan(ctx context.Context, sh config.Shift) error {
	ec, err := e.etcd()
	if err != nil {
		return err
	}
	err = precheck.CheckShift(ctx, ec, e.layout, sh)
	if r, ok := err.(*precheck.Refusal); ok {
		r.Override = e.fullDropOverride()
	}
	return exitRefused(err)
}

// exitRefused gives a refusal of scheduler/precheck lbctl's exit code 1.
func exitRefused(err error) error {
	if _, ok := err.(*precheck.Refusal); ok {
		return withCode(ExitError, err)
	}
	return err
}

// allowPins sets allow_full_drop on the pins of rows that would drop all
// traffic and returns what to say of each; false, and st untouched, when a
// rejection has another reason (or no such pin).
func allowPins(st *config.State, rej []plan.Rejection) ([]string, bool) {
	var pins []int
	var notes []string
	for _, r := range rej {
		if len(r.FullDrops) == 0 || len(r.Errs) != len(r.FullDrops) {
			return nil, false
		}
		for _, c := range r.FullDrops {
			i := slices.IndexFunc(st.Pins, func(p config.Pin) bool { return p.ProxyCluster == r.ProxyCluster && p.Cluster == c })
			if i < 0 || st.Pins[i].AllowFullDrop {
				return nil, false
			}
			pins = append(pins, i)
			notes = append(notes, fmt.Sprintf("--%s: the pin of %s's row of %s gets allow_full_drop: it drops all its traffic", allowFullDropFlag, r.ProxyCluster, c))
		}
	}
	for _, i := range pins {
		st.Pins[i].AllowFullDrop = true
	}
	return notes, true
}

// what names the write of the running command: e.writing, else e.g. "the
// result of lbctl apply".
func (e *env) what() string {
	if e.writing != "" {
		return e.writing
	}
	if e.c == nil || e.c.Command == nil {
		return "this write"
	}
	return precheck.WhatCommand(e.c.Command.FullName())
}

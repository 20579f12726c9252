package lbctl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/scheduler/inventory"
	"github.com/sluicelb/sluice/scheduler/plan"
)

// A write the scheduler could not publish is refused before it is written:
// lbctl plans the would-be inputs with the scheduler's own planner
// (plan.Check on inventory.Load) and compares with the plan of the inputs
// as stored, so that only what the write breaks is refused.

// allowFullDropFlag overrides the one rule an operator may choose to break.
const allowFullDropFlag = "allow-full-drop"

// checkPlan refuses (exit 1, nothing written) when the scheduler could not
// publish the inputs with next as the desired state (nil: the stored one)
// and extra shifts applied in full, where it could before. With
// --allow-full-drop (apply), pins whose rows would drop everything get
// allow_full_drop, and next is checked again.
func (e *env) checkPlan(ctx context.Context, next *config.State, extra []plan.ActiveShift, what string) error {
	cli, err := e.etcd()
	if err != nil {
		return err
	}
	before, err := e.rejections(ctx, cli, nil, nil)
	if err != nil {
		return err
	}
	after, err := e.rejections(ctx, cli, next, extra)
	if err != nil {
		return err
	}
	fresh := slices.DeleteFunc(after, func(r plan.Rejection) bool {
		return slices.ContainsFunc(before, func(b plan.Rejection) bool {
			return b.ProxyCluster == r.ProxyCluster && b.Errs.Error() == r.Errs.Error()
		})
	})
	if len(fresh) == 0 {
		return nil
	}
	if next != nil && e.c.Bool(allowFullDropFlag) && allowPins(e, next, fresh) {
		return e.checkPlan(ctx, next, extra, what)
	}
	return refusal(what, fresh)
}

// rejections loads the scheduler's inputs (st replacing the stored desired
// state when not nil) and plans them.
func (e *env) rejections(ctx context.Context, cli *clientv3.Client, st *config.State, extra []plan.ActiveShift) ([]plan.Rejection, error) {
	v, err := inventory.Load(ctx, cli, e.layout, st)
	if err != nil {
		return nil, err
	}
	if v.State == nil {
		return nil, nil // nothing stored (or nothing valid): nothing to compare
	}
	pv := plan.View{State: v.State, Members: v.Members, Demand: v.Demand, Shifts: activeShifts(v)}
	pv.Shifts = append(pv.Shifts, extra...)
	rej, err := plan.Check(pv)
	if errors.Is(err, plan.ErrNoState) {
		return nil, nil
	}
	return rej, err
}

// activeShifts are the shifts as far as the scheduler recorded them.
func activeShifts(v inventory.View) []plan.ActiveShift {
	var out []plan.ActiveShift
	for _, id := range sortedKeys(v.Shifts) {
		sh := v.Shifts[id].Shift
		if p, ok := v.Progress[id]; ok && sh.State != config.ShiftAborted && p.AppliedPercent > 0 {
			out = append(out, plan.ActiveShift{Shift: sh, AppliedPercent: p.AppliedPercent})
		}
	}
	return out
}

// allowPins sets allow_full_drop on the pins of rows that would drop all
// traffic; false when a rejection has another reason (or no such pin).
func allowPins(e *env, st *config.State, rej []plan.Rejection) bool {
	for _, r := range rej {
		if len(r.FullDrops) == 0 || len(r.Errs) != len(r.FullDrops) {
			return false
		}
		for _, c := range r.FullDrops {
			i := slices.IndexFunc(st.Pins, func(p config.Pin) bool { return p.ProxyCluster == r.ProxyCluster && p.Cluster == c })
			if i < 0 || st.Pins[i].AllowFullDrop {
				return false
			}
			st.Pins[i].AllowFullDrop = true
			fmt.Fprintf(e.info(), "--%s: the pin of %s's row of %s gets allow_full_drop: it drops all its traffic\n", allowFullDropFlag, r.ProxyCluster, c)
		}
	}
	return true
}

// refusal says what the scheduler would refuse and what overrides it.
func refusal(what string, rej []plan.Rejection) error {
	var b strings.Builder
	fmt.Fprintf(&b, "refused: the scheduler could not publish %s; nothing was written:", what)
	drops := true
	for _, r := range rej {
		for _, c := range r.FullDrops {
			fmt.Fprintf(&b, "\n  proxy cluster %s, cluster %s: its pinned row would send every request to %s (nothing left to serve it)", r.ProxyCluster, c, config.Blackhole)
		}
		for _, x := range r.Errs {
			fmt.Fprintf(&b, "\n  proxy cluster %s: %s", r.ProxyCluster, x.Error())
		}
		drops = drops && len(r.FullDrops) > 0 && len(r.Errs) == len(r.FullDrops)
	}
	if drops {
		fmt.Fprintf(&b, "\nTo drop all that traffic on purpose, run again with --%s.", allowFullDropFlag)
	} else {
		b.WriteString("\nNo flag overrides this: change the write.")
	}
	return withCode(ExitError, errors.New(b.String()))
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
	return "the result of lbctl " + e.c.Command.FullName()
}

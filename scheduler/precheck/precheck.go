// Package precheck refuses, before it is written, an operator's write the
// scheduler could not publish: it plans the would-be inputs with the
// scheduler's own planner (plan.Check on inventory.Load) and compares with
// the plan of the inputs as stored, so that only what the write breaks is
// refused. lbctl and the scheduler's dashboard call it on every write of
// the desired state and on every new shift, and refuse in the same words.
package precheck

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/scheduler/inventory"
	"github.com/sluicelb/sluice/scheduler/plan"
)

// AllowFullDropFlag is lbctl's flag that overrides the one rule an operator
// may choose to break (a row with nothing left but GSLB_BLACKHOLE); the
// refusal names it.
const AllowFullDropFlag = "allow-full-drop"

// Refusal is a write the scheduler could not publish: nothing was written.
// Its text is the one lbctl prints and the dashboard answers.
type Refusal struct {
	// What names the write, e.g. "the drain of demo-main/SC2" (What*).
	What string
	// Rejections are what the write breaks (not what was broken before).
	Rejections []plan.Rejection
	// Override says how the writer drops all that traffic on purpose when
	// every rejection is a full drop, in its user's terms; empty: lbctl's
	// flag (--allow-full-drop).
	Override string
}

func (r *Refusal) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "refused: the scheduler could not publish %s; nothing was written:", r.What)
	drops := true
	for _, x := range r.Rejections {
		for _, c := range x.FullDrops {
			fmt.Fprintf(&b, "\n  proxy cluster %s, cluster %s: its pinned row would send every request to %s (nothing left to serve it)", x.ProxyCluster, c, config.Blackhole)
		}
		for _, e := range x.Errs {
			fmt.Fprintf(&b, "\n  proxy cluster %s: %s", x.ProxyCluster, e.Error())
		}
		drops = drops && len(x.FullDrops) > 0 && len(x.Errs) == len(x.FullDrops)
	}
	switch {
	case drops && r.Override != "":
		b.WriteString("\n" + r.Override)
	case drops:
		fmt.Fprintf(&b, "\nTo drop all that traffic on purpose, run again with --%s.", AllowFullDropFlag)
	default:
		b.WriteString("\nNo flag overrides this: change the write.")
	}
	return b.String()
}

// Check refuses (*Refusal) when the scheduler could not publish the
// inputs in etcd with next as the desired state (nil: the stored one) and
// extra shifts applied in full, where it could before. Any other error is
// one of reading the inputs.
func Check(ctx context.Context, cli *clientv3.Client, layout keys.Layout, next *config.State, extra []plan.ActiveShift, what string) error {
	fresh, err := Fresh(ctx, cli, layout, next, extra)
	if err != nil || len(fresh) == 0 {
		return err
	}
	return &Refusal{What: what, Rejections: fresh}
}

// CheckShift is Check for a new shift: the stored desired state with sh
// applied in full (its whole percent moved, as once a ramp ends).
func CheckShift(ctx context.Context, cli *clientv3.Client, layout keys.Layout, sh config.Shift) error {
	return Check(ctx, cli, layout, nil, []plan.ActiveShift{{Shift: sh, AppliedPercent: sh.Percent}}, WhatShift(sh.ID))
}

// Fresh returns the rejections of the inputs with next and extra that the
// inputs as stored do not have (the same proxy cluster with the same
// reasons).
func Fresh(ctx context.Context, cli *clientv3.Client, layout keys.Layout, next *config.State, extra []plan.ActiveShift) ([]plan.Rejection, error) {
	before, err := rejections(ctx, cli, layout, nil, nil)
	if err != nil {
		return nil, err
	}
	after, err := rejections(ctx, cli, layout, next, extra)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(after, func(r plan.Rejection) bool {
		return slices.ContainsFunc(before, func(b plan.Rejection) bool {
			return b.ProxyCluster == r.ProxyCluster && b.Errs.Error() == r.Errs.Error()
		})
	}), nil
}

// rejections loads the scheduler's inputs (st replacing the stored desired
// state when not nil) and plans them.
func rejections(ctx context.Context, cli *clientv3.Client, layout keys.Layout, st *config.State, extra []plan.ActiveShift) ([]plan.Rejection, error) {
	v, err := inventory.Load(ctx, cli, layout, st)
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
	for _, id := range slices.Sorted(maps.Keys(v.Shifts)) {
		sh := v.Shifts[id].Shift
		if p, ok := v.Progress[id]; ok && sh.State != config.ShiftAborted && p.AppliedPercent > 0 {
			out = append(out, plan.ActiveShift{Shift: sh, AppliedPercent: p.AppliedPercent})
		}
	}
	return out
}

// The names of writes in a refusal, as lbctl names them; the dashboard
// names its actions the same.

// WhatPin names a pin of proxy cluster pc's row of cluster.
func WhatPin(pc, cluster string) string { return fmt.Sprintf("the pin of %s's row of %s", pc, cluster) }

// WhatDrain names a drain (on) or an undrain of cluster/sub.
func WhatDrain(on bool, cluster, sub string) string {
	name := "drain"
	if !on {
		name = "undrain"
	}
	return fmt.Sprintf("the %s of %s/%s", name, cluster, sub)
}

// WhatShift names a new shift.
func WhatShift(id string) string { return "shift " + id }

// WhatCommand names the result of an lbctl command (its full name, e.g.
// "weights unpin") that has no name of its own for its write.
func WhatCommand(command string) string { return "the result of lbctl " + command }

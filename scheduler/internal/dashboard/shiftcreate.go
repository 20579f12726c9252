package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/edit"
	"github.com/sluicelb/sluice/api/stateio"
	"github.com/sluicelb/sluice/scheduler/precheck"
)

// createShift writes a new shift intent as lbctl shift does (api/stateio):
// checked against the stored desired state (edit.CheckShift, lbctl's
// words), refused when the scheduler could not publish it
// (scheduler/precheck), then created only if its key does not exist yet.
func (d *Dashboard) createShift(ctx context.Context, a Action, author string) (actionResult, error) {
	if err := names(a.Cluster, a.ProxyCluster); err != nil {
		return actionResult{}, err
	}
	var ramp time.Duration
	if a.Ramp != "" {
		r, err := time.ParseDuration(a.Ramp)
		if err != nil || r <= 0 {
			return actionResult{}, badRequest(fmt.Errorf("invalid shift; nothing was written: --ramp %q: a ramp must be a positive duration like \"5m\" (leave it empty to move at once)", a.Ramp))
		}
		ramp = r
	}
	step := a.Step
	if step == 0 {
		step = config.ShiftDefaultStep // lbctl shift's --step default
	}
	now := d.o.Now()
	sh := config.Shift{
		ID: edit.NewID("shift", now), ProxyCluster: a.ProxyCluster, Cluster: a.Cluster, From: a.From, To: a.To,
		Percent: a.Percent, Ramp: config.Duration(ramp), StepPercent: step,
		State: config.ShiftPending, Reason: a.Reason, Author: author, CreatedAt: now.UTC(),
	}
	// Checked against the stored desired state, then refused when the
	// scheduler could not publish the shift once it moved its whole
	// percent, as lbctl shift checks it.
	rev, err := d.store().CreateShift(ctx, sh, func(ctx context.Context) error {
		return precheck.CheckShift(ctx, d.o.Client, d.o.Layout, sh)
	})
	if errors.Is(err, stateio.ErrConflict) {
		return actionResult{}, &actionError{http.StatusConflict, fmt.Errorf("%w; nothing was written, try again", err)}
	}
	if err != nil {
		return actionResult{}, writeError(err)
	}
	return actionResult{Message: edit.ShiftCreated(sh, rev) + " " + edit.ShiftNotLive(sh.ProxyCluster), Revision: rev, ProxyCluster: sh.ProxyCluster}, nil
}

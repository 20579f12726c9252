package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/edit"
)

// defaultStep is lbctl shift's --step default.
const defaultStep = 10

// createShift writes a new shift intent as lbctl shift does: checked
// against the stored desired state (edit.CheckShift, lbctl's words), then
// created only if its key does not exist yet.
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
		step = defaultStep
	}
	now := d.o.Now()
	sh := config.Shift{
		ID: edit.NewID("shift", now), ProxyCluster: a.ProxyCluster, Cluster: a.Cluster, From: a.From, To: a.To,
		Percent: a.Percent, Ramp: config.Duration(ramp), StepPercent: step,
		State: config.ShiftPending, Reason: a.Reason, Author: author, CreatedAt: now.UTC(),
	}
	st, _, err := d.readState(ctx)
	if err != nil {
		return actionResult{}, err
	}
	if err := edit.CheckShift(&st, sh); err != nil {
		return actionResult{}, badRequest(err)
	}
	k, err := d.o.Layout.Shift(sh.ID)
	if err != nil {
		return actionResult{}, badRequest(err)
	}
	b, _ := json.Marshal(sh)
	tr, err := d.o.Client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(clientv3.OpPut(k, string(b))).Commit()
	if err != nil {
		return actionResult{}, fmt.Errorf("write shift: %w", err)
	}
	if !tr.Succeeded {
		return actionResult{}, &actionError{http.StatusConflict, fmt.Errorf("shift %s already exists; nothing was written, try again", sh.ID)}
	}
	rev := tr.Header.Revision
	return actionResult{Message: edit.ShiftCreated(sh, rev) + " " + edit.ShiftNotLive(sh.ProxyCluster), Revision: rev, ProxyCluster: sh.ProxyCluster}, nil
}

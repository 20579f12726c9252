package lbscheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/scheduler/internal/publish"
	"github.com/sluicelb/sluice/scheduler/internal/shift"
	"github.com/sluicelb/sluice/scheduler/inventory"
)

// statusBook is the leader's record of what it last did per proxy cluster,
// written to keys.Layout.SchedulerStatus under the leader's session lease
// (so "no key" means "no scheduler is leading"). Owned by the control loop.
type statusBook struct {
	term     *publish.Leadership
	since    time.Time
	inputRev int64
	view     inventory.View // the round's inputs, for inputsFor
	err      string
	results  map[string]report.PublishResult
	written  string // last value written (without UpdatedAt), to skip repeats
}

// inputRevision is the newest operator input revision in v: the desired
// state's and every shift intent's mod revision.
func inputRevision(v inventory.View) int64 {
	r := v.StateRevision
	for _, e := range v.Shifts {
		r = max(r, e.ModRevision)
	}
	return r
}

// inputsFor are the input revisions behind pc's snapshot.
func inputsFor(v inventory.View, active []shift.Active, pc string) *snapshot.Inputs {
	in := &snapshot.Inputs{Desired: v.StateRevision}
	for _, a := range active {
		if a.Shift.ProxyCluster != pc {
			continue
		}
		if in.Shifts == nil {
			in.Shifts = map[string]int64{}
		}
		in.Shifts[a.Shift.ID] = v.Shifts[a.Shift.ID].ModRevision
	}
	return in
}

// intentsFor is who asked for what pc's snapshot includes, and why.
func intentsFor(v inventory.View, active []shift.Active, pc string) []snapshot.Intent {
	shifts := make([]config.Shift, len(active))
	for i, a := range active {
		shifts[i] = a.Shift
	}
	return snapshot.IntentsFor(v.State, shifts, pc)
}

// begin starts a round as leader lead on inputs of revision rev.
func (b *statusBook) begin(lead *publish.Leadership, now time.Time, rev int64) {
	if b.term != lead {
		*b = statusBook{term: lead, since: now, results: map[string]report.PublishResult{}}
	}
	b.inputRev, b.err = rev, ""
}

// note records the outcome of one publish.
func (b *statusBook) note(pc string, r publish.Result, err error, now time.Time) {
	res := report.PublishResult{Lineage: r.Lineage, Version: r.Version, InputRevision: b.inputRev, At: now.UTC()}
	switch {
	case err == nil && r.Outcome == publish.Published:
		res.Result = report.PublishPublished
	case err == nil:
		res.Result = report.PublishUnchanged
	case errors.Is(err, publish.ErrFenced):
		res.Result, res.Reason = report.PublishFenced, err.Error()
	case !errors.Is(err, publish.ErrInvalid):
		// etcd trouble, a lost answer, a concurrent pointer move: the loop
		// retries (retryAfterError), so "failed" would end every --wait
		// for a publish that may land in a second
		res.Result, res.Reason = report.PublishRetrying, err.Error()
		if prev, ok := b.results[pc]; ok {
			res.Lineage, res.Version = prev.Lineage, prev.Version // still live
		}
	default:
		res.Result, res.Reason = report.PublishFailed, err.Error()
		if prev, ok := b.results[pc]; ok {
			res.Lineage, res.Version = prev.Lineage, prev.Version // still live
		}
	}
	if prev, ok := b.results[pc]; ok && prev.Result == res.Result && prev.Version == res.Version &&
		prev.Reason == res.Reason && prev.InputRevision == res.InputRevision {
		res.At = prev.At // unchanged: keep when it first happened
	}
	b.results[pc] = res
}

// keep drops the results of proxy clusters no longer planned.
func (b *statusBook) keep(pcs []string) {
	want := map[string]bool{}
	for _, pc := range pcs {
		want[pc] = true
	}
	maps.DeleteFunc(b.results, func(pc string, _ report.PublishResult) bool { return !want[pc] })
}

// writeStatus writes the book, fenced on leadership and bound to its lease,
// when it changed.
func (s *Scheduler) writeStatus(ctx context.Context, lead *publish.Leadership) error {
	b := &s.book
	doc := report.SchedulerStatus{LeaderID: s.cfg.ID, Since: b.since.UTC(), InputRevision: b.inputRev, Error: b.err, ProxyClusters: b.results,
		Invalid: b.view.Invalid}
	same, _ := json.Marshal(doc)
	if string(same) == b.written {
		return nil
	}
	doc.UpdatedAt = s.cfg.Now().UTC()
	raw, _ := json.Marshal(doc)
	var opts []clientv3.OpOption
	if l := lead.Lease(); l != 0 {
		opts = append(opts, clientv3.WithLease(l))
	}
	k := s.layout.SchedulerStatus()
	r, err := s.cli.Txn(ctx).If(lead.Fence()).Then(clientv3.OpPut(k, string(raw), opts...)).Commit()
	if err != nil {
		return fmt.Errorf("write scheduler status: %w", err)
	}
	if !r.Succeeded {
		return fmt.Errorf("write scheduler status: %w", publish.ErrFenced)
	}
	b.written = string(same)
	return nil
}

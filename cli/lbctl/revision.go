package lbctl

import (
	"context"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/snapshot"
)

// waitForRevision turns the targets into what the scheduler published for
// input revision rev or later, per proxy cluster: its last publish result,
// if it was computed from rev or later (a result "unchanged" means the live
// snapshot is what rev computes to). Proxy clusters it has not computed rev
// for yet are WAITING; a failed publish of rev or later is final.
func (r *rolloutReport) waitForRevision(rev int64, sched *report.SchedulerStatus, targets map[string]target) {
	r.Revision = rev
	r.Waiting = map[string]string{}
	for pc := range targets {
		if sched == nil {
			r.Waiting[pc] = "no scheduler is leading"
			continue
		}
		res, ok := sched.ProxyClusters[pc]
		switch {
		case !ok || res.InputRevision < rev:
			r.Waiting[pc] = fmt.Sprintf("the scheduler has not published input revision %d yet (it last computed %d)", rev, res.InputRevision)
		case res.Result == report.PublishFailed:
			r.final = true // a later write is needed; the BLOCKED line says why
			fallthrough
		case res.Result == report.PublishFenced:
			r.Waiting[pc] = fmt.Sprintf("input revision %d was not published", res.InputRevision)
		default:
			targets[pc] = target{Pointer: snapshot.Pointer{Lineage: res.Lineage, Version: res.Version}, atLeast: true}
		}
	}
}

// writeWaitFlags are the --wait flags of every lbctl write.
func writeWaitFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "wait", Usage: "after writing, wait until every live proxy of each affected proxy cluster applied a snapshot computed from this write or later"},
		&cli.DurationFlag{Name: "wait-timeout", Value: 2 * time.Minute, Usage: "give up --wait after this long (exit 4)"},
	}
}

// afterWrite, with --wait, waits until every live proxy of pc (all proxy
// clusters if "") applied a snapshot the scheduler computed from input
// revision rev or later, and prints the rollout.
func (e *env) afterWrite(pc string, rev int64) error {
	if !e.c.Bool("wait") {
		return nil
	}
	ctx, cancel := context.WithTimeout(e.c.Context, e.c.Duration("wait-timeout"))
	defer cancel()
	e.progressf("waiting until every live proxy applied a snapshot computed from revision %d", rev)
	r, err := e.waitFor(ctx, rolloutQuery{pc: pc, revision: rev})
	if rerr := e.render(r, r.table); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

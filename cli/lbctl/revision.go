package lbctl

import (
	"context"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sluicelb/sluice/api/edit"
)

// writeWaitFlags are the --wait and --urgent flags of every lbctl write.
func writeWaitFlags() []cli.Flag {
	return []cli.Flag{
		urgentFlag(),
		&cli.BoolFlag{Name: "wait", Usage: "after writing, wait until every live proxy of each affected proxy cluster applied a snapshot computed from this write or later"},
		&cli.DurationFlag{Name: "wait-timeout", Value: 2 * time.Minute, Usage: "give up --wait after this long (exit 4)"},
	}
}

// urgentFlag marks a write whose changes skip the rollout stages.
func urgentFlag() cli.Flag {
	return &cli.BoolFlag{Name: "urgent", Usage: "skip the rollout stages: the change goes to every proxy at once (recorded URGENT with the author)"}
}

// wroteDesired reports a write of the desired state (weights set and
// unpin, drain and undrain, apply, rollback) at revision res.Revision that
// concerns proxy cluster pc ("" for all): first what was written, the line
// docs/lbctl.md quotes; then, without --wait, that it is not live yet and
// the command that waits for it — the first line is true of the write, not
// of the traffic. With --wait, the wait reports the fleet (afterWrite).
func (e *env) wroteDesired(res writeResult, first, pc string) error {
	text := first + "\n"
	if !e.c.Bool("wait") {
		text += edit.NotLive(pc) + " Wait for that with: " + edit.WaitCommand(pc, res.Revision) + "\n"
	}
	if err := e.wrote(res, text); err != nil {
		return err
	}
	return e.afterWrite(pc, res.Revision)
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

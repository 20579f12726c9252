package lbctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/edit"
	"github.com/sluicelb/sluice/api/rollout"
	"github.com/sluicelb/sluice/api/stateio"
	"github.com/sluicelb/sluice/scheduler/inventory"
)

func shiftCommand() *cli.Command {
	return &cli.Command{
		Name:  "shift",
		Usage: "move a share of a proxy cluster's traffic for a cluster from one IDC to another, optionally ramped",
		UsageText: "lbctl shift --cluster C --proxy-cluster B --from IDC1 --to IDC2 --percent 30 [--ramp 5m --step 10] [--wait]\n" +
			"lbctl shift pause|resume|abort --id ID [--wait]\nlbctl shift list",
		Description: "--percent is points of the row (out of 100) moved from the sub-clusters in --from to those in --to,\n" +
			"on top of the pinned or computed row. With --ramp the scheduler moves --step points at a time spread over\n" +
			"the ramp. --wait shows progress until the shift is complete and live on every proxy of the proxy cluster.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "cluster", Usage: "backend cluster"},
			&cli.StringFlag{Name: "proxy-cluster", Usage: "proxy cluster whose traffic moves"},
			&cli.StringFlag{Name: "from", Usage: "IDC the traffic leaves"},
			&cli.StringFlag{Name: "to", Usage: "IDC the traffic goes to"},
			&cli.IntFlag{Name: "percent", Usage: "points of the row to move, 1..100"},
			&cli.DurationFlag{Name: "ramp", Usage: "spread the move over this long (0: at once)"},
			&cli.IntFlag{Name: "step", Value: config.ShiftDefaultStep, Usage: "points per ramp step"},
			&cli.StringFlag{Name: "reason", Usage: "why (recorded with the shift)"},
			urgentFlag(),
			&cli.BoolFlag{Name: "wait", Usage: "show progress until the shift is live on every proxy"},
			&cli.DurationFlag{Name: "wait-timeout", Value: 10 * time.Minute, Usage: "give up waiting after this long (exit 4)"},
		},
		Action: action(shiftCreate),
		Subcommands: []*cli.Command{
			{Name: "pause", Usage: "hold a ramping shift at its current step", Flags: shiftStateFlags(), Action: action(shiftSetState(config.ShiftPaused))},
			{Name: "resume", Usage: "continue a paused shift at its ramp's pace", Flags: shiftStateFlags(), Action: action(shiftSetState(config.ShiftRunning))},
			{Name: "abort", Usage: "drop a shift: its rows go back to the pinned or computed weights", Flags: shiftStateFlags(), Action: action(shiftSetState(config.ShiftAborted))},
			{Name: "list", Usage: "list shifts with their progress", Action: action(shiftList)},
		},
	}
}

func newID(prefix string) string { return edit.NewID(prefix, time.Now()) }

func shiftCreate(e *env) error {
	c := e.c
	var missing []string
	for _, f := range []string{"cluster", "proxy-cluster", "from", "to"} {
		if c.String(f) == "" {
			missing = append(missing, "--"+f)
		}
	}
	if !c.IsSet("percent") {
		missing = append(missing, "--percent")
	}
	if len(missing) > 0 {
		return usageErr("lbctl shift needs %v", missing)
	}
	if c.IsSet("ramp") && c.Duration("ramp") <= 0 {
		return fmt.Errorf("invalid shift; nothing was written: --ramp %s: a ramp must be positive (omit --ramp to move at once)", c.Duration("ramp"))
	}
	sh := config.Shift{
		ID: newID("shift"), ProxyCluster: c.String("proxy-cluster"), Cluster: c.String("cluster"),
		From: c.String("from"), To: c.String("to"), Percent: c.Int("percent"),
		Ramp: config.Duration(c.Duration("ramp")), StepPercent: c.Int("step"),
		State: config.ShiftPending, Reason: c.String("reason"), Author: e.author(), Urgent: c.Bool("urgent"), CreatedAt: time.Now().UTC(),
	}
	ctx, cancel := e.ctx()
	defer cancel()
	st, err := e.store()
	if err != nil {
		return err
	}
	rev, err := st.CreateShift(ctx, sh, func(ctx context.Context) error { return e.checkShiftPlan(ctx, sh) })
	if err != nil {
		return conflictCode(err)
	}
	text := edit.ShiftCreated(sh, rev) + "\n"
	if !c.Bool("wait") {
		// Not rollout status without --revision: right after the write it
		// judges the old version, converged before the shift.
		ramp := ""
		if sh.Ramp > 0 {
			ramp = " (with the ramp, its first step)"
		}
		text += fmt.Sprintf("%s Follow it with: lbctl shift list; %s waits until the first snapshot computed with it is live%s.\n",
			edit.ShiftNotLive(sh.ProxyCluster), edit.WaitCommand(sh.ProxyCluster, rev), ramp)
	}
	if err := e.wrote(writeResult{Action: "created", Revision: rev, Shift: ptr(viewShift(sh, nil))}, text); err != nil || !c.Bool("wait") {
		return err
	}
	wctx, wcancel := context.WithTimeout(c.Context, c.Duration("wait-timeout"))
	defer wcancel()
	return waitShift(wctx, e, sh, rev)
}

// shiftLiveLine is what --wait prints once the shift's version converged:
// the proxies that run it (SYNCED), not every row of the report (a proxy
// gone before the rollout is listed, not counted, and does not run it).
func shiftLiveLine(sh config.Shift, rep rolloutReport, version uint64) string {
	live, gone := 0, 0
	for _, p := range rep.Proxies {
		switch {
		case p.State == rollout.Synced:
			live++
		case p.NotCounted:
			gone++
		}
	}
	line := fmt.Sprintf("Shift %s is live on %d proxies of %s (v%d)", sh.ID, live, sh.ProxyCluster, version)
	if gone > 0 {
		line += fmt.Sprintf("; %d gone before it, not counted", gone)
	}
	return line + "."
}

// shiftProgressLine is what --wait prints for a progress record, e.g.
// "shift S: done, 15 of 50 points: IDC1 had 15 (v7)".
func shiftProgressLine(id string, p config.ShiftProgress) string {
	switch {
	case p.State == config.ShiftInvalid:
		return fmt.Sprintf("shift %s: invalid, not run: %s", id, p.Message)
	case p.Message != "":
		return fmt.Sprintf("shift %s: %s, %s (v%d)", id, p.State, p.Message, p.Version)
	}
	return fmt.Sprintf("shift %s: %s, %d of %d points moved (v%d)", id, p.State, p.AppliedPercent, p.TargetPercent, p.Version)
}

// waitShift waits like every write's --wait for the revision rev that
// wrote the shift (a publish the scheduler could not make is final), then
// follows the shift's progress until it is done and its version is live on
// every proxy of the proxy cluster.
func waitShift(ctx context.Context, e *env, sh config.Shift, rev int64) error {
	cli, err := e.etcd()
	if err != nil {
		return err
	}
	e.progressf("waiting until every live %s proxy applied a snapshot computed from revision %d", sh.ProxyCluster, rev)
	if r, err := e.waitFor(ctx, rolloutQuery{pc: sh.ProxyCluster, revision: rev}); err != nil {
		if rerr := e.render(r, r.table); rerr != nil {
			e.progressf("%v", rerr)
		}
		return err
	}
	pk, err := e.layout.ShiftProgress(sh.ID)
	if err != nil {
		return err
	}
	w := cli.Watch(clientv3.WithRequireLeader(ctx), pk)
	st, err := e.store()
	if err != nil {
		return err
	}
	last := ""
	for {
		gctx, cancel := e.ctx()
		p, err := st.ShiftProgress(gctx, sh.ID)
		cancel()
		if err == nil && p != nil {
			line := shiftProgressLine(sh.ID, *p)
			if line != last {
				e.progressf("%s", line)
				last = line
			}
			switch p.State {
			case config.ShiftAborted:
				return fmt.Errorf("shift %s was aborted", sh.ID)
			case config.ShiftInvalid:
				return fmt.Errorf("the scheduler refused shift %s: %s", sh.ID, p.Message)
			case config.ShiftDone:
				e.progressf("waiting for every %s proxy to apply v%d", sh.ProxyCluster, p.Version)
				rep, err := e.waitRollout(ctx, sh.ProxyCluster, p.Version)
				if err != nil {
					return err
				}
				fmt.Fprintln(e.info(), shiftLiveLine(sh, rep, p.Version))
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return withCode(ExitNotConverged, fmt.Errorf("timed out waiting for shift %s (%s)", sh.ID, last))
		case <-w:
		case <-time.After(2 * time.Second):
		}
	}
}

func shiftSetState(state string) func(*env) error {
	return func(e *env) error {
		id := e.c.String("id")
		if _, err := e.layout.Shift(id); err != nil {
			return usageErr("--id: %v", err)
		}
		st, err := e.store()
		if err != nil {
			return err
		}
		ctx, cancel := e.ctx()
		defer cancel()
		sh, rev, err := st.SetShiftState(ctx, id, state)
		if errors.Is(err, stateio.ErrNoShift) {
			return fmt.Errorf("no shift %q (lbctl shift list shows the shifts); nothing was written", id)
		}
		if err != nil {
			return conflictCode(err)
		}
		// What was written, then — as after every write — that it is not
		// live yet, or with --wait the wait for it: the scheduler's input
		// revision covers the shift intents.
		text := edit.ShiftStateWritten(id, state, rev) + "\n"
		if !e.c.Bool("wait") {
			text += edit.ShiftNotLive(sh.ProxyCluster) + " Wait for that with: " + edit.WaitCommand(sh.ProxyCluster, rev) + "\n"
		}
		if err := e.wrote(writeResult{Action: state, Revision: rev, Shift: ptr(viewShift(sh, nil))}, text); err != nil {
			return err
		}
		return e.afterWrite(sh.ProxyCluster, rev)
	}
}

// shiftStateFlags are the flags of shift pause, resume and abort: the id,
// and --wait as on every write.
func shiftStateFlags() []cli.Flag {
	return []cli.Flag{&cli.StringFlag{Name: "id", Required: true, Usage: "shift id (printed when the shift was created; lbctl shift list)"},
		&cli.BoolFlag{Name: "wait", Usage: "after writing, wait until every live proxy of the shift's proxy cluster applied a snapshot computed from this write or later"},
		&cli.DurationFlag{Name: "wait-timeout", Value: 2 * time.Minute, Usage: "give up --wait after this long (exit 4)"},
	}
}

func shiftList(e *env) error {
	cli, err := e.etcd()
	if err != nil {
		return err
	}
	ctx, cancel := e.ctx()
	defer cancel()
	st, err := e.store()
	if err != nil {
		return err
	}
	r, err := cli.Get(ctx, e.layout.ShiftsPrefix(), clientv3.WithPrefix())
	if err != nil {
		return err
	}
	rows := []shiftView{}
	for _, kv := range r.Kvs {
		sh, err := inventory.DecodeShift(e.layout, string(kv.Key), kv.Value)
		if err != nil {
			id := string(kv.Key)[strings.LastIndex(string(kv.Key), "/")+1:]
			rows = append(rows, shiftView{ID: id, State: stateInvalid, Invalid: "ignored by the scheduler: " + err.Error()})
			continue
		}
		prog, _ := st.ShiftProgress(ctx, sh.ID) // none, or not readable: listed without
		rows = append(rows, viewShift(sh, prog))
	}
	return e.render(rows, func(w io.Writer) error {
		fmt.Fprintln(w, "ID\tPROXY CLUSTER\tCLUSTER\tFROM\tTO\tPERCENT\tRAMP\tSTATE\tMOVED\tVERSION\tNOTE")
		for _, r := range rows {
			moved, v, st, note := "-", "-", r.State, "-"
			if r.Progress != nil {
				moved = fmt.Sprintf("%d/%d", r.Progress.AppliedPercent, r.Progress.TargetPercent)
				v = fmt.Sprintf("v%d", r.Progress.Version)
				st = r.Progress.State
				if r.Progress.Message != "" {
					note = r.Progress.Message
				}
			}
			if r.Invalid != "" {
				note = r.Invalid
			}
			ramp := "-"
			if r.RampSeconds > 0 {
				ramp = (time.Duration(r.RampSeconds * float64(time.Second))).String()
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.ProxyCluster, r.Cluster, r.From, r.To, r.Percent, ramp, st, moved, v, note)
		}
		if len(rows) == 0 {
			fmt.Fprintln(w, "(no shifts)")
		}
		return nil
	})
}

func ptr[T any](v T) *T { return &v }

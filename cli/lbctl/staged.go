package lbctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/rollout"
)

// stagedCommands are lbctl rollout promote|pause|resume|abort|retry: each
// writes an operator request the scheduler leader consumes on its next step
// (rollout-ops/<proxy cluster>).
func stagedCommands() []*cli.Command {
	active := func(s rollout.Staged) bool { return s.Active() }
	pcFlag := &cli.StringFlag{Name: "proxy-cluster", Required: true, Usage: "the proxy cluster whose staged rollout to act on"}
	mk := func(op, usage string, ok func(rollout.Staged) bool, when string, extra ...cli.Flag) *cli.Command {
		return &cli.Command{
			Name: op, Usage: usage, UsageText: "lbctl rollout " + op + " --proxy-cluster B",
			Description: "The scheduler leader acts on it within a second or two; lbctl rollout status shows the result.\n" +
				"Exit codes: 0 request written; 2 no staged rollout of that proxy cluster " + when + "; 1 error.",
			Flags: append([]cli.Flag{pcFlag}, extra...),
			Action: action(func(e *env) error {
				pc := e.c.String("proxy-cluster")
				ctx, cancel := e.ctx()
				defer cancel()
				recs, err := e.stagedRollouts(ctx, pc)
				if err != nil {
					return err
				}
				if len(recs) == 0 || !ok(recs[0]) {
					state := "none"
					if len(recs) > 0 {
						state = recs[0].ID + " is " + recs[0].State
					}
					return usageErr("lbctl rollout %s: proxy cluster %q has no staged rollout %s (%s)", op, pc, when, state)
				}
				cli, err := e.etcd()
				if err != nil {
					return err
				}
				k, err := e.layout.RolloutOp(pc)
				if err != nil {
					return err
				}
				raw, _ := json.Marshal(rollout.RolloutOp{Op: op, All: op == rollout.OpPromote && e.c.Bool("all"), Author: e.author(), At: time.Now().UTC()})
				if _, err := cli.Put(ctx, k, string(raw)); err != nil {
					return fmt.Errorf("write %s: %w", k, err)
				}
				return e.wrote(map[string]string{"action": op, "rollout": recs[0].ID, "proxy_cluster": pc},
					fmt.Sprintf("asked the scheduler to %s rollout %s (%s)\n", op, recs[0].ID, recs[0].State))
			}),
		}
	}
	return []*cli.Command{
		mk(rollout.OpPromote, "start the next stage now (a manual promotion, or skip the rest of a bake); --all: every proxy at once",
			active, "in progress (a paused one only with --all)",
			&cli.BoolFlag{Name: "all", Usage: "skip every remaining stage: the candidate goes to every proxy now (recorded URGENT; also from PAUSED)"}),
		mk(rollout.OpPause, "hold a staged rollout in its stage (no promotion, no gate judgement)", active, "in progress"),
		mk(rollout.OpResume, "continue a paused staged rollout (the stage's timers start again)",
			func(s rollout.Staged) bool { return s.State == rollout.StagePaused }, "paused"),
		mk(rollout.OpAbort, "end a staged rollout: the stable content is republished to every proxy", active, "in progress"),
		mk(rollout.OpRetry, "try a rolled-back or aborted candidate's inputs again (a new rollout from the first stage)",
			func(s rollout.Staged) bool { return s.Holds(s.CandidateHash) }, "rolled back or aborted"),
	}
}

// stagedRollouts reads the staged rollout records (one proxy cluster's if
// pc is set), sorted by proxy cluster.
func (e *env) stagedRollouts(ctx context.Context, pc string) ([]rollout.Staged, error) {
	cli, err := e.etcd()
	if err != nil {
		return nil, err
	}
	key, opts := e.layout.RolloutPrefix(), []clientv3.OpOption{clientv3.WithPrefix()}
	if pc != "" {
		if key, err = e.layout.Rollout(pc); err != nil {
			return nil, usageErr("--proxy-cluster: %v", err)
		}
		opts = nil
	}
	r, err := cli.Get(ctx, key, opts...)
	if err != nil {
		return nil, fmt.Errorf("read staged rollouts: %w", err)
	}
	var out []rollout.Staged
	for _, kv := range r.Kvs {
		var s rollout.Staged
		if err := codec.UnmarshalJSON(kv.Value, &s); err != nil {
			return nil, fmt.Errorf("staged rollout %s: %w", kv.Key, err)
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b rollout.Staged) int { return strings.Compare(a.ProxyCluster, b.ProxyCluster) })
	return out, nil
}

// stagedTable prints each staged rollout: its state, stage, versions and
// the last gate figures (the reason when it ended).
func stagedTable(w io.Writer, recs []rollout.Staged) {
	for _, s := range recs {
		stage := ""
		if s.Stages > 0 {
			stage = fmt.Sprintf(" stage %d/%d", s.Stage+1, s.Stages)
		}
		fmt.Fprintf(w, "ROLLOUT %s\t%s%s\tstable v%d → candidate v%d\tstarted %s\n", s.ID, s.State, stage,
			s.StableVersion, s.CandidateVersion, s.StartedAt.UTC().Format(time.RFC3339))
		if s.Active() && len(s.Selected) > 0 {
			fmt.Fprintf(w, "  selected\t%s\n", strings.Join(s.Selected, ", "))
		}
		if s.Active() && s.State == rollout.StageBaking {
			fmt.Fprintf(w, "  baking since\t%s\n", s.BakeStarted.UTC().Format(time.RFC3339))
		}
		for _, g := range s.Gates {
			verdict := "ok"
			switch {
			case !g.OK:
				verdict = "FAILED"
			case !g.Judged:
				verdict = "pending"
			}
			fmt.Fprintf(w, "  gate %s\t%s\t%s\n", g.Name, verdict, g.Detail)
		}
		if s.Reason != "" {
			fmt.Fprintf(w, "  reason\t%s\n", s.Reason)
		}
		if s.RollbackVersion != 0 {
			fmt.Fprintf(w, "  stable content republished as v%d at %s\n", s.RollbackVersion, s.EndedAt.UTC().Format(time.RFC3339))
		}
	}
}

package lbctl

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/report"
)

// Proxy rollout states.
const (
	StateSynced   = "SYNCED"
	StatePending  = "PENDING"
	StateRejected = "REJECTED"
	StateStale    = "STALE"
)

// staleAfter: a status not refreshed for this long (or with etcd
// disconnected) is reported STALE.
const staleAfter = 30 * time.Second

func rolloutCommand() *cli.Command {
	return &cli.Command{
		Name:  "rollout",
		Usage: "watch snapshot rollouts",
		Subcommands: []*cli.Command{{
			Name:      "status",
			Usage:     "per proxy: SYNCED, PENDING, REJECTED (reason) or STALE (since); exit 0 only when every live proxy runs the target",
			UsageText: "lbctl rollout status [--proxy-cluster B] [--version V] [--wait --wait-timeout 2m]",
			Description: "The target is each proxy cluster's live snapshot (current/<proxy cluster>) unless --version is given.\n" +
				"Exit codes: 0 converged; 4 not converged (the laggards are named); 1 error.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "proxy-cluster", Usage: "only this proxy cluster"},
				&cli.Uint64Flag{Name: "version", Usage: "target version (needs --proxy-cluster)"},
				&cli.BoolFlag{Name: "wait", Usage: "watch until converged or --timeout"},
				&cli.DurationFlag{Name: "wait-timeout", Value: 2 * time.Minute, Usage: "how long --wait waits (the global --timeout bounds each etcd call)"},
			},
			Action: action(func(e *env) error {
				pc := e.c.String("proxy-cluster")
				if e.c.Uint64("version") != 0 && pc == "" {
					return usageErr("--version needs --proxy-cluster")
				}
				if !e.c.Bool("wait") {
					ctx, cancel := e.ctx()
					defer cancel()
					r, err := e.rollout(ctx, pc, e.c.Uint64("version"))
					if err != nil {
						return err
					}
					if err := e.render(r, r.table); err != nil {
						return err
					}
					return r.verdict()
				}
				ctx, cancel := context.WithTimeout(e.c.Context, e.c.Duration("wait-timeout"))
				defer cancel()
				r, err := e.waitRollout(ctx, pc, e.c.Uint64("version"))
				if rerr := e.render(r, r.table); rerr != nil && err == nil {
					err = rerr
				}
				return err
			}),
		}},
	}
}

// rolloutReport is the JSON shape of rollout status.
type rolloutReport struct {
	Targets   map[string]uint64 `json:"targets"`
	Proxies   []proxyRollout    `json:"proxies"`
	Converged bool              `json:"converged"`
}

type proxyRollout struct {
	ProxyCluster string    `json:"proxy_cluster"`
	ID           string    `json:"id"`
	State        string    `json:"state"`
	Applied      uint64    `json:"applied_version"`
	Target       uint64    `json:"target_version"`
	Reason       string    `json:"reason,omitempty"`
	Since        time.Time `json:"since,omitzero"`
}

// rollout computes every live proxy's state against its target version.
func (e *env) rollout(ctx context.Context, pc string, version uint64) (rolloutReport, error) {
	ptrs, err := e.pointers(ctx)
	if err != nil {
		return rolloutReport{}, err
	}
	sts, err := e.proxyStatuses(ctx, pc)
	if err != nil {
		return rolloutReport{}, err
	}
	r := rolloutReport{Targets: map[string]uint64{}}
	for name, p := range ptrs {
		if pc == "" || name == pc {
			r.Targets[name] = p.Version
		}
	}
	if version != 0 {
		r.Targets[pc] = version
	}
	if pc != "" && r.Targets[pc] == 0 {
		return r, fmt.Errorf("no snapshot has been published for proxy cluster %q", pc)
	}
	now := time.Now()
	for _, st := range sts {
		r.Proxies = append(r.Proxies, classify(st, r.Targets[st.ProxyCluster], now))
	}
	r.Converged = len(r.Proxies) > 0
	for _, p := range r.Proxies {
		if p.State != StateSynced {
			r.Converged = false
		}
	}
	return r, nil
}

// classify decides one proxy's rollout state.
func classify(st report.ProxyStatus, target uint64, now time.Time) proxyRollout {
	p := proxyRollout{ProxyCluster: st.ProxyCluster, ID: st.ID, Applied: st.AppliedVersion, Target: target}
	switch {
	case !st.EtcdConnected || (!st.UpdatedAt.IsZero() && now.Sub(st.UpdatedAt) > staleAfter):
		p.State, p.Since = StateStale, st.UpdatedAt
		if !st.EtcdConnected {
			p.Reason = "not connected to etcd"
		} else {
			p.Reason = "status not refreshed"
		}
	case target != 0 && st.AppliedVersion >= target:
		p.State = StateSynced
	case target != 0 && st.RejectedVersion >= target:
		p.State, p.Reason = StateRejected, st.RejectedReason
	default:
		p.State = StatePending
	}
	return p
}

// verdict turns a report into the exit status.
func (r rolloutReport) verdict() error {
	if len(r.Proxies) == 0 {
		return withCode(ExitNotConverged, fmt.Errorf("no live proxy reports a status"))
	}
	if r.Converged {
		return nil
	}
	var lag []string
	for _, p := range r.Proxies {
		if p.State != StateSynced {
			s := fmt.Sprintf("%s/%s %s", p.ProxyCluster, p.ID, p.State)
			if p.Reason != "" {
				s += " (" + p.Reason + ")"
			}
			lag = append(lag, s)
		}
	}
	return withCode(ExitNotConverged, fmt.Errorf("not converged: %s", strings.Join(lag, "; ")))
}

func (r rolloutReport) table(w io.Writer) error {
	fmt.Fprintln(w, "PROXY CLUSTER\tPROXY\tSTATE\tAPPLIED\tTARGET\tDETAIL")
	for _, p := range r.Proxies {
		detail := p.Reason
		if p.State == StateStale && !p.Since.IsZero() {
			detail = fmt.Sprintf("%s since %s", p.Reason, p.Since.UTC().Format(time.RFC3339))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\tv%d\tv%d\t%s\n", p.ProxyCluster, p.ID, p.State, p.Applied, p.Target, detail)
	}
	if len(r.Proxies) == 0 {
		fmt.Fprintln(w, "(no live proxies)")
	}
	if r.Converged {
		fmt.Fprintln(w, "converged: every live proxy runs its target version")
	}
	return nil
}

// waitRollout watches status and pointer keys until converged or ctx ends.
func (e *env) waitRollout(ctx context.Context, pc string, version uint64) (rolloutReport, error) {
	cli, err := e.etcd()
	if err != nil {
		return rolloutReport{}, err
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	changes := cli.Watch(wctx, e.layout.Root(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	last := ""
	tick := time.NewTicker(2 * time.Second) // staleness changes without events
	defer tick.Stop()
	for {
		rctx, rcancel := e.ctx()
		r, err := e.rollout(rctx, pc, version)
		rcancel()
		if err == nil {
			if r.Converged {
				return r, nil
			}
			if line := progressLine(r); line != last {
				e.progressf("%s", line)
				last = line
			}
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return r, err
			}
			return r, withCode(ExitNotConverged, fmt.Errorf("timed out: %w", r.verdict()))
		case <-changes:
		case <-tick.C:
		}
	}
}

func progressLine(r rolloutReport) string {
	counts := map[string]int{}
	for _, p := range r.Proxies {
		counts[p.State]++
	}
	var parts []string
	for _, s := range []string{StateSynced, StatePending, StateRejected, StateStale} {
		if counts[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
		}
	}
	var tg []string
	for pc, v := range r.Targets {
		tg = append(tg, fmt.Sprintf("%s v%d", pc, v))
	}
	sort.Strings(tg)
	return fmt.Sprintf("rollout of %s: %s", strings.Join(tg, ", "), strings.Join(parts, ", "))
}

package lbctl

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/rollout"
)

func healthCommand() *cli.Command {
	return &cli.Command{
		Name:      "health",
		Usage:     "instances as their agents report them: state, reason, load",
		UsageText: "lbctl health [--cluster C] [--watch]",
		Flags:     []cli.Flag{&cli.StringFlag{Name: "cluster", Usage: "only this backend cluster"}, watchFlag()},
		Action: action(watchable(func(e *env) error {
			ctx, cancel := e.ctx()
			defer cancel()
			ins, err := e.instances(ctx, e.c.String("cluster"))
			if err != nil {
				return err
			}
			now := time.Now()
			return e.render(ins, func(w io.Writer) error {
				fmt.Fprintln(w, "CLUSTER\tSUBCLUSTER\tIDC\tINSTANCE\tWEIGHT\tSTATE\tIN-FLIGHT\tRPS\tCPU\tUPDATED\tREASON")
				for _, in := range ins {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s:%d\t%d\t%s\t%d\t%.1f\t%.0f%%\t%s ago\t%s\n", in.Cluster, in.SubCluster, in.IDC, in.Addr, in.Port,
						in.Weight, in.State, in.InFlight, in.RPS, in.CPUPercent, now.Sub(in.UpdatedAt).Round(time.Second), in.Reason)
				}
				if len(ins) == 0 {
					fmt.Fprintln(w, "(no agent registrations)")
				}
				return nil
			})
		}, instancesKeys)),
	}
}

func proxiesCommand() *cli.Command {
	return &cli.Command{
		Name:      "proxies",
		Usage:     "every proxy with its state (LIVE, STALE, GONE), applied version, lag and etcd connectivity",
		UsageText: "lbctl proxies [--proxy-cluster B] [--watch]",
		Description: "STATE is LIVE, STALE (last seen T: no status rewrite for two report intervals, or etcd lost) or\n" +
			"GONE (last seen T: the status lease expired; listed for 10 minutes). AHEAD marks a proxy above a moved-back pointer.",
		Flags: []cli.Flag{&cli.StringFlag{Name: "proxy-cluster", Usage: "only this proxy cluster"}, watchFlag()},
		Action: action(watchable(func(e *env) error {
			ctx, cancel := e.ctx()
			defer cancel()
			pc := e.c.String("proxy-cluster")
			sts, err := e.proxyStatuses(ctx, pc)
			if err != nil {
				return err
			}
			now := time.Now()
			seen, err := e.lastSeen(ctx, pc)
			if err != nil {
				return err
			}
			gone := rollout.GoneRecords(sts, seen, now)
			ptrs, err := e.pointers(ctx)
			if err != nil {
				return err
			}
			sched, err := e.schedulerStatus(ctx)
			if err != nil {
				return err
			}
			if sched == nil {
				e.progressf("%s", noLeader)
			}
			rows := make([]proxyRow, 0, len(sts)+len(gone))
			for _, st := range sts {
				r := proxyRow{ProxyStatus: st, State: "LIVE"}
				if why := rollout.StaleReason(st, now); why != "" {
					r.State, r.Detail = rollout.Stale, why
				}
				rows = append(rows, r)
			}
			for _, st := range gone {
				rows = append(rows, proxyRow{ProxyStatus: st, State: rollout.Gone, Detail: "last seen " + rollout.SeenAt(st.UpdatedAt, now)})
			}
			return e.render(rows, func(w io.Writer) error {
				fmt.Fprintln(w, "PROXY CLUSTER\tPROXY\tSTATE\tAPPLIED\tLIVE\tSOURCE\tETCD\tWATCH LAG\tADMIN\tVERSION\tDETAIL")
				for _, r := range rows {
					etcd := "connected"
					if !r.EtcdConnected {
						etcd = "DISCONNECTED"
					}
					state := r.State
					if r.Detail != "" {
						state += " (" + r.Detail + ")"
					}
					var detail []string
					if r.Ahead {
						detail = append(detail, fmt.Sprintf("AHEAD of the pointer (v%d)", r.PointerVersion))
					}
					if r.RejectedVersion > 0 {
						detail = append(detail, fmt.Sprintf("rejected v%d: %s", r.RejectedVersion, r.RejectedReason))
					}
					fmt.Fprintf(w, "%s\t%s\t%s\tv%d\tv%d\t%s\t%s\t%.1fs\t%s\t%s\t%s\n", r.ProxyCluster, r.ID, state, r.AppliedVersion, ptrs[r.ProxyCluster].Version,
						r.Source, etcd, r.WatchLagAt(now), r.AdminAddr, r.BinaryVersion, strings.Join(detail, "; "))
				}
				if len(rows) == 0 {
					fmt.Fprintln(w, "(no proxies)")
				}
				return nil
			})
		}, proxyKeys)),
	}
}

// proxyRow is one line of lbctl proxies (JSON: the status with its state).
type proxyRow struct {
	report.ProxyStatus
	State  string `json:"state"`
	Detail string `json:"state_detail,omitempty"`
}

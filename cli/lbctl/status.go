package lbctl

import (
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"
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
		Usage:     "every live proxy with its applied version, lag and etcd connectivity",
		UsageText: "lbctl proxies [--proxy-cluster B] [--watch]",
		Flags:     []cli.Flag{&cli.StringFlag{Name: "proxy-cluster", Usage: "only this proxy cluster"}, watchFlag()},
		Action: action(watchable(func(e *env) error {
			ctx, cancel := e.ctx()
			defer cancel()
			sts, err := e.proxyStatuses(ctx, e.c.String("proxy-cluster"))
			if err != nil {
				return err
			}
			ptrs, err := e.pointers(ctx)
			if err != nil {
				return err
			}
			return e.render(sts, func(w io.Writer) error {
				fmt.Fprintln(w, "PROXY CLUSTER\tPROXY\tAPPLIED\tLIVE\tSOURCE\tETCD\tWATCH LAG\tADMIN\tVERSION\tREJECTED")
				for _, st := range sts {
					etcd := "connected"
					if !st.EtcdConnected {
						etcd = "DISCONNECTED"
					}
					rej := ""
					if st.RejectedVersion > 0 {
						rej = fmt.Sprintf("v%d: %s", st.RejectedVersion, st.RejectedReason)
					}
					fmt.Fprintf(w, "%s\t%s\tv%d\tv%d\t%s\t%s\t%.1fs\t%s\t%s\t%s\n", st.ProxyCluster, st.ID, st.AppliedVersion, ptrs[st.ProxyCluster].Version,
						st.Source, etcd, st.WatchLagSeconds, st.AdminAddr, st.BinaryVersion, rej)
				}
				if len(sts) == 0 {
					fmt.Fprintln(w, "(no live proxies)")
				}
				return nil
			})
		}, proxyKeys)),
	}
}

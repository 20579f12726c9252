package lbctl

import (
	"github.com/urfave/cli/v2"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/edit"
	"github.com/sluicelb/sluice/scheduler/precheck"
)

// drainCommand builds `lbctl drain` (on) or `lbctl undrain` (off).
func drainCommand(on bool) *cli.Command {
	name, usage := "drain", "take a sub-cluster out of service (no traffic, no retries) — an IDC evacuation in one command"
	text := "lbctl drain --cluster C --subcluster S [--reason R] [--allow-full-drop]"
	if !on {
		name, usage = "undrain", "put a drained sub-cluster back into service"
		text = "lbctl undrain --cluster C --subcluster S [--reason R]"
	}
	flags := []cli.Flag{
		&cli.StringFlag{Name: "cluster", Required: true, Usage: "backend cluster"},
		&cli.StringFlag{Name: "subcluster", Required: true, Usage: "sub-cluster"},
		&cli.StringFlag{Name: "reason", Usage: "why (recorded with the drain)"},
	}
	if on {
		flags = append(flags, &cli.BoolFlag{Name: allowFullDropFlag,
			Usage: "let pinned rows this drain leaves with nothing to serve drop all their traffic (refused otherwise)"})
	}
	return &cli.Command{
		Name:      name,
		Usage:     usage,
		UsageText: text,
		Flags:     append(flags, writeWaitFlags()...),
		Action: action(func(e *env) error {
			c, sc := e.c.String("cluster"), e.c.String("subcluster")
			d := config.Drain{Cluster: c, SubCluster: sc, Reason: e.c.String("reason"), Author: e.author(), AllowFullDrop: e.c.Bool(allowFullDropFlag)}
			e.writing = precheck.WhatDrain(on, c, sc)
			rev, err := e.updateState(func(s *config.State) error {
				if on {
					return edit.Drain(s, d)
				}
				var err error
				d, err = edit.Undrain(s, c, sc)
				return err
			})
			if err != nil {
				return err
			}
			act := "drained"
			if !on {
				act = "undrained"
			}
			return e.wroteDesired(writeResult{Action: act, Revision: rev, Drains: []config.Drain{d}}, edit.DrainWritten(on, c, sc, rev), "")
		}),
	}
}

package lbctl

import (
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sluicelb/sluice/api/config"
)

// drainCommand builds `lbctl drain` (on) or `lbctl undrain` (off).
func drainCommand(on bool) *cli.Command {
	name, usage := "drain", "take a sub-cluster out of service (no traffic, no retries) — an IDC evacuation in one command"
	if !on {
		name, usage = "undrain", "put a drained sub-cluster back into service"
	}
	return &cli.Command{
		Name:      name,
		Usage:     usage,
		UsageText: fmt.Sprintf("lbctl %s --cluster C --subcluster S [--reason R]", name),
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "cluster", Required: true, Usage: "backend cluster"},
			&cli.StringFlag{Name: "subcluster", Required: true, Usage: "sub-cluster"},
			&cli.StringFlag{Name: "reason", Usage: "why (recorded with the drain)"},
		},
		Action: action(func(e *env) error {
			c, sc := e.c.String("cluster"), e.c.String("subcluster")
			d := config.Drain{Cluster: c, SubCluster: sc, Reason: e.c.String("reason"), Author: author()}
			rev, err := e.updateState(func(s *config.State) error {
				i := slices.IndexFunc(s.Drains, func(d config.Drain) bool { return d.Cluster == c && d.SubCluster == sc })
				switch {
				case on && i >= 0:
					return fmt.Errorf("%s/%s is already drained", c, sc)
				case on:
					s.Drains = append(s.Drains, d)
				case i < 0:
					return fmt.Errorf("%s/%s is not drained", c, sc)
				default:
					d = s.Drains[i]
					s.Drains = slices.Delete(s.Drains, i, i+1)
				}
				return nil
			})
			if err != nil {
				return err
			}
			verb := "Drained"
			if !on {
				verb = "Undrained"
			}
			return e.wrote(writeResult{Action: strings.ToLower(verb), Revision: rev, Drains: []config.Drain{d}},
				fmt.Sprintf("%s %s/%s (desired state revision %d). Watch the rollout: lbctl rollout status --wait\n", verb, c, sc, rev))
		}),
	}
}

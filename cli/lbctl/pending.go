package lbctl

import (
	"github.com/urfave/cli/v2"
)

func planCommand() *cli.Command {
	return &cli.Command{Name: "plan", Usage: "projected weights for a what-if (not published)"}
}
func explainCommand() *cli.Command {
	return &cli.Command{Name: "explain", Usage: "where would a request go, and why"}
}

package lbctl

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/edit"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/scheduler/precheck"
)

func weightsCommand() *cli.Command {
	return &cli.Command{
		Name:  "weights",
		Usage: "show or pin the weight matrix (rows: proxy clusters; columns: sub-clusters + BLACKHOLE)",
		Subcommands: []*cli.Command{
			{
				Name:      "get",
				Usage:     "show the live W matrix, pinned rows marked; -v adds the scheduler's explanation",
				UsageText: "lbctl weights get [--cluster C] [--proxy-cluster B] [-v] [--watch]",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "cluster", Usage: "only this backend cluster"},
					&cli.StringFlag{Name: "proxy-cluster", Usage: "only this proxy cluster's row"},
					&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "show how each row was computed"},
					watchFlag(),
				},
				Action: action(watchable(weightsGet, func(l keys.Layout) []string { return []string{l.CurrentPrefix()} })),
			},
			{
				Name:      "set",
				Usage:     "pin a row: operator weights win over computation until unpinned",
				UsageText: `lbctl weights set --cluster C --proxy-cluster B SC1=45 SC2=45 GSLB_BLACKHOLE=10 --reason "…"`,
				ArgsUsage: "SUBCLUSTER=WEIGHT ...",
				Description: "Each argument is SUBCLUSTER=WEIGHT (an integer 0..100); the weights must sum to 100 and name existing\n" +
					"sub-clusters or GSLB_BLACKHOLE. GSLB_BLACKHOLE=100 needs --allow-full-drop. Checked before anything is written.",
				Flags: append([]cli.Flag{
					&cli.StringFlag{Name: "cluster", Required: true, Usage: "backend cluster"},
					&cli.StringFlag{Name: "proxy-cluster", Required: true, Usage: "proxy cluster whose row is pinned"},
					&cli.StringFlag{Name: "reason", Usage: "why (recorded with the pin and in the snapshot)"},
					&cli.BoolFlag{Name: "allow-full-drop", Usage: "permit GSLB_BLACKHOLE=100"},
					&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "accepted for scripts; weights set never asks"},
				}, writeWaitFlags()...),
				Action: action(weightsSet),
			},
			{
				Name:      "unpin",
				Usage:     "remove a pinned row: the scheduler computes it again",
				UsageText: "lbctl weights unpin --cluster C --proxy-cluster B",
				Flags: append([]cli.Flag{
					&cli.StringFlag{Name: "cluster", Required: true},
					&cli.StringFlag{Name: "proxy-cluster", Required: true},
				}, writeWaitFlags()...),
				Action: action(func(e *env) error {
					c, pc := e.c.String("cluster"), e.c.String("proxy-cluster")
					rev, err := e.updateState(func(s *config.State) error { return edit.Unpin(s, c, pc) })
					if err != nil {
						return err
					}
					return e.wroteDesired(writeResult{Action: "unpinned", Revision: rev, Pins: []config.Pin{{ProxyCluster: pc, Cluster: c}}},
						edit.UnpinWritten(pc, c, rev), pc)
				}),
			},
		},
	}
}

// parseWeights turns SC=N arguments into a row.
func parseWeights(args []string) (map[string]int, error) {
	if len(args) == 0 {
		return nil, usageErr("give the row as SUBCLUSTER=WEIGHT arguments, e.g. SC1=45 SC2=45 GSLB_BLACKHOLE=10")
	}
	row := map[string]int{}
	var errs []string
	for _, a := range args {
		name, val, ok := strings.Cut(a, "=")
		if !ok || name == "" {
			errs = append(errs, fmt.Sprintf("%q: want SUBCLUSTER=WEIGHT", a))
			continue
		}
		n, err := strconv.Atoi(val)
		switch {
		case err != nil:
			errs = append(errs, fmt.Sprintf("%s: weight %q is not an integer", name, val))
			continue
		case n < 0 || n > config.DefaultDenominator:
			errs = append(errs, fmt.Sprintf("%s: weight %d is outside 0..%d", name, n, config.DefaultDenominator))
			continue
		}
		if _, dup := row[name]; dup {
			errs = append(errs, fmt.Sprintf("%s: given twice", name))
			continue
		}
		row[name] = n
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("invalid weights; nothing was written:\n%s", strings.Join(errs, "\n"))
	}
	return row, nil
}

func weightsSet(e *env) error {
	row, err := parseWeights(e.c.Args().Slice())
	if err != nil {
		return err
	}
	c, pc := e.c.String("cluster"), e.c.String("proxy-cluster")
	pin := config.Pin{ProxyCluster: pc, Cluster: c, Weights: row, AllowFullDrop: e.c.Bool("allow-full-drop"), Reason: e.c.String("reason"), Author: e.author()}
	e.writing = precheck.WhatPin(pc, c)
	rev, err := e.updateState(func(s *config.State) error {
		edit.Pin(s, pin)
		return nil
	})
	if err != nil {
		return err
	}
	return e.wroteDesired(writeResult{Action: "pinned", Revision: rev, Pins: []config.Pin{pin}}, edit.PinWritten(pc, c, row, rev), pc)
}

// matrix is the JSON shape of weights get.
type matrix struct {
	Clusters map[string]*matrixCluster `json:"clusters"`
}

type matrixCluster struct {
	SubClusters []string             `json:"subclusters"`
	Rows        map[string]matrixRow `json:"rows"`
}

type matrixRow struct {
	Version     uint64                `json:"version"`
	Denominator int                   `json:"denominator"`
	Weights     map[string]int        `json:"weights"`
	Pinned      bool                  `json:"pinned"`
	Explanation *snapshot.Explanation `json:"explanation,omitempty"`
}

func weightsGet(e *env) error {
	ctx, cancel := e.ctx()
	defer cancel()
	snaps, err := e.liveSnapshots(ctx, e.c.String("proxy-cluster"))
	if err != nil {
		return err
	}
	m := buildMatrix(snaps, e.c.String("cluster"), e.c.Bool("verbose"))
	if c := e.c.String("cluster"); c != "" && m.Clusters[c] == nil {
		return fmt.Errorf("cluster %q is in no published snapshot", c)
	}
	return e.render(m, func(w io.Writer) error { return m.table(w, e.c.Bool("verbose")) })
}

func buildMatrix(snaps map[string]*snapshot.Snapshot, only string, verbose bool) matrix {
	m := matrix{Clusters: map[string]*matrixCluster{}}
	for pc, s := range snaps {
		for name, cl := range s.Clusters {
			if only != "" && name != only {
				continue
			}
			mc := m.Clusters[name]
			if mc == nil {
				mc = &matrixCluster{Rows: map[string]matrixRow{}}
				m.Clusters[name] = mc
			}
			for sc := range cl.SubClusters {
				if !slices.Contains(mc.SubClusters, sc) {
					mc.SubClusters = append(mc.SubClusters, sc)
				}
			}
			r := matrixRow{Version: s.Meta.Version, Denominator: cl.Row.Denominator, Weights: cl.Row.Weights, Pinned: cl.Row.Pinned}
			if verbose {
				r.Explanation = cl.Explanation
			}
			mc.Rows[pc] = r
		}
	}
	for _, mc := range m.Clusters {
		sort.Strings(mc.SubClusters)
	}
	return m
}

func (m matrix) table(w io.Writer, verbose bool) error {
	names := sortedKeys(m.Clusters)
	for i, name := range names {
		mc := m.Clusters[name]
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "CLUSTER %s\n", name)
		fmt.Fprintf(w, "PROXY CLUSTER\tVERSION\t%s\tBLACKHOLE\tPINNED\n", strings.Join(mc.SubClusters, "\t"))
		for _, pc := range sortedKeys(mc.Rows) {
			r := mc.Rows[pc]
			cells := make([]string, 0, len(mc.SubClusters)+1)
			for _, sc := range append(slices.Clone(mc.SubClusters), config.Blackhole) {
				cells = append(cells, formatWeight(r.Weights[sc], r.Denominator))
			}
			pinned := ""
			if r.Pinned {
				pinned = "pinned"
			}
			fmt.Fprintf(w, "%s\tv%d\t%s\t%s\n", pc, r.Version, strings.Join(cells, "\t"), pinned)
		}
		if verbose {
			for _, pc := range sortedKeys(mc.Rows) {
				x := mc.Rows[pc].Explanation
				if x == nil {
					continue
				}
				fmt.Fprintf(w, "  %s: %s, demand %.1f rps\n", pc, x.Mode, x.DemandRPS)
				for _, g := range x.Guardrails {
					fmt.Fprintf(w, "    guardrail: %s\n", g)
				}
				for _, n := range x.Notes {
					fmt.Fprintf(w, "    note: %s\n", n)
				}
				for _, sc := range sortedKeys(x.Utilisation) {
					fmt.Fprintf(w, "    projected utilisation %s: %.0f%%\n", sc, 100*x.Utilisation[sc])
				}
			}
		}
	}
	return nil
}

// formatWeight prints a weight as a percentage of its row.
func formatWeight(w, denom int) string {
	if denom == 0 || denom == 100 {
		return strconv.Itoa(w)
	}
	return strconv.FormatFloat(100*float64(w)/float64(denom), 'f', 2, 64)
}

// columnNames is the header of weight columns: tables say BLACKHOLE;
// GSLB_BLACKHOLE is the name in BFE files and in weight specs only.
func columnNames(cols []string) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = c
		if c == config.Blackhole {
			out[i] = "BLACKHOLE"
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

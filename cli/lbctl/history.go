package lbctl

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/edit"
	"github.com/sluicelb/sluice/api/snapshot"
)

func historyCommand() *cli.Command {
	return &cli.Command{
		Name:      "history",
		Usage:     "list the snapshot versions kept for a proxy cluster",
		UsageText: "lbctl history --proxy-cluster B",
		Flags:     []cli.Flag{&cli.StringFlag{Name: "proxy-cluster", Required: true}},
		Action: action(func(e *env) error {
			ctx, cancel := e.ctx()
			defer cancel()
			h, err := e.history(ctx, e.c.String("proxy-cluster"))
			if err != nil {
				return err
			}
			metas := make([]snapshot.Meta, len(h))
			for i, m := range h {
				metas[i] = m.Meta
			}
			return e.render(metas, func(w io.Writer) error {
				fmt.Fprintln(w, "VERSION\tPARENT\tCREATED\tPUBLISHER\tHASH\tREASON\tINTENTS")
				var before []snapshot.Intent
				for i, m := range metas {
					fmt.Fprintf(w, "v%d\tv%d\t%s\t%s\t%.12s\t%s\t%s\n", m.Version, m.Parent, m.CreatedAt.UTC().Format(time.RFC3339), m.Author, m.Hash, m.Reason,
						intentChanges(before, m.Intents, i == 0))
					before = m.Intents
				}
				return nil
			})
		}),
	}
}

// intentChanges says which operator intents a version added (with who and
// why) and dropped compared with the version before it; the first version
// listed shows all it includes.
func intentChanges(before, after []snapshot.Intent, first bool) string {
	var parts []string
	has := func(l []snapshot.Intent, x snapshot.Intent) bool { return slices.Contains(l, x) }
	for _, x := range after {
		if first || !has(before, x) {
			p := "+" + x.String()
			if x.Author != "" {
				p += " by " + x.Author
			}
			if x.Reason != "" {
				p += fmt.Sprintf(" (%s)", x.Reason)
			}
			parts = append(parts, p)
		}
	}
	for _, x := range before {
		if !first && !slices.ContainsFunc(after, func(y snapshot.Intent) bool { return y.Kind == x.Kind && y.Object == x.Object }) {
			parts = append(parts, "-"+x.String())
		}
	}
	return strings.Join(parts, "; ")
}

func parseVersion(s string) (uint64, error) {
	if len(s) > 0 && (s[0] == 'v' || s[0] == 'V') {
		s = s[1:]
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v == 0 {
		return 0, usageErr("version %q: want a positive number like 12 or v12", s)
	}
	return v, nil
}

// rowChange is one row that differs between two snapshots.
type rowChange struct {
	Cluster string         `json:"cluster"`
	Before  map[string]int `json:"before,omitempty"`
	After   map[string]int `json:"after,omitempty"`
}

func diffCommand() *cli.Command {
	return &cli.Command{
		Name:      "diff",
		Usage:     "compare two snapshot versions of a proxy cluster row by row",
		UsageText: "lbctl diff --proxy-cluster B V1 V2",
		ArgsUsage: "V1 V2",
		Flags:     []cli.Flag{&cli.StringFlag{Name: "proxy-cluster", Required: true}},
		Action: action(func(e *env) error {
			if e.c.NArg() != 2 {
				return usageErr("lbctl diff needs two versions, e.g. lbctl diff --proxy-cluster BFE1 11 12")
			}
			v1, err := parseVersion(e.c.Args().Get(0))
			if err != nil {
				return err
			}
			v2, err := parseVersion(e.c.Args().Get(1))
			if err != nil {
				return err
			}
			pc := e.c.String("proxy-cluster")
			ctx, cancel := e.ctx()
			defer cancel()
			a, err := e.snapshot(ctx, pc, v1)
			if err != nil {
				return err
			}
			b, err := e.snapshot(ctx, pc, v2)
			if err != nil {
				return err
			}
			changes := diffRows(a, b)
			return e.render(changes, func(w io.Writer) error {
				if len(changes) == 0 {
					fmt.Fprintf(w, "v%d and v%d have the same rows\n", v1, v2)
				}
				for _, c := range changes {
					names := edit.RowKeys(merge(c.Before, c.After))
					fmt.Fprintf(w, "%s\n  - v%d\t%s\n  + v%d\t%s\n", c.Cluster, v1, edit.FormatRow(c.Before, names), v2, edit.FormatRow(c.After, names))
				}
				if a.Meta.Hash != b.Meta.Hash && len(changes) == 0 {
					fmt.Fprintln(w, "(other content differs: instances, routes or policy)")
				}
				return nil
			})
		}),
	}
}

func merge(a, b map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if _, ok := out[k]; !ok {
			out[k] = v
		}
	}
	return out
}

func diffRows(a, b *snapshot.Snapshot) []rowChange {
	var names []string
	for n := range a.Clusters {
		names = append(names, n)
	}
	for n := range b.Clusters {
		if _, ok := a.Clusters[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var out []rowChange
	for _, n := range names {
		ra, rb := a.Clusters[n].Row.Weights, b.Clusters[n].Row.Weights
		if !equalRows(ra, rb) {
			out = append(out, rowChange{Cluster: n, Before: ra, After: rb})
		}
	}
	return out
}

func equalRows(a, b map[string]int) bool {
	for k, v := range merge(a, b) {
		if a[k] != v || b[k] != v {
			return false
		}
	}
	return true
}

func rollbackCommand() *cli.Command {
	return &cli.Command{
		Name:      "rollback",
		Usage:     "publish an earlier version's rows again, as pins (a new version; history is never rewritten)",
		UsageText: "lbctl rollback --proxy-cluster B --to V [--yes]",
		Description: "Pins every row of proxy cluster B to what version V had, so the scheduler publishes V's weights as a\n" +
			"new version. Unpin rows (lbctl weights unpin) to hand them back to the scheduler.",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "proxy-cluster", Required: true},
			&cli.StringFlag{Name: "to", Required: true, Usage: "version to go back to"},
			&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "do not ask for confirmation"},
		}, writeWaitFlags()...),
		Action: action(func(e *env) error {
			v, err := parseVersion(e.c.String("to"))
			if err != nil {
				return err
			}
			pc := e.c.String("proxy-cluster")
			ctx, cancel := e.ctx()
			old, err := e.snapshot(ctx, pc, v)
			cancel()
			if err != nil {
				return err
			}
			reason := fmt.Sprintf("rollback of %s to v%d", pc, v)
			fmt.Fprintf(e.info(), "Rows of %s at v%d:\n", pc, v)
			for _, n := range sortedKeys(old.Clusters) {
				r := old.Clusters[n].Row
				fmt.Fprintf(e.info(), "  %s: %s\n", n, edit.FormatRow(r.Weights, edit.RowKeys(r.Weights)))
			}
			if !e.c.Bool("yes") && !confirm(e, "Pin these rows?") {
				return withCode(ExitAborted, fmt.Errorf("not rolled back"))
			}
			var pinned []config.Pin
			rev, err := e.updateState(func(s *config.State) error {
				pinned = nil
				for _, n := range sortedKeys(old.Clusters) {
					r := old.Clusters[n].Row
					if _, ok := s.Clusters[n]; !ok {
						continue
					}
					w := percentRow(r)
					pin := config.Pin{ProxyCluster: pc, Cluster: n, Weights: w, AllowFullDrop: r.AllowFullDrop, Reason: reason, Author: e.author()}
					pinned = append(pinned, pin)
					if i := slices.IndexFunc(s.Pins, func(p config.Pin) bool { return p.Cluster == n && p.ProxyCluster == pc }); i >= 0 {
						s.Pins[i] = pin
					} else {
						s.Pins = append(s.Pins, pin)
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			return e.wroteDesired(writeResult{Action: "rolled_back", Revision: rev, Pins: pinned},
				fmt.Sprintf("Pinned %s to v%d's rows (desired state revision %d), to be published as a new version.", pc, v, rev), pc)
		}),
	}
}

// percentRow converts a row on any denominator to a pin on 100, by largest
// remainder so it still sums exactly.
func percentRow(r snapshot.Row) map[string]int {
	if r.Denominator == config.DefaultDenominator || r.Denominator == 0 {
		return r.Weights
	}
	type rem struct {
		k string
		f float64
	}
	out := map[string]int{}
	var rems []rem
	sum := 0
	for k, w := range r.Weights {
		exact := float64(w) * 100 / float64(r.Denominator)
		out[k] = int(exact)
		sum += out[k]
		rems = append(rems, rem{k, exact - float64(out[k])})
	}
	slices.SortFunc(rems, func(a, b rem) int {
		if a.f != b.f {
			if a.f > b.f {
				return -1
			}
			return 1
		}
		if a.k < b.k {
			return -1
		}
		return 1
	})
	for i := 0; sum < 100 && i < len(rems); i++ {
		out[rems[i].k]++
		sum++
	}
	return out
}

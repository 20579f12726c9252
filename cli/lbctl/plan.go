package lbctl

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/edit"
	"github.com/sluicelb/sluice/api/snapshot"
)

// planDoc is the part of the scheduler's plan document lbctl shows.
type planDoc struct {
	SchedulerID   string `json:"scheduler_id"`
	Leader        bool   `json:"leader"`
	WhatIf        bool   `json:"what_if"`
	ProxyClusters map[string]struct {
		LiveVersion uint64 `json:"live_version"`
		Rows        map[string]struct {
			Row         snapshot.Row          `json:"row"`
			Explanation *snapshot.Explanation `json:"explanation"`
		} `json:"rows"`
	} `json:"proxy_clusters"`
	Clusters map[string]struct {
		Utilisation map[string]float64 `json:"Utilisation"`
	} `json:"clusters"`
}

func planCommand() *cli.Command {
	return &cli.Command{
		Name:  "plan",
		Usage: "projected weights and utilisation for a what-if, computed but not published",
		UsageText: `lbctl plan --what-if "drain demo-main/SC1"            (the scheduler computes it on its live inputs)
lbctl plan --what-if "pin BFE1 demo-main SC1=50 SC2=50"
lbctl plan --what-if "shift BFE1 demo-main IDC1 IDC2 30"
lbctl plan                                           (the scheduler's current plan)
lbctl plan --scenario FILE                           (offline: no etcd, no scheduler)`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "what-if", Usage: "a proposed drain, pin or shift (see usage)"},
			&cli.StringFlag{Name: "scenario", Usage: "offline scenario file (docs/scheduler.md)"},
			&cli.StringFlag{Name: "cluster", Usage: "only show this backend cluster"},
		},
		Action: action(func(e *env) error {
			if f := e.c.String("scenario"); f != "" {
				return planScenario(e, f)
			}
			ctx, cancel := e.ctx()
			defer cancel()
			base, err := e.schedulerURL(ctx)
			if err != nil {
				return err
			}
			var doc planDoc
			raw := map[string]any{}
			if w := e.c.String("what-if"); w != "" {
				req, err := parseWhatIf(w)
				if err != nil {
					return err
				}
				if _, err := e.api().do(ctx, http.MethodPost, base+"/v1/plan", req, &raw); err != nil {
					return err
				}
				if _, err := e.api().do(ctx, http.MethodPost, base+"/v1/plan", req, &doc); err != nil {
					return err
				}
			} else {
				if _, err := e.api().do(ctx, http.MethodGet, base+"/v1/plan", nil, &raw); err != nil {
					return err
				}
				if _, err := e.api().do(ctx, http.MethodGet, base+"/v1/plan", nil, &doc); err != nil {
					return err
				}
			}
			return e.render(raw, func(w io.Writer) error { return doc.table(w, e.c.String("cluster")) })
		}),
	}
}

// parseWhatIf turns the --what-if text into the scheduler's request body.
func parseWhatIf(s string) (map[string]any, error) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return nil, usageErr("--what-if is empty")
	}
	switch f[0] {
	case "drain":
		if len(f) != 2 || !strings.Contains(f[1], "/") {
			return nil, usageErr(`--what-if "drain CLUSTER/SUBCLUSTER"`)
		}
		return map[string]any{"drain": f[1]}, nil
	case "pin":
		if len(f) < 4 {
			return nil, usageErr(`--what-if "pin PROXYCLUSTER CLUSTER SC1=50 SC2=50"`)
		}
		row, err := parseWeights(f[3:])
		if err != nil {
			return nil, err
		}
		return map[string]any{"pins": []config.Pin{{ProxyCluster: f[1], Cluster: f[2], Weights: row, Reason: "what-if"}}}, nil
	case "shift":
		if len(f) != 6 {
			return nil, usageErr(`--what-if "shift PROXYCLUSTER CLUSTER FROM_IDC TO_IDC PERCENT"`)
		}
		var pct int
		if _, err := fmt.Sscan(f[5], &pct); err != nil || pct < 1 || pct > 100 {
			return nil, usageErr("shift percent %q: want 1..100", f[5])
		}
		return map[string]any{"shift": config.Shift{ID: "what-if", ProxyCluster: f[1], Cluster: f[2], From: f[3], To: f[4], Percent: pct, StepPercent: pct, State: config.ShiftRunning}}, nil
	}
	return nil, usageErr("--what-if %q: start with drain, pin or shift", s)
}

func (d planDoc) table(w io.Writer, only string) error {
	if d.WhatIf {
		fmt.Fprintln(w, "WHAT-IF (not published)")
	}
	// Per cluster: rows of every proxy cluster.
	clusters := map[string]map[string]snapshot.Row{}
	expl := map[string]map[string]*snapshot.Explanation{}
	for pc, p := range d.ProxyClusters {
		for c, r := range p.Rows {
			if only != "" && c != only {
				continue
			}
			if clusters[c] == nil {
				clusters[c], expl[c] = map[string]snapshot.Row{}, map[string]*snapshot.Explanation{}
			}
			clusters[c][pc] = r.Row
			expl[c][pc] = r.Explanation
		}
	}
	for i, c := range sortedKeys(clusters) {
		if i > 0 {
			fmt.Fprintln(w)
		}
		subs := map[string]int{}
		for _, r := range clusters[c] {
			for k := range r.Weights {
				subs[k] = 0
			}
		}
		cols := edit.RowKeys(subs)
		fmt.Fprintf(w, "CLUSTER %s\nPROXY CLUSTER\t%s\tMODE\n", c, strings.Join(columnNames(cols), "\t"))
		for _, pc := range sortedKeys(clusters[c]) {
			r := clusters[c][pc]
			cells := make([]string, len(cols))
			for j, k := range cols {
				cells[j] = formatWeight(r.Weights[k], r.Denominator)
			}
			mode := ""
			if x := expl[c][pc]; x != nil {
				mode = x.Mode
			}
			fmt.Fprintf(w, "%s\t%s\t%s\n", pc, strings.Join(cells, "\t"), mode)
		}
		if u := d.Clusters[c].Utilisation; len(u) > 0 {
			fmt.Fprintf(w, "projected utilisation:")
			for _, sc := range sortedKeys(u) {
				fmt.Fprintf(w, " %s %.0f%%", sc, 100*u[sc])
			}
			fmt.Fprintln(w)
		}
	}
	return nil
}

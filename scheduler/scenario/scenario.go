// Package scenario is the scheduler's offline mode: a scenario file holds a
// desired state, optional members, a demand table, optional previous rows
// and optional shifts; Run plans it with scheduler/plan (no etcd) and the
// Report renders the W matrix, the flows, the objective, the projected
// utilisation and every explanation as a table or JSON. The format is
// documented in docs/scheduler.md; lbscheduler plan --input wires it up.
package scenario

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
	"github.com/sluicelb/sluice/scheduler/plan"
)

// Scenario is one offline planning problem (YAML or JSON, decoded strictly).
type Scenario struct {
	// State is the desired state, in the same schema lbctl writes.
	State config.State `json:"state"`
	// Members[cluster][subCluster] replaces a cluster's static instances
	// (as agents would register them, with their state). Optional.
	Members map[string]map[string][]config.Instance `json:"members,omitempty"`
	// Demand[proxyCluster][cluster] in requests/s. Optional: missing pairs
	// use scheduler.default_demand_rps, then the capacity-proportional
	// fallback.
	Demand map[string]map[string]float64 `json:"demand,omitempty"`
	// Previous[proxyCluster][cluster] is the published row (weights on the
	// state's denominator) for max-step, hysteresis and stability. Optional.
	Previous map[string]map[string]map[string]int `json:"previous,omitempty"`
	// Shifts active now with the points applied so far. Optional.
	Shifts []Shift `json:"shifts,omitempty"`
}

// Shift is a shift intent and its progress.
type Shift struct {
	Shift          config.Shift `json:"shift"`
	AppliedPercent int          `json:"applied_percent"`
}

// Report is a computed scenario.
type Report struct {
	Scenario Scenario
	Result   plan.Result
}

// ErrFormat is returned (wrapped) by Render for an unknown output format.
var ErrFormat = errors.New("unknown output format")

// Parse decodes a scenario strictly and checks its desired state with the
// shared validator and its own fields.
func Parse(raw []byte) (*Scenario, error) {
	var sc Scenario
	if err := codec.Unmarshal(raw, &sc); err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	if err := validate.State(&sc.State); err != nil {
		return nil, fmt.Errorf("scenario: state: %w", err)
	}
	var errs []string
	for pc, m := range sc.Demand {
		if _, ok := sc.State.Topology.ProxyClusters[pc]; !ok {
			errs = append(errs, fmt.Sprintf("demand.%s: proxy cluster %q is not in topology.proxy_clusters", pc, pc))
		}
		for c, d := range m {
			if _, ok := sc.State.Clusters[c]; !ok {
				errs = append(errs, fmt.Sprintf("demand.%s.%s: cluster %q is not in clusters", pc, c, c))
			}
			if d < 0 || math.IsNaN(d) || math.IsInf(d, 0) {
				errs = append(errs, fmt.Sprintf("demand.%s.%s: %v is not a finite number ≥ 0", pc, c, d))
			}
		}
	}
	for c, m := range sc.Members {
		cl, ok := sc.State.Clusters[c]
		if !ok {
			errs = append(errs, fmt.Sprintf("members.%s: cluster %q is not in clusters", c, c))
			continue
		}
		for s := range m {
			if _, ok := cl.SubClusters[s]; !ok {
				errs = append(errs, fmt.Sprintf("members.%s.%s: sub-cluster %q is not in cluster %q", c, s, s, c))
			}
		}
	}
	for pc, m := range sc.Previous {
		if _, ok := sc.State.Topology.ProxyClusters[pc]; !ok {
			errs = append(errs, fmt.Sprintf("previous.%s: proxy cluster %q is not in topology.proxy_clusters", pc, pc))
		}
		for c, w := range m {
			if _, ok := sc.State.Clusters[c]; !ok {
				errs = append(errs, fmt.Sprintf("previous.%s.%s: cluster %q is not in clusters", pc, c, c))
			}
			for k, v := range w {
				if v < 0 {
					errs = append(errs, fmt.Sprintf("previous.%s.%s.%s: %d is negative", pc, c, k, v))
				}
			}
		}
	}
	for i, s := range sc.Shifts {
		p := fmt.Sprintf("shifts[%d]", i)
		if _, ok := sc.State.Topology.ProxyClusters[s.Shift.ProxyCluster]; !ok {
			errs = append(errs, fmt.Sprintf("%s.shift.proxy_cluster: %q is not in topology.proxy_clusters", p, s.Shift.ProxyCluster))
		}
		if _, ok := sc.State.Clusters[s.Shift.Cluster]; !ok {
			errs = append(errs, fmt.Sprintf("%s.shift.cluster: %q is not in clusters", p, s.Shift.Cluster))
		}
		if s.AppliedPercent < 0 || s.AppliedPercent > 100 {
			errs = append(errs, fmt.Sprintf("%s.applied_percent: %d is outside 0..100", p, s.AppliedPercent))
		}
	}
	if len(errs) > 0 {
		sortStrings(errs)
		return nil, fmt.Errorf("scenario: %s", strings.Join(errs, "; "))
	}
	return &sc, nil
}

// Run parses raw and plans it.
func Run(raw []byte) (Report, error) {
	sc, err := Parse(raw)
	if err != nil {
		return Report{}, err
	}
	v := plan.View{State: &sc.State, Members: sc.Members, Demand: sc.Demand}
	for _, s := range sc.Shifts {
		v.Shifts = append(v.Shifts, plan.ActiveShift{Shift: s.Shift, AppliedPercent: s.AppliedPercent})
	}
	den := sc.State.Scheduler.Denominator
	if den <= 0 {
		den = config.DefaultDenominator
	}
	prev := map[string]*snapshot.Snapshot{}
	for pc, m := range sc.Previous {
		s := &snapshot.Snapshot{Meta: snapshot.Meta{ProxyCluster: pc}, Clusters: map[string]snapshot.Cluster{}}
		for c, w := range m {
			s.Clusters[c] = snapshot.Cluster{Row: snapshot.Row{Denominator: den, Weights: w}}
		}
		prev[pc] = s
	}
	res, err := plan.NewPlanner().Compute(v, prev)
	if err != nil {
		return Report{}, fmt.Errorf("scenario: %w", err)
	}
	return Report{Scenario: *sc, Result: res}, nil
}

// Render writes the report as "table" (for people) or "json" (for tools).
func (r Report) Render(w io.Writer, format string) error {
	switch format {
	case "table":
		return r.renderTable(w)
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r.jsonReport())
	default:
		return fmt.Errorf("render: %w %q: want table or json", ErrFormat, format)
	}
}

// JSONReport is the JSON output: one entry per backend cluster.
type JSONReport struct {
	Clusters []JSONCluster `json:"clusters"`
}

// JSONCluster is one backend cluster's plan.
type JSONCluster struct {
	Name        string             `json:"name"`
	SubClusters []string           `json:"subclusters"`
	CapacityRPS map[string]float64 `json:"capacity_rps"`
	Utilisation map[string]float64 `json:"utilisation"`
	Objective   float64            `json:"objective"`
	Rows        []JSONRow          `json:"rows"`
}

// JSONRow is one proxy cluster's row of a cluster.
type JSONRow struct {
	ProxyCluster string                `json:"proxy_cluster"`
	Mode         string                `json:"mode"`
	DemandRPS    float64               `json:"demand_rps"`
	Row          snapshot.Row          `json:"row"`
	FlowRPS      map[string]float64    `json:"flow_rps"`
	DropRPS      float64               `json:"drop_rps"`
	Explanation  *snapshot.Explanation `json:"explanation"`
}

func (r Report) jsonReport() JSONReport {
	var out JSONReport
	for _, name := range sortedKeys(r.Result.Clusters) {
		cp := r.Result.Clusters[name]
		jc := JSONCluster{Name: name, SubClusters: cp.SubClusters, CapacityRPS: map[string]float64{}, Utilisation: cp.Utilisation, Objective: round6(cp.Objective)}
		for j, s := range cp.SubClusters {
			jc.CapacityRPS[s] = round6(cp.CapacityRPS[j])
		}
		for b, pc := range cp.ProxyClusters {
			c := r.Result.Snapshots[pc].Clusters[name]
			jr := JSONRow{ProxyCluster: pc, Mode: cp.Mode[pc], DemandRPS: round6(cp.DemandRPS[b]), Row: c.Row,
				FlowRPS: map[string]float64{}, DropRPS: round6(cp.Drop[b]), Explanation: c.Explanation}
			for j, s := range cp.SubClusters {
				jr.FlowRPS[s] = round6(cp.Flow[b][j])
			}
			jc.Rows = append(jc.Rows, jr)
		}
		out.Clusters = append(out.Clusters, jc)
	}
	return out
}

func (r Report) renderTable(w io.Writer) error {
	ew := &errWriter{w: w}
	for i, name := range sortedKeys(r.Result.Clusters) {
		cp := r.Result.Clusters[name]
		if i > 0 {
			ew.printf("\n")
		}
		den := 0
		if len(cp.ProxyClusters) > 0 {
			den = r.Result.Snapshots[cp.ProxyClusters[0]].Clusters[name].Row.Denominator
		}
		ew.printf("cluster %s (denominator %d)\n\n", name, den)

		tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "proxy cluster\tmode\tdemand rps\t")
		for _, s := range cp.SubClusters {
			fmt.Fprintf(tw, "%s\t", s)
		}
		fmt.Fprintf(tw, "%s\t\n", config.Blackhole)
		for b, pc := range cp.ProxyClusters {
			row := r.Result.Snapshots[pc].Clusters[name].Row
			mode := cp.Mode[pc]
			fmt.Fprintf(tw, "%s\t%s\t%s\t", pc, mode, num(cp.DemandRPS[b]))
			for _, s := range cp.SubClusters {
				fmt.Fprintf(tw, "%d\t", row.Weights[s])
			}
			fmt.Fprintf(tw, "%d\t\n", row.Weights[config.Blackhole])
		}
		if err := tw.Flush(); err != nil {
			return err
		}

		ew.printf("\nflows (rps, optimum before rounding and guardrails)\n")
		tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "proxy cluster\t")
		for _, s := range cp.SubClusters {
			fmt.Fprintf(tw, "%s\t", s)
		}
		fmt.Fprintf(tw, "drop\t\n")
		for b, pc := range cp.ProxyClusters {
			fmt.Fprintf(tw, "%s\t", pc)
			for j := range cp.SubClusters {
				fmt.Fprintf(tw, "%s\t", num(cp.Flow[b][j]))
			}
			fmt.Fprintf(tw, "%s\t\n", num(cp.Drop[b]))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		ew.printf("objective %s\n\n", num(cp.Objective))

		tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "sub-cluster\tcapacity rps\tprojected utilisation\t\n")
		for j, s := range cp.SubClusters {
			u, ok := cp.Utilisation[s]
			us := "-"
			if ok {
				us = fmt.Sprintf("%.1f%%", u*100)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t\n", s, num(cp.CapacityRPS[j]), us)
		}
		if err := tw.Flush(); err != nil {
			return err
		}

		ew.printf("\nexplanations\n")
		for _, pc := range cp.ProxyClusters {
			e := r.Result.Snapshots[pc].Clusters[name].Explanation
			if e == nil {
				continue
			}
			ew.printf("  %s: %s", pc, e.Mode)
			if len(e.Optimum) > 0 {
				ew.printf("; optimum")
				for _, k := range sortedKeys(e.Optimum) {
					ew.printf(" %s=%s", k, num(e.Optimum[k]))
				}
			}
			ew.printf("\n")
			for _, g := range e.Guardrails {
				ew.printf("    guardrail %s\n", g)
			}
			for _, n := range e.Notes {
				ew.printf("    note %s\n", n)
			}
		}
	}
	return ew.err
}

// num prints a number with up to 3 decimals and no trailing zeros.
func num(x float64) string {
	s := fmt.Sprintf("%.3f", x)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" {
		s = "0"
	}
	return s
}

func round6(x float64) float64 { return math.Round(x*1e6) / 1e6 }

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, args ...any) { fmt.Fprintf(e, format, args...) }

package lbctl

import (
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"
	"sigs.k8s.io/yaml"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/validate"
)

// getSubcommands are `lbctl get config|snapshot|drains|shifts`.
func getSubcommands() []*cli.Command {
	return []*cli.Command{
		{
			Name:      "snapshot",
			Usage:     "print a published snapshot (the live one unless --version): a file for validate and explain --config",
			UsageText: "lbctl get snapshot --proxy-cluster B [--version V] [-o json]",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "proxy-cluster", Required: true, Usage: "whose snapshot"},
				&cli.StringFlag{Name: "version", Usage: "version, e.g. 12 or v12 (default: the live one)"},
			},
			Action: action(getSnapshot),
		},
		{
			Name:      "drains",
			Usage:     "list the drained sub-clusters of the stored desired state",
			UsageText: "lbctl get drains [--cluster C] [-o json|yaml]",
			Flags:     []cli.Flag{&cli.StringFlag{Name: "cluster", Usage: "only this backend cluster"}},
			Action:    action(getDrains),
		},
		{
			Name:      "shifts",
			Usage:     "list shifts with their progress (as lbctl shift list)",
			UsageText: "lbctl get shifts [-o json|yaml]",
			Action:    action(shiftList),
		},
	}
}

func getSnapshot(e *env) error {
	pc := e.c.String("proxy-cluster")
	ctx, cancel := e.ctx()
	defer cancel()
	var v uint64
	live := ""
	if s := e.c.String("version"); s != "" {
		var err error
		if v, err = parseVersion(s); err != nil {
			return err
		}
	} else {
		ptrs, err := e.pointers(ctx)
		if err != nil {
			return err
		}
		p, ok := ptrs[pc]
		if !ok {
			return fmt.Errorf("no snapshot has been published for proxy cluster %q (the proxy clusters with one are %s)", pc, list(sortedKeys(ptrs)))
		}
		v, live = p.Version, " (live)"
	}
	s, err := e.snapshot(ctx, pc, v)
	if err != nil {
		return err
	}
	if e.format == "json" {
		return e.render(s, nil)
	}
	b, err := yaml.Marshal(s)
	if err != nil {
		return err
	}
	if e.format == "table" {
		fmt.Fprintf(e.out, "# snapshot of %s, version %d%s\n", pc, v, live)
	}
	_, err = e.out.Write(b)
	return err
}

func getDrains(e *env) error {
	ctx, cancel := e.ctx()
	defer cancel()
	st, err := e.storedState(ctx)
	if err != nil {
		return err
	}
	c := e.c.String("cluster")
	if _, ok := st.State.Clusters[c]; c != "" && !ok {
		return fmt.Errorf("--cluster %q does not exist (the clusters are %s)", c, list(sortedKeys(st.State.Clusters)))
	}
	drains := []config.Drain{}
	for _, d := range st.State.Drains {
		if c == "" || d.Cluster == c {
			drains = append(drains, d)
		}
	}
	err = e.render(drains, func(w io.Writer) error {
		fmt.Fprintln(w, "CLUSTER\tSUBCLUSTER\tFULL DROP\tREASON\tAUTHOR")
		for _, d := range drains {
			drop := "-"
			if d.AllowFullDrop {
				drop = "allowed"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", d.Cluster, d.SubCluster, drop, d.Reason, d.Author)
		}
		if len(drains) == 0 {
			fmt.Fprintln(w, "(no drained sub-clusters)")
		}
		return nil
	})
	if err != nil {
		return err
	}
	// A state written by hand that breaks a rule is not in force: say so.
	if verr := validate.State(&st.State); verr != nil {
		return fmt.Errorf("the stored desired state (revision %d) is invalid, so the scheduler ignores it and keeps the last valid one; these drains are not in force:\n%w", st.Revision, verr)
	}
	return nil
}

// shiftView is the JSON/YAML shape of a shift in lbctl's output: durations
// in seconds, no zero times.
type shiftView struct {
	ID           string        `json:"id"`
	ProxyCluster string        `json:"proxy_cluster"`
	Cluster      string        `json:"cluster"`
	From         string        `json:"from"`
	To           string        `json:"to"`
	Percent      int           `json:"percent"`
	RampSeconds  float64       `json:"ramp_seconds,omitempty"`
	StepPercent  int           `json:"step_percent,omitempty"`
	State        string        `json:"state"`
	Reason       string        `json:"reason,omitempty"`
	Author       string        `json:"author,omitempty"`
	CreatedAt    time.Time     `json:"created_at,omitzero"`
	Progress     *progressView `json:"progress,omitempty"`
	// Invalid is why the scheduler ignores this intent (it fails decoding:
	// hand-written); ID is then the key's last element, State "invalid".
	Invalid string `json:"invalid,omitempty"`
}

// stateInvalid is the state shown for an intent the scheduler ignores.
const stateInvalid = "invalid"

type progressView struct {
	AppliedPercent int       `json:"applied_percent"`
	TargetPercent  int       `json:"target_percent"`
	State          string    `json:"state"`
	Version        uint64    `json:"version"`
	UpdatedAt      time.Time `json:"updated_at,omitzero"`
	Message        string    `json:"message,omitempty"`
}

func viewShift(sh config.Shift, p *config.ShiftProgress) shiftView {
	v := shiftView{ID: sh.ID, ProxyCluster: sh.ProxyCluster, Cluster: sh.Cluster, From: sh.From, To: sh.To, Percent: sh.Percent,
		RampSeconds: sh.Ramp.D().Seconds(), StepPercent: sh.StepPercent, State: sh.State, Reason: sh.Reason, Author: sh.Author, CreatedAt: sh.CreatedAt}
	if p != nil {
		v.Progress = &progressView{AppliedPercent: p.AppliedPercent, TargetPercent: p.TargetPercent, State: p.State, Version: p.Version, UpdatedAt: p.UpdatedAt, Message: p.Message}
	}
	return v
}

package lbctl

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/rollout"
	"github.com/sluicelb/sluice/api/snapshot"
)

func rolloutCommand() *cli.Command {
	return &cli.Command{
		Name:  "rollout",
		Usage: "watch snapshot rollouts; act on staged rollouts",
		Subcommands: append([]*cli.Command{{
			Name:      "status",
			Usage:     "per proxy: SYNCED, PENDING, REJECTED (reason), AHEAD (of a moved-back pointer), STALE (last seen T) or GONE (lease expired); exit 0 only when every live proxy runs the target",
			UsageText: "lbctl rollout status [--proxy-cluster B] [--version V | --revision R] [--wait --wait-timeout 2m | --watch]",
			Description: "A proxy cluster whose newest input the scheduler could not publish is BLOCKED (reason): not converged.\n" +
				"The target is each proxy cluster's live snapshot (current/<proxy cluster>: lineage and version) unless --version is given\n" +
				"(then any later version of the pointer's lineage counts too). A proxy on another lineage is PENDING; one above the pointer\n" +
				"in its lineage is AHEAD (the pointer was moved back; the next publish goes above it).\n" +
				"With --revision R the target is what the scheduler published for input revision R or later (WAITING until it did).\n" +
				"With --watch the table is printed again on every change in etcd until Ctrl-C (exit 0 then).\n" +
				"Staged rollouts: each proxy's target is what its stage runs; each proxy cluster's rollout follows the table (state,\n" +
				"stage, selected proxies, gates with their figures, why it ended). A rolled-back or aborted rollout holds its inputs:\n" +
				"the proxy cluster is BLOCKED until lbctl rollout retry or new inputs.\n" +
				"Exit codes: 0 converged; 4 not converged (the laggards are named); 1 error.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "proxy-cluster", Usage: "only this proxy cluster"},
				&cli.Uint64Flag{Name: "version", Usage: "target version (needs --proxy-cluster)"},
				&cli.Int64Flag{Name: "revision", Usage: "target: what the scheduler published for this input revision (printed by every lbctl write) or later"},
				&cli.BoolFlag{Name: "wait", Usage: "watch until converged or --timeout"},
				&cli.DurationFlag{Name: "wait-timeout", Value: 2 * time.Minute, Usage: "how long --wait waits (the global --timeout bounds each etcd call)"},
				watchFlag(),
			},
			Action: action(func(e *env) error {
				pc := e.c.String("proxy-cluster")
				if e.c.Uint64("version") != 0 && pc == "" {
					return usageErr("--version needs --proxy-cluster")
				}
				q := rolloutQuery{pc: pc, version: e.c.Uint64("version"), revision: e.c.Int64("revision")}
				if q.version != 0 && q.revision != 0 {
					return usageErr("--version and --revision exclude each other")
				}
				if e.c.Bool("watch") {
					if e.c.Bool("wait") {
						return usageErr("--watch and --wait exclude each other")
					}
					return e.watch(func(e *env) error {
						ctx, cancel := e.ctx()
						defer cancel()
						r, err := e.rolloutOf(ctx, q)
						if err != nil {
							return err
						}
						return e.render(r, r.watchTable)
					}, rolloutKeys(e.layout))
				}
				if !e.c.Bool("wait") {
					ctx, cancel := e.ctx()
					defer cancel()
					r, err := e.rolloutOf(ctx, q)
					if err != nil {
						return err
					}
					if r.NoLeader {
						e.progressf("%s", noLeader)
					}
					if err := e.render(r, r.table); err != nil {
						return err
					}
					return r.verdict()
				}
				ctx, cancel := context.WithTimeout(e.c.Context, e.c.Duration("wait-timeout"))
				defer cancel()
				r, err := e.waitFor(ctx, q)
				if rerr := e.render(r, r.table); rerr != nil && err == nil {
					err = rerr
				}
				return err
			}),
		}}, stagedCommands()...),
	}
}

// rolloutReport is the JSON shape of rollout status.
type rolloutReport struct {
	Targets map[string]uint64 `json:"targets"`
	// TargetLineages is the lineage of each target ("" unknown).
	TargetLineages map[string]string `json:"target_lineages,omitempty"`
	Proxies        []proxyRollout    `json:"proxies"`
	Converged      bool              `json:"converged"`
	// Blocked names each proxy cluster whose newest input the scheduler
	// could not publish, with the reason.
	Blocked map[string]string `json:"blocked,omitempty"`
	// NoLeader: no scheduler holds leadership (nothing new is published).
	NoLeader bool `json:"no_leader,omitempty"`
	// Invalid are the inputs the scheduler ignores (by etcd key, with the
	// rule): a hand-written intent that fails decoding is never applied.
	Invalid map[string]string `json:"invalid,omitempty"`
	// Revision (--revision R) and, per proxy cluster, why its snapshot for
	// that revision is not known yet.
	Revision int64             `json:"revision,omitempty"`
	Waiting  map[string]string `json:"waiting,omitempty"`
	// Staged are the staged rollout records (stage, gates, figures, why one
	// ended), one per proxy cluster that had one.
	Staged []rollout.Staged `json:"staged,omitempty"`
	// final: waiting longer cannot help (a failed publish of revision R).
	final bool
}

// proxyRollout is one proxy's line (api/rollout decides it).
type proxyRollout = rollout.Proxy

// rolloutQuery says what to compare the proxies with: the live pointers,
// --version V of one proxy cluster, or (revision > 0) whatever the
// scheduler published for input revision R or later (revision.go).
type rolloutQuery struct {
	pc       string
	version  uint64
	revision int64
}

func (e *env) rolloutOf(ctx context.Context, q rolloutQuery) (rolloutReport, error) {
	pc, version := q.pc, q.version
	// Statuses before pointers: a pointer only moves forward, so a proxy
	// never looks ahead of a pointer published between the two reads.
	sts, err := e.proxyStatuses(ctx, pc)
	if err != nil {
		return rolloutReport{}, err
	}
	ptrs, err := e.pointers(ctx)
	if err != nil {
		return rolloutReport{}, err
	}
	r := rolloutReport{Targets: map[string]uint64{}, TargetLineages: map[string]string{}}
	targets := map[string]rollout.Target{}
	for name, p := range ptrs {
		if pc == "" || name == pc {
			targets[name] = rollout.Target{Pointer: p}
		}
	}
	if version != 0 {
		targets[pc] = rollout.Target{Pointer: snapshot.Pointer{Lineage: ptrs[pc].Lineage, Version: version}, AtLeast: true}
	}
	if pc != "" && targets[pc].Version == 0 {
		return r, fmt.Errorf("no snapshot has been published for proxy cluster %q", pc)
	}
	sched, err := e.schedulerStatus(ctx)
	if err != nil {
		return r, err
	}
	if q.revision > 0 {
		r.Revision = q.revision
		r.Waiting, r.final = rollout.ForRevision(q.revision, sched, targets)
	}
	for name, t := range targets {
		r.Targets[name], r.TargetLineages[name] = t.Version, t.Lineage
	}
	now := time.Now()
	seen, err := e.lastSeen(ctx, pc)
	if err != nil {
		return r, err
	}
	in := rollout.Input{Statuses: sts, LastSeen: seen, Targets: targets, Started: map[string]time.Time{},
		Scheduler: sched, ProxyCluster: pc, Now: now}
	for _, st := range rollout.GoneRecords(sts, seen, now) {
		tg := targets[st.ProxyCluster]
		if _, ok := in.Started[st.ProxyCluster]; !ok && tg.Version != 0 {
			if m, err := e.manifest(ctx, st.ProxyCluster, tg.Version); err == nil {
				in.Started[st.ProxyCluster] = m.Meta.CreatedAt
			}
		}
	}
	if sched != nil {
		r.Invalid = sched.Invalid
	}
	res := rollout.Compute(in)
	r.Proxies, r.Blocked, r.NoLeader = res.Proxies, res.Blocked, res.NoLeader
	if r.Staged, err = e.stagedRollouts(ctx, pc); err != nil {
		return r, err
	}
	if q.revision > 0 {
		// A rollout of these inputs that was rolled back (or aborted)
		// ends the wait at once, even before the scheduler's status says
		// so: the proxies moving to the republished stable content must
		// not look like a converged rollout.
		// It is BLOCKED, as rollout status says once the scheduler
		// reports the rollback.
		for _, s := range r.Staged {
			if s.Holds(s.CandidateHash) && s.InputRevision >= q.revision {
				if r.Blocked == nil {
					r.Blocked = map[string]string{}
				}
				if r.Blocked[s.ProxyCluster] == "" {
					r.Blocked[s.ProxyCluster] = fmt.Sprintf("rollout %s of input revision %d was %s: %s", s.ID, s.InputRevision, strings.ToLower(strings.ReplaceAll(s.State, "_", " ")), s.Reason)
				}
				r.final = true
			}
		}
	}
	for _, s := range r.Staged {
		if w := rollout.StagedWaiting(s); w != "" && r.Waiting[s.ProxyCluster] == "" {
			if r.Waiting == nil {
				r.Waiting = map[string]string{}
			}
			r.Waiting[s.ProxyCluster] = w
		}
	}
	// A blocked proxy cluster is not also WAITING: rollout status (the
	// same scheduler status, api/rollout) says BLOCKED, and so does the
	// last table of a --wait that ends on it.
	for pc := range r.Blocked {
		delete(r.Waiting, pc)
	}
	r.Converged = res.Converged && len(r.Blocked) == 0 && len(r.Waiting) == 0
	return r, nil
}

// verdict turns a report into the exit status.
func (r rolloutReport) verdict() error {
	if r.Converged {
		return nil
	}
	lag := rollout.Result{Proxies: r.Proxies, Blocked: r.Blocked}.Laggards(r.Waiting)
	if len(lag) == 0 {
		return withCode(ExitNotConverged, fmt.Errorf("no live proxy reports a status"))
	}
	return withCode(ExitNotConverged, fmt.Errorf("not converged: %s", strings.Join(lag, "; ")))
}

func (r rolloutReport) table(w io.Writer) error {
	fmt.Fprintln(w, "PROXY CLUSTER\tPROXY\tSTATE\tAPPLIED\tTARGET\tDETAIL")
	for _, p := range r.Proxies {
		detail := p.Reason
		if p.Reason == "not connected to etcd" && !p.Since.IsZero() {
			detail = fmt.Sprintf("%s; last seen %s", p.Reason, p.Since.UTC().Format(time.RFC3339))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\tv%d\tv%d\t%s\n", p.ProxyCluster, p.ID, p.State, p.Applied, p.Target, detail)
	}
	if len(r.Proxies) == 0 {
		fmt.Fprintln(w, "(no live proxies)")
	}
	for _, name := range slices.Sorted(maps.Keys(r.Blocked)) {
		fmt.Fprintf(w, "%s\tBLOCKED (%s)\n", name, r.Blocked[name])
	}
	for _, name := range slices.Sorted(maps.Keys(r.Waiting)) {
		fmt.Fprintf(w, "%s\tWAITING (%s)\n", name, r.Waiting[name])
	}
	for _, k := range slices.Sorted(maps.Keys(r.Invalid)) {
		fmt.Fprintf(w, "%s\tINVALID (%s)\n", k, r.Invalid[k])
	}
	stagedTable(w, r.Staged)
	if r.Converged {
		fmt.Fprintln(w, "converged: every live proxy runs its target version")
	}
	return nil
}

// watchTable is the table --watch prints: the rollout, then the "no
// scheduler is leading" line (on stdout: it is part of each redraw).
func (r rolloutReport) watchTable(w io.Writer) error {
	if err := r.table(w); err != nil {
		return err
	}
	if r.NoLeader {
		fmt.Fprintln(w, noLeader)
	}
	return nil
}

// rolloutKeys are what rollout status shows: the keys lbctl proxies shows
// (statuses, last-seen records, pointers, the scheduler's status).
func rolloutKeys(l keys.Layout) []string { return append(proxyKeys(l), l.RolloutPrefix()) }

// waitRollout watches status and pointer keys until converged or ctx ends.
func (e *env) waitRollout(ctx context.Context, pc string, version uint64) (rolloutReport, error) {
	return e.waitFor(ctx, rolloutQuery{pc: pc, version: version})
}

// waitFor watches until the rollout q describes converged, cannot converge
// (final), or ctx ends.
func (e *env) waitFor(ctx context.Context, q rolloutQuery) (rolloutReport, error) {
	cli, err := e.etcd()
	if err != nil {
		return rolloutReport{}, err
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	changes := cli.Watch(wctx, e.layout.Root(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	last := ""
	tick := time.NewTicker(2 * time.Second) // staleness changes without events
	defer tick.Stop()
	for {
		rctx, rcancel := e.ctx()
		r, err := e.rolloutOf(rctx, q)
		rcancel()
		if err == nil {
			if r.Converged {
				return r, nil
			}
			if r.final {
				return r, r.verdict()
			}
			if line := progressLine(r); line != last {
				e.progressf("%s", line)
				last = line
			}
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return r, err
			}
			return r, withCode(ExitNotConverged, fmt.Errorf("timed out: %w", r.verdict()))
		case <-changes:
		case <-tick.C:
		}
	}
}

func progressLine(r rolloutReport) string {
	counts := map[string]int{}
	for _, p := range r.Proxies {
		counts[p.State]++
	}
	var parts []string
	for _, s := range []string{rollout.Synced, rollout.Pending, rollout.Rejected, rollout.Ahead, rollout.Stale, rollout.Gone} {
		if counts[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
		}
	}
	var tg []string
	for pc, v := range r.Targets {
		tg = append(tg, fmt.Sprintf("%s v%d", pc, v))
	}
	sort.Strings(tg)
	for _, name := range slices.Sorted(maps.Keys(r.Blocked)) {
		parts = append(parts, name+" BLOCKED")
	}
	if r.NoLeader {
		parts = append(parts, "no scheduler is leading")
	}
	if len(r.Invalid) > 0 {
		parts = append(parts, fmt.Sprintf("%d inputs INVALID (ignored)", len(r.Invalid)))
	}
	return fmt.Sprintf("rollout of %s: %s", strings.Join(tg, ", "), strings.Join(parts, ", "))
}

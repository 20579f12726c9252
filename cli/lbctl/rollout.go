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

	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/snapshot"
)

// Proxy rollout states.
const (
	StateSynced   = "SYNCED"
	StatePending  = "PENDING"
	StateRejected = "REJECTED"
	StateStale    = LiveStale
	// StateGone: the proxy's status lease expired; it is listed from its
	// last-seen record for report.GoneFor, and counts as not converged for
	// a rollout that started before it went away.
	StateGone = LiveGone
	// StateAhead: the proxy applied a newer version of the target's lineage
	// than the pointer names (the pointer was moved back by hand or
	// restored); it keeps it (I1) until a version above it is published.
	StateAhead = "AHEAD"
)

func rolloutCommand() *cli.Command {
	return &cli.Command{
		Name:  "rollout",
		Usage: "watch snapshot rollouts",
		Subcommands: []*cli.Command{{
			Name:      "status",
			Usage:     "per proxy: SYNCED, PENDING, REJECTED (reason), AHEAD (of a moved-back pointer), STALE (last seen T) or GONE (lease expired); exit 0 only when every live proxy runs the target",
			UsageText: "lbctl rollout status [--proxy-cluster B] [--version V | --revision R] [--wait --wait-timeout 2m]",
			Description: "A proxy cluster whose newest input the scheduler could not publish is BLOCKED (reason): not converged.\n" +
				"The target is each proxy cluster's live snapshot (current/<proxy cluster>: lineage and version) unless --version is given\n" +
				"(then any later version of the pointer's lineage counts too). A proxy on another lineage is PENDING; one above the pointer\n" +
				"in its lineage is AHEAD (the pointer was moved back; the next publish goes above it).\n" +
				"With --revision R the target is what the scheduler published for input revision R or later (WAITING until it did).\n" +
				"Exit codes: 0 converged; 4 not converged (the laggards are named); 1 error.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "proxy-cluster", Usage: "only this proxy cluster"},
				&cli.Uint64Flag{Name: "version", Usage: "target version (needs --proxy-cluster)"},
				&cli.Int64Flag{Name: "revision", Usage: "target: what the scheduler published for this input revision (printed by every lbctl write) or later"},
				&cli.BoolFlag{Name: "wait", Usage: "watch until converged or --timeout"},
				&cli.DurationFlag{Name: "wait-timeout", Value: 2 * time.Minute, Usage: "how long --wait waits (the global --timeout bounds each etcd call)"},
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
		}},
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
	// Revision (--revision R) and, per proxy cluster, why its snapshot for
	// that revision is not known yet.
	Revision int64             `json:"revision,omitempty"`
	Waiting  map[string]string `json:"waiting,omitempty"`
	// final: waiting longer cannot help (a failed publish of revision R).
	final bool
}

type proxyRollout struct {
	ProxyCluster string    `json:"proxy_cluster"`
	ID           string    `json:"id"`
	State        string    `json:"state"`
	Applied      uint64    `json:"applied_version"`
	Target       uint64    `json:"target_version"`
	Lineage      string    `json:"applied_lineage,omitempty"`
	Reason       string    `json:"reason,omitempty"`
	Since        time.Time `json:"since,omitzero"`
	// NotCounted: a GONE proxy that went away before the target was
	// published does not hold the rollout back.
	NotCounted bool `json:"not_counted,omitempty"`
}

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
	targets := map[string]target{}
	for name, p := range ptrs {
		if pc == "" || name == pc {
			targets[name] = target{Pointer: p}
		}
	}
	if version != 0 {
		targets[pc] = target{Pointer: snapshot.Pointer{Lineage: ptrs[pc].Lineage, Version: version}, atLeast: true}
	}
	if pc != "" && targets[pc].Version == 0 {
		return r, fmt.Errorf("no snapshot has been published for proxy cluster %q", pc)
	}
	sched, err := e.schedulerStatus(ctx)
	if err != nil {
		return r, err
	}
	if q.revision > 0 {
		r.waitForRevision(q.revision, sched, targets)
	}
	for name, t := range targets {
		r.Targets[name], r.TargetLineages[name] = t.Version, t.Lineage
	}
	now := time.Now()
	live := 0
	for _, st := range sts {
		r.Proxies = append(r.Proxies, classify(st, targets[st.ProxyCluster], now))
		live++
	}
	gone, err := e.goneProxies(ctx, pc, sts, now)
	if err != nil {
		return r, err
	}
	started := map[string]time.Time{} // when each target was published
	for _, st := range gone {
		tg := targets[st.ProxyCluster]
		if _, ok := started[st.ProxyCluster]; !ok && tg.Version != 0 {
			if m, err := e.manifest(ctx, st.ProxyCluster, tg.Version); err == nil {
				started[st.ProxyCluster] = m.Meta.CreatedAt
			}
		}
		p := proxyRollout{ProxyCluster: st.ProxyCluster, ID: st.ID, State: StateGone, Applied: st.AppliedVersion,
			Target: tg.Version, Lineage: st.AppliedLineage, Since: st.UpdatedAt,
			Reason: "status lease expired; last seen " + seenAt(st.UpdatedAt, now)}
		if t, ok := started[st.ProxyCluster]; ok && st.UpdatedAt.Before(t) {
			p.NotCounted = true
			p.Reason += ", before this rollout: not counted"
		}
		r.Proxies = append(r.Proxies, p)
	}
	r.NoLeader = sched == nil
	if sched != nil {
		for name, res := range sched.ProxyClusters {
			if pc != "" && name != pc {
				continue
			}
			if blocked, why := res.Blocked(); blocked {
				if r.Blocked == nil {
					r.Blocked = map[string]string{}
				}
				r.Blocked[name] = fmt.Sprintf("input revision %d not published: %s", res.InputRevision, why)
			}
		}
	}
	r.Converged = live > 0 && len(r.Blocked) == 0 && len(r.Waiting) == 0
	for _, p := range r.Proxies {
		if p.State != StateSynced && !p.NotCounted {
			r.Converged = false
		}
	}
	return r, nil
}

// target is what a proxy cluster's proxies should run: the pointer's
// lineage and version (atLeast: that version or a later one, --version).
type target struct {
	snapshot.Pointer
	atLeast bool
}

// classify decides one proxy's rollout state.
func classify(st report.ProxyStatus, tg target, now time.Time) proxyRollout {
	target := tg.Version
	p := proxyRollout{ProxyCluster: st.ProxyCluster, ID: st.ID, Applied: st.AppliedVersion, Target: target, Lineage: st.AppliedLineage}
	sameLineage := st.AppliedLineage == tg.Lineage
	switch {
	case staleReason(st, now) != "":
		p.State, p.Since, p.Reason = StateStale, st.UpdatedAt, staleReason(st, now)
	case target == 0:
		p.State = StatePending
	case !sameLineage:
		p.State = StatePending
		p.Reason = fmt.Sprintf("applied lineage %s, target lineage %s", snapshot.LineageName(st.AppliedLineage), snapshot.LineageName(tg.Lineage))
		if st.PointerLineage == tg.Lineage && st.RejectedVersion >= target {
			p.State, p.Reason = StateRejected, st.RejectedReason
		}
	case st.AppliedVersion == target || st.AppliedVersion > target && tg.atLeast:
		p.State = StateSynced
	case st.AppliedVersion > target:
		p.State = StateAhead
		p.Reason = fmt.Sprintf("ahead of the pointer: applied v%d of lineage %s, the pointer names v%d (moved back?); it keeps v%d until a later version is published",
			st.AppliedVersion, snapshot.LineageName(tg.Lineage), target, st.AppliedVersion)
	case st.RejectedVersion >= target:
		p.State, p.Reason = StateRejected, st.RejectedReason
	default:
		p.State = StatePending
	}
	return p
}

// verdict turns a report into the exit status.
func (r rolloutReport) verdict() error {
	if r.Converged {
		return nil
	}
	var lag []string
	for _, name := range slices.Sorted(maps.Keys(r.Blocked)) {
		lag = append(lag, fmt.Sprintf("%s BLOCKED (%s)", name, r.Blocked[name]))
	}
	for _, name := range slices.Sorted(maps.Keys(r.Waiting)) {
		lag = append(lag, fmt.Sprintf("%s WAITING (%s)", name, r.Waiting[name]))
	}
	for _, p := range r.Proxies {
		if p.State != StateSynced && !p.NotCounted {
			s := fmt.Sprintf("%s/%s %s", p.ProxyCluster, p.ID, p.State)
			if p.Reason != "" {
				s += " (" + p.Reason + ")"
			}
			lag = append(lag, s)
		}
	}
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
	if r.Converged {
		fmt.Fprintln(w, "converged: every live proxy runs its target version")
	}
	return nil
}

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
	for _, s := range []string{StateSynced, StatePending, StateRejected, StateAhead, StateStale, StateGone} {
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
	return fmt.Sprintf("rollout of %s: %s", strings.Join(tg, ", "), strings.Join(parts, ", "))
}

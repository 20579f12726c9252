//go:build chaos

// Package chaos is the process-level chaos suite: it breaks the compose
// fleet of deploy/compose on purpose (kill -9, docker pause, network
// disconnects, corrupt files) while a client sends traffic through every
// proxy, records every proxy's applied versions, every request's outcome
// and every backend's received requests under $SLUICE_CHAOS_OUT, and checks
// the invariants of docs/INVARIANTS.md after each scenario. Run it with
// `make chaos` (deploy/scripts/chaos.sh brings the fleet up and down).
package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// run is one scenario in progress.
type run struct {
	t      *testing.T
	env    *Env
	name   string
	dir    string
	start  time.Time
	load   *Load
	vers   *Versions
	lines  []string
	excuse map[string][2]time.Time // proxy -> window whose failures are expected

	healed   string        // what healed last ("" until heal is called)
	healTook time.Duration // from that heal to I4 convergence
}

// heal marks the moment the scenario's last fault healed (a member
// restarted, a container resumed, a network reconnected) and measures I4
// from it: the time until every proxy and its status key run the current
// version. Call it right after the healing action, before anything else.
func (r *run) heal(what string) {
	r.t.Helper()
	at := time.Now()
	r.env.waitConverged(r.t, 90*time.Second)
	r.healed, r.healTook = what, time.Since(at)
}

// figure prints and records one result line.
func (r *run) figure(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	r.lines = append(r.lines, line)
	fmt.Printf("    %-28s %s\n", r.name+":", line)
}

// hold lets the traffic run for d (a traffic phase, not a wait for state).
func (r *run) hold(d time.Duration) { time.Sleep(d) }

// excuseProxy marks failures of one proxy between from and to as expected
// (the proxy itself was killed, or started without a usable snapshot).
func (r *run) excuseProxy(id string, from, to time.Time) { r.excuse[id] = [2]time.Time{from, to} }

func (r *run) counted(o Outcome) bool {
	w, ok := r.excuse[o.Proxy]
	return !ok || o.Start.Before(w[0]) || !o.Start.Before(w[1])
}

// scenario runs body under client load and version recording, then checks
// the common invariants: no failed or reset request (outside excused
// windows), I1 monotonic applied versions, I4 convergence, D1 no blackholed
// request at a backend, and the fleet healthy again.
func scenario(t *testing.T, env *Env, name string, body func(r *run)) {
	t.Run(name, func(t *testing.T) {
		dir := filepath.Join(env.Out, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		fleetReady(t, env)
		base := map[string]Resources{}
		for _, p := range proxies {
			if res, err := env.resources(p); err == nil {
				base[p.ID] = res
			}
		}
		r := &run{t: t, env: env, name: name, dir: dir, start: time.Now(), excuse: map[string][2]time.Time{}}
		fmt.Printf("=== chaos %s\n", name)
		r.vers = recordVersions(env)
		r.load = startLoad(name, 2, 20)
		stopped := false
		stop := func() ([]Outcome, []VersionSample) {
			stopped = true
			outs, err := r.load.Stop(dir)
			if err != nil {
				t.Error(err)
			}
			samples, err := r.vers.Stop(dir)
			if err != nil {
				t.Error(err)
			}
			return outs, samples
		}
		defer func() {
			if !stopped {
				stop()
			}
		}()
		body(r)
		if t.Failed() {
			return
		}
		if r.healed == "" {
			t.Errorf("scenario %s never called heal: no I4 figure from the heal", name)
		}
		env.waitConverged(t, 90*time.Second)
		r.hold(2 * time.Second)
		outs, samples := stop()
		r.figure("I4: every proxy and its status key on the current version %.1fs after the last fault healed (%s)", r.healTook.Seconds(), r.healed)
		n, err := monotonic(samples)
		if err != nil {
			t.Error(err)
		}
		r.figure("I1: applied versions never went back (%d status samples of 4 proxies)", n)
		stats, err := backendStats(env, dir)
		if err != nil {
			t.Error(err)
		}
		bh, leaked := blackholeLeaks(outs, stats)
		r.figure("D1: %d of %d blackholed requests reached a backend (%d of 6 backends' logs checked)", leaked, bh, len(stats))
		if leaked != 0 {
			t.Errorf("D1: %d blackholed requests reached a backend", leaked)
		}
		r.checkResources(base)
		all := tally(outs, nil)
		c := tally(outs, r.counted)
		r.figure("traffic: %d requests, %d ok, %d blackholed, %d failed, %d reset (excused windows: %d failed of %d); latency p99 %.0f ms, max %.0f ms; client stalled at most %.1fs",
			c.Total, c.OK, c.Blackhole, c.Fail, c.Reset, all.Fail-c.Fail, all.Total-c.Total, c.P99, c.Max, r.load.MaxStall().Seconds())
		if c.Fail != 0 || c.Reset != 0 {
			t.Errorf("%d failed and %d reset requests, e.g. %s", c.Fail, c.Reset, strings.Join(c.FailSample, "; "))
		}
		if c.Total < 100 {
			t.Errorf("only %d requests counted: the load did not run", c.Total)
		}
		_ = os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(strings.Join(r.lines, "\n")+"\n"), 0o644)
		fmt.Printf("--- chaos %s: %s in %.0fs\n", name, map[bool]string{false: "PASS", true: "FAIL"}[t.Failed()], time.Since(r.start).Seconds())
	})
}

// D9 slack: goroutines and fds a proxy may hold above its baseline once
// the load stopped (idle keep-alive connections, a re-established watch).
const resourceSlack = 40

// checkResources checks D9: once the load stopped, every proxy that was not
// restarted is back within resourceSlack of its baseline goroutines and
// open files (polled: idle connections close on their own timers).
func (r *run) checkResources(base map[string]Resources) {
	var parts []string
	for _, p := range proxies {
		b, ok := base[p.ID]
		if _, restarted := r.excuse[p.ID]; !ok || restarted {
			continue
		}
		var now Resources
		err := func() error {
			deadline := time.Now().Add(20 * time.Second)
			for {
				var err error
				now, err = r.env.resources(p)
				if err == nil && now.Goroutines <= b.Goroutines+resourceSlack && now.FDs <= b.FDs+resourceSlack {
					return nil
				}
				if time.Now().After(deadline) {
					if err == nil {
						err = fmt.Errorf("goroutines %d→%d, fds %d→%d (slack %d)", b.Goroutines, now.Goroutines, b.FDs, now.FDs, resourceSlack)
					}
					return err
				}
				time.Sleep(500 * time.Millisecond) // poll interval
			}
		}()
		if err != nil {
			r.t.Errorf("D9: %s: %v", p.ID, err)
		}
		parts = append(parts, fmt.Sprintf("%s %d→%d/%d→%d", p.ID, b.Goroutines, now.Goroutines, b.FDs, now.FDs))
	}
	r.figure("D9: goroutines/fds before→after: %s", strings.Join(parts, ", "))
}

// fleetReady waits until every container is healthy and every proxy runs
// the current version.
func fleetReady(t *testing.T, env *Env) {
	t.Helper()
	var names []string
	names = append(names, etcdMembers...)
	names = append(names, schedulers...)
	for _, p := range proxies {
		names = append(names, p.Name)
	}
	for _, b := range backends {
		names = append(names, b.Name, b.Agent)
	}
	eventually(t, "fleet healthy", 120*time.Second, func() error { return healthy(names...) })
	env.waitConverged(t, 60*time.Second)
}

func ctx10() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

func TestChaos(t *testing.T) {
	env := newEnv(t)
	fl := flavour(t)
	ctx, cancel := ctx10()
	vers, err := env.checkFlavour(ctx, fl)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("=== chaos against %s etcd: server %s on %d members\n", fl, strings.Join(vers, ", "), len(vers))
	ctx, cancel = ctx10()
	err = env.setRow(ctx, 45, 45, 10, "chaos: baseline row")
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range scenarios {
		if fl == "debian" && !s.etcd {
			continue
		}
		scenario(t, env, s.name, s.body)
	}
}

//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"
)

func etcdLeaderKill(r *run) {
	ctx, cancel := ctx10()
	defer cancel()
	leader, err := r.env.etcdLeader(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	r.hold(3 * time.Second)
	r.kill9(leader)
	took := eventually(r.t, "new etcd leader", 30*time.Second, func() error {
		l, err := r.env.etcdLeader(context.Background())
		if err == nil && l == leader {
			return fmt.Errorf("old leader still reported")
		}
		return err
	})
	r.figure("etcd leader %s killed -9; new leader in %.1fs", leader, took.Seconds())
	v := r.publish(40, 50, 10)
	took = r.env.waitConverged(r.t, 60*time.Second)
	r.figure("v%d published and applied everywhere %.1fs later with 2 of 3 members", v, took.Seconds())
	r.startAll(leader)
	r.heal("etcd leader " + leader + " restarted")
	r.waitHealthy(60*time.Second, leader)
	r.publish(45, 45, 10)
}

func etcdQuorumLost(r *run) {
	ctx, cancel := ctx10()
	defer cancel()
	leader, err := r.env.etcdLeader(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	var down []string
	for _, m := range etcdMembers {
		if m != leader {
			down = append(down, m)
		}
	}
	r.hold(2 * time.Second)
	from := time.Now()
	n0 := r.load.Count()
	r.kill9(down...)
	eventually(r.t, "quorum lost", 20*time.Second, r.stuckEtcd)
	r.hold(30 * time.Second) // past the schedulers' and agents' 5s leases
	r.figure("I3: %d requests served while quorum was lost for %.0fs (%s down; failures counted below)", r.load.Count()-n0, time.Since(from).Seconds(), down)
	if n := r.load.Count() - n0; n < 100 {
		r.t.Errorf("I3: only %d requests while quorum was lost: the load did not run", n)
	}
	r.startAll(down...)
	r.heal(fmt.Sprint(down, " restarted"))
	r.waitHealthy(60*time.Second, etcdMembers...)
	v := r.publish(40, 50, 10)
	r.figure("quorum back; v%d published after recovery", v)
	r.publish(45, 45, 10)
}

func etcdAllDownProxyRestart(r *run) {
	p := proxies[1] // bfe1-p2
	before := r.statusOf(p)
	r.hold(2 * time.Second)
	from := time.Now()
	r.kill9(etcdMembers...)
	eventually(r.t, "etcd down", 20*time.Second, r.stuckEtcd)
	kill := time.Now()
	r.kill9(p.Name)
	r.startAll(p.Name)
	var st ProxyStatus
	took := eventually(r.t, p.ID+" serving again from its disk cache", 60*time.Second, func() error {
		c, cc := context.WithTimeout(context.Background(), 2*time.Second)
		defer cc()
		var err error
		st, err = r.env.proxyStatus(c, p)
		if err != nil {
			return err
		}
		if st.AppliedVersion == 0 {
			return fmt.Errorf("no snapshot applied yet")
		}
		return nil
	})
	r.excuseProxy(p.ID, kill, time.Now())
	if st.AppliedVersion != before.AppliedVersion {
		r.t.Errorf("I3: %s restarted during the outage applied v%d, want its last good v%d", p.ID, st.AppliedVersion, before.AppliedVersion)
	}
	r.figure("I3: %s restarted with all etcd members down serves v%d (source %q) after %.1fs", p.ID, st.AppliedVersion, st.Source, took.Seconds())
	n0 := r.load.Count()
	r.hold(10 * time.Second)
	r.figure("I3: %d requests during %.0fs with no etcd member", r.load.Count()-n0, time.Since(from).Seconds())
	if n := r.load.Count() - n0; n < 20 {
		r.t.Errorf("I3: only %d requests in 10s with no etcd member: the load did not run", n)
	}
	r.startAll(etcdMembers...)
	r.heal("every etcd member restarted")
	r.waitHealthy(90*time.Second, etcdMembers...)
	r.publish(40, 50, 10)
	r.publish(45, 45, 10)
}

// frozenFor is how long each follower stays frozen: past the proxies'
// watch stall timeout (SLUICE_WATCH_STALL_TIMEOUT 4s in the compose file)
// plus the 5s request that tells a stall from an idle watch (9s in all),
// and below the etcd client's keepalive (a ping after 10s without a read,
// then 2-5s to answer: closed 10.7s after the freeze at the earliest), which
// would otherwise move the watch to another member unseen.
const frozenFor = 11 * time.Second

// etcdMemberFrozen freezes every member in turn (docker pause: the
// connection stays open and nothing answers), the followers for frozenFor
// each, then the leader as long while a version is published. Each
// proxy's snapshot watch runs on one member (the leader too), and it
// leaves that member only by a counted restart, so every proxy must count
// at least one stall.
func etcdMemberFrozen(r *run) {
	ctx, cancel := ctx10()
	defer cancel()
	leader, err := r.env.etcdLeader(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	before := map[string]map[string]int{}
	for _, p := range proxies {
		if before[p.ID], err = r.env.watchRestarts(p); err != nil {
			r.t.Fatal(err)
		}
	}
	var paused string
	defer func() {
		if paused != "" {
			_, _ = docker("unpause", paused)
		}
	}()
	r.hold(2 * time.Second)
	for _, m := range etcdMembers {
		if m == leader {
			continue
		}
		mustDocker(r.t, "pause", m)
		paused = m
		r.hold(frozenFor)
		mustDocker(r.t, "unpause", m)
		paused = ""
		r.waitHealthy(60*time.Second, m)
	}
	mustDocker(r.t, "pause", leader)
	paused = leader
	pausedAt := time.Now()
	v := r.publish(40, 50, 10)
	took := r.env.waitConverged(r.t, 60*time.Second)
	r.figure("etcd leader %s frozen (docker pause): v%d published and applied everywhere %.1fs later", leader, v, took.Seconds())
	// The leader stays frozen frozenFor too: a proxy whose watch runs on it
	// must stall as those on the followers did (a freeze of the publish and
	// 5s, ~7s, ended before its stall was declared: CI, session 10).
	r.hold(max(5*time.Second, frozenFor-time.Since(pausedAt)))
	mustDocker(r.t, "unpause", leader)
	paused = ""
	r.heal("etcd leader " + leader + " resumed")
	var parts []string
	for _, p := range proxies {
		after, err := r.env.watchRestarts(p)
		if err != nil {
			r.t.Fatal(err)
		}
		d, text := restartDelta(before[p.ID], after)
		switch {
		case p.StallTimeout+5*time.Second > frozenFor:
			// bfe1-p1 (90s, for proxy-partition-compaction) moves off a
			// frozen member only by the keepalive: convergence is its check.
			text += " (stall timeout " + p.StallTimeout.String() + ": not required)"
		case d["stall"] < 1:
			r.t.Errorf("stall detection: %s counted no stall while each etcd member was frozen in turn (restarts: %s)", p.ID, text)
		}
		parts = append(parts, p.ID+": "+text)
	}
	r.figure("stall detection: followers frozen %.0fs each, then the leader; watch restarts per proxy (a stall required where the stall timeout is 4s): %s", frozenFor.Seconds(), strings.Join(parts, "; "))
	r.waitHealthy(60*time.Second, leader)
	r.publish(45, 45, 10)
}

// cutFor is how long proxy-partition-compaction keeps bfe1-p1 off the etcd
// network: past the etcd client's keepalive (a ping after 10s without a
// read, 2s to answer), so its connection is declared dead and redialled and
// the watch has to be re-established, and well below bfe1-p1's 90s stall
// timeout (at worst 60s after the cut: a progress request every 30s), so the
// watch outlives the cut and resumes from its last revision.
const cutFor = 25 * time.Second

// proxyPartitionCompaction cuts bfe1-p1 off the etcd network, publishes
// versions and compacts etcd past them while it is away. Its watch,
// resumed on reconnection from the last revision it heard, must be refused
// as compacted: the proxy lists again (watch_restarts{reason="compacted"}
// rises) and applies the newest version.
func proxyPartitionCompaction(r *run) {
	p := proxies[0] // bfe1-p1, the proxy with the long stall timeout
	if p.StallTimeout < 3*cutFor {
		r.t.Fatalf("%s's stall timeout %s is too short for a %s cut", p.ID, p.StallTimeout, cutFor)
	}
	before := r.statusOf(p)
	before0, err := r.env.watchRestarts(p)
	if err != nil {
		r.t.Fatal(err)
	}
	r.hold(2 * time.Second)
	mustDocker(r.t, "network", "disconnect", controlNet, p.Name)
	cutAt := time.Now()
	connected := false
	defer func() {
		if !connected {
			_, _ = docker("network", "connect", "--ip", p.ControlIP, controlNet, p.Name)
		}
	}()
	const versions = 5
	var last uint64
	for i := 0; i < versions; i++ {
		sc1 := 20 + i%40
		last = r.publish(sc1, 90-sc1, 10)
	}
	if rest := cutFor - time.Since(cutAt); rest > 0 {
		r.hold(rest)
	}
	st := r.statusOf(p)
	ctx, cancel := ctx10()
	defer cancel()
	if st.AppliedVersion != before.AppliedVersion {
		r.t.Errorf("%s cut off from etcd applied v%d (had v%d)", p.ID, st.AppliedVersion, before.AppliedVersion)
	}
	g, err := r.env.Etcd.Get(ctx, r.env.Layout.Desired())
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.env.Etcd.Compact(ctx, g.Header.Revision); err != nil {
		r.t.Fatalf("compact: %v", err)
	}
	mid, err := r.env.watchRestarts(p)
	if err != nil {
		r.t.Fatal(err)
	}
	if d, text := restartDelta(before0, mid); len(d) != 0 {
		r.t.Errorf("%s's watch restarted while it was cut off (%s): it should have outlived a %s cut with a %s stall timeout", p.ID, text, cutFor, p.StallTimeout)
	}
	r.figure("%s cut off from the etcd network for %.0fs while %d versions were published (up to v%d); etcd compacted at revision %d; it kept serving v%d, its watch still open",
		p.ID, time.Since(cutAt).Seconds(), versions, last, g.Header.Revision, st.AppliedVersion)
	mustDocker(r.t, "network", "connect", "--ip", p.ControlIP, controlNet, p.Name)
	connected = true
	r.heal(p.ID + " reconnected")
	after, err := r.env.watchRestarts(p)
	if err != nil {
		r.t.Fatal(err)
	}
	d, text := restartDelta(before0, after)
	if d["compacted"] < 1 {
		r.t.Errorf("%s converged without a compacted-revision resync (watch restarts: %s): the resumed watch was not refused as compacted", p.ID, text)
	}
	r.figure("resync: reconnected %s applied v%d %.1fs later through the compacted-revision error (watch restarts: %s)", p.ID, last, r.healTook.Seconds(), text)
	r.publish(45, 45, 10)
}

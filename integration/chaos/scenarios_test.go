//go:build chaos

package chaos

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// scenarios run in this order. Those marked etcd exercise etcd's own
// behaviour (members killed, frozen or all down, a client cut off while
// etcd compacts) and also run against Debian's etcd-server 3.4
// (SLUICE_ETCD_FLAVOUR=debian, see flavour); the others exercise Sluice's
// components and run against the embedded etcd only.
var scenarios = []struct {
	name string
	etcd bool
	body func(r *run)
}{
	{"etcd-leader-kill", true, etcdLeaderKill},
	// Run once, on the embedded etcd, to keep make chaos short (~12 min): on Debian's
	// etcd, leader-kill and all-down cover elections and restarts, and a
	// frozen member (docker pause) tests the clients' stall detection more
	// than the server.
	{"etcd-quorum-lost", false, etcdQuorumLost},
	{"etcd-all-down-proxy-restart", true, etcdAllDownProxyRestart},
	{"etcd-member-frozen", false, etcdMemberFrozen},
	{"proxy-partition-compaction", true, proxyPartitionCompaction},
	{"etcd-permission-revoked", true, etcdPermissionRevoked},
	{"etcd-nospace", true, etcdNoSpace},
	{"etcd-password-restart", true, etcdPasswordRestart},
	{"scheduler-leader-kill", false, schedulerLeaderKill},
	{"scheduler-leader-paused", false, schedulerLeaderPaused},
	{"proxy-kill", false, proxyKill},
	{"cache-corrupt-etcd-down", false, cacheCorruptEtcdDown},
	{"instance-kill", false, instanceKill},
	{"subcluster-stop", false, subclusterStop},
	{"agent-kill", false, agentKill},
	{"row-flap", false, rowFlap},
}

// publish changes BFE1's row and waits until the scheduler has published a
// new BFE1 version; it returns that version.
func (r *run) publish(sc1, sc2, bh int) uint64 {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var before uint64
	var pin map[string]int
	eventually(r.t, "read BFE1's current version and pin", 30*time.Second, func() error {
		c, cc := context.WithTimeout(ctx, 2*time.Second)
		defer cc()
		var err error
		if before, err = r.env.current(c, "BFE1"); err != nil {
			return err
		}
		pin, err = r.env.pinned(c)
		return err
	})
	// The pin's reason is in no snapshot: a row the pin already has changes
	// nothing the scheduler publishes, and no new version would come.
	if maps.Equal(pin, map[string]int{"SC1": sc1, "SC2": sc2, "GSLB_BLACKHOLE": bh}) {
		r.t.Fatalf("publish(%d, %d, %d): BFE1's pin already has these weights, so no new version is due; a scenario must publish a row that differs", sc1, sc2, bh)
	}
	if err := r.env.setRow(ctx, sc1, sc2, bh, "chaos "+r.name); err != nil {
		r.t.Fatal(err)
	}
	var v uint64
	eventually(r.t, "scheduler publishes the new row", 30*time.Second, func() error {
		c, cc := context.WithTimeout(context.Background(), 2*time.Second)
		defer cc()
		cur, err := r.env.current(c, "BFE1")
		if err != nil {
			return err
		}
		if cur <= before {
			return fmt.Errorf("BFE1 still at v%d", cur)
		}
		v = cur
		return nil
	})
	return v
}

// stuckEtcd checks that a write really fails (etcd without quorum).
func (r *run) stuckEtcd() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := r.env.Etcd.Put(ctx, r.env.Layout.Root()+"chaos-probe", "x")
	if err == nil {
		return fmt.Errorf("a write succeeded: etcd still has quorum")
	}
	return nil
}

func (r *run) kill9(names ...string) {
	for _, n := range names {
		mustDocker(r.t, "kill", "--signal", "KILL", n)
	}
}

func (r *run) startAll(names ...string) {
	for _, n := range names {
		mustDocker(r.t, "start", n)
	}
}

func (r *run) waitHealthy(limit time.Duration, names ...string) time.Duration {
	return eventually(r.t, fmt.Sprint(names, " healthy"), limit, func() error { return healthy(names...) })
}

func schedulerLeaderKill(r *run) {
	ctx, cancel := ctx10()
	defer cancel()
	leader, err := r.env.schedulerLeader(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	r.hold(2 * time.Second)
	r.kill9(leader)
	var next string
	took := eventually(r.t, "new scheduler leader", 30*time.Second, func() error {
		l, err := r.env.schedulerLeader(context.Background())
		if err != nil {
			return err
		}
		if l == leader {
			return fmt.Errorf("still %s", l)
		}
		next = l
		return nil
	})
	g, err := r.env.Etcd.Get(ctx, r.env.Layout.Leader())
	if err != nil {
		r.t.Fatal(err)
	}
	v := r.publish(40, 50, 10)
	authors, err := r.env.snapshotAuthors(ctx, "BFE1", g.Header.Revision)
	if err != nil {
		r.t.Fatal(err)
	}
	for ver, a := range authors {
		if "sluice-"+a != next {
			r.t.Errorf("I6: BFE1 v%d published by %q after %s took over", ver, a, next)
		}
	}
	r.figure("scheduler leader %s killed -9; %s led after %.1fs and published v%d (%d snapshots since, all by it)", leader, next, took.Seconds(), v, len(authors))
	r.startAll(leader)
	r.heal("scheduler " + leader + " restarted")
	r.waitHealthy(60*time.Second, leader)
	r.publish(45, 45, 10)
}

func schedulerLeaderPaused(r *run) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leader, err := r.env.schedulerLeader(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	r.hold(2 * time.Second)
	mustDocker(r.t, "pause", leader)
	pausedAt := time.Now()
	paused := true
	defer func() {
		if paused {
			_, _ = docker("unpause", leader)
		}
	}()
	g, err := r.env.Etcd.Get(ctx, r.env.Layout.Leader())
	if err != nil {
		r.t.Fatal(err)
	}
	rev0 := g.Header.Revision
	var next string
	eventually(r.t, "new scheduler leader", 30*time.Second, func() error {
		l, err := r.env.schedulerLeader(context.Background())
		if err != nil {
			return err
		}
		if l == leader {
			return fmt.Errorf("still %s", l)
		}
		next = l
		return nil
	})
	r.publish(40, 50, 10)
	// Keep it frozen well past its 5 s lease, change the desired state so
	// the ex-leader has something to publish the moment it wakes up.
	if rest := 12*time.Second - time.Since(pausedAt); rest > 0 {
		r.hold(rest)
	}
	if err := r.env.setRow(ctx, 35, 55, 10, "chaos: while the ex-leader is frozen"); err != nil {
		r.t.Fatal(err)
	}
	mustDocker(r.t, "unpause", leader)
	paused = false
	frozen := time.Since(pausedAt)
	r.heal("scheduler " + leader + " resumed")
	r.hold(8 * time.Second)
	r.publish(45, 45, 10)
	var n int
	for _, pc := range []string{"BFE1", "BFE2"} {
		authors, err := r.env.snapshotAuthors(ctx, pc, rev0)
		if err != nil {
			r.t.Fatal(err)
		}
		for ver, a := range authors {
			n++
			if "sluice-"+a != next {
				r.t.Errorf("I6: %s v%d published by %q, the leader is %s", pc, ver, a, next)
			}
		}
	}
	l, err := r.env.schedulerLeader(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	r.figure("I6: %s frozen %.0fs (lease 5s) then resumed: 0 of %d snapshots since were its own; leader is %s", leader, frozen.Seconds(), n, l)
}

func proxyKill(r *run) {
	p := proxies[2] // bfe2-p1
	before := r.statusOf(p)
	r.hold(3 * time.Second)
	from := time.Now()
	r.kill9(p.Name)
	r.hold(2 * time.Second)
	r.startAll(p.Name)
	r.heal(p.ID + " restarted")
	var st ProxyStatus
	took := eventually(r.t, p.ID+" serving again", 60*time.Second, func() error {
		c, cc := context.WithTimeout(context.Background(), 2*time.Second)
		defer cc()
		var err error
		st, err = r.env.proxyStatus(c, p)
		if err == nil && st.AppliedVersion == 0 {
			err = fmt.Errorf("no snapshot applied")
		}
		return err
	})
	r.excuseProxy(p.ID, from, time.Now())
	if st.AppliedVersion < before.AppliedVersion {
		r.t.Errorf("I1: %s came back with v%d after v%d", p.ID, st.AppliedVersion, before.AppliedVersion)
	}
	r.figure("%s killed -9 under load, back on v%d (source %q) %.1fs after restart; other proxies' failures counted below", p.ID, st.AppliedVersion, st.Source, took.Seconds())
	r.hold(3 * time.Second)
}

func cacheCorruptEtcdDown(r *run) {
	p := proxies[1] // bfe1-p2
	r.hold(2 * time.Second)
	r.kill9(etcdMembers...)
	eventually(r.t, "etcd down", 20*time.Second, r.stuckEtcd)
	from := time.Now()
	r.kill9(p.Name)
	flipped := r.corruptCache(p)
	r.startAll(p.Name)
	// The corrupt cache must not be applied: the proxy stays not ready.
	var notReady int
	eventually(r.t, p.ID+" up and refusing its corrupt cache", 30*time.Second, func() error {
		resp, err := http.Get(p.Admin + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			return fmt.Errorf("readyz %d, want 503", resp.StatusCode)
		}
		notReady++
		c, cc := context.WithTimeout(context.Background(), 2*time.Second)
		defer cc()
		st, err := r.env.proxyStatus(c, p)
		if err != nil {
			return err
		}
		if st.AppliedVersion != 0 {
			return fmt.Errorf("applied v%d from a corrupt cache", st.AppliedVersion)
		}
		return nil
	})
	corrupt, err := r.env.metricSeries(p, "sluice_proxy_snapshot_applies_total")
	if err != nil {
		r.t.Fatal(err)
	}
	if n := corrupt[`result="cache_corrupt"`]; n != 1 {
		r.t.Errorf("I5: %s counted %v cache_corrupt loads after a restart on a cache with a flipped byte, want 1", p.ID, n)
	}
	logs, _ := docker("logs", p.Name)
	if !strings.Contains(logs, "body sha256 is") {
		r.t.Errorf("I5: %s's log does not name the checksum mismatch (\"body sha256 is … header says …\")", p.ID)
	}
	r.hold(5 * time.Second)
	r.figure("I5: %s restarted with etcd down on its own cache file with a valid header and byte %d of the body flipped: checksum mismatch logged, cache_corrupt counted once, nothing applied (readyz 503); other proxies served on", p.ID, flipped)
	back := time.Now()
	r.startAll(etcdMembers...)
	r.heal("every etcd member restarted")
	r.waitHealthy(90*time.Second, etcdMembers...)
	eventually(r.t, p.ID+" ready from etcd", 60*time.Second, func() error { return healthy(p.Name) })
	took := time.Since(back)
	r.excuseProxy(p.ID, from, time.Now())
	r.figure("I4: %s applied the current snapshot from etcd and was healthy %.1fs after the members were started", p.ID, took.Seconds())
}

func instanceKill(r *run) {
	b := backends[0] // sc1-1
	r.hold(3 * time.Second)
	r.kill9(b.Name)
	r.hold(8 * time.Second)
	r.startAll(b.Name)
	r.heal(b.Name + " restarted")
	r.waitHealthy(60*time.Second, b.Name, b.Agent)
	var got int64
	eventually(r.t, b.Name+" receives traffic again", 60*time.Second, func() error {
		st, err := backendStats(r.env, r.dir)
		if err != nil {
			return err
		}
		got = st[b.Name].RequestsTotal
		if got == 0 {
			return fmt.Errorf("no request yet")
		}
		return nil
	})
	r.figure("%s killed -9 for 8s under load: retries hid it; back in rotation (%d requests since restart)", b.Name, got)
}

func subclusterStop(r *run) {
	var names []string
	for _, b := range backends {
		if b.SubCluster == "SC2" {
			names = append(names, b.Name)
		}
	}
	r.hold(3 * time.Second)
	from := time.Now()
	mustDocker(r.t, append([]string{"stop", "--time", "2"}, names...)...)
	r.hold(8 * time.Second)
	outs := r.load.snapshotSince(from)
	sc := tally(outs, nil)
	r.figure("all of SC2 stopped for 8s: %d requests, %d to SC1, %d to SC2, %d blackholed, %d failed", sc.Total, sc.BySub["SC1"], sc.BySub["SC2"], sc.Blackhole, sc.Fail)
	if sc.BySub["SC1"] == 0 || sc.Fail != 0 {
		r.t.Errorf("SC2 stopped: %d requests went to SC1 and %d failed; want SC1 to take them all without a failure", sc.BySub["SC1"], sc.Fail)
	}
	r.startAll(names...)
	r.heal("SC2 restarted")
	r.waitHealthy(60*time.Second, names...)
}

func agentKill(r *run) {
	b := backends[3] // sc2-1
	r.hold(2 * time.Second)
	r.kill9(b.Agent)
	host, _, _ := strings.Cut(b.Addr, ":")
	took := eventually(r.t, "every proxy's table drops "+b.Addr, 60*time.Second, func() error {
		for _, p := range proxies {
			body, err := r.env.admin(p, "/v1/table")
			if err != nil {
				return err
			}
			if strings.Contains(body, host) {
				return fmt.Errorf("%s still lists %s", p.ID, b.Addr)
			}
		}
		return nil
	})
	r.figure("agent of %s killed -9: instance left every proxy's table %.1fs later (lease 5s + scheduler grace 5s)", b.Addr, took.Seconds())
	// lease 5s + grace 5s + a publish: well within 30s unless expiry stalls.
	if took > 30*time.Second {
		r.t.Errorf("agent of %s killed: its instance left the tables only after %.1fs (lease 5s + grace 5s)", b.Addr, took.Seconds())
	}
	r.env.waitConverged(r.t, 60*time.Second)
	r.hold(time.Second) // requests in flight at the swap finish
	st0, err := backendStats(r.env, r.dir)
	if err != nil {
		r.t.Fatal(err)
	}
	r.hold(5 * time.Second)
	st1, err := backendStats(r.env, r.dir)
	if err != nil {
		r.t.Fatal(err)
	}
	delta := st1[b.Name].RequestsTotal - st0[b.Name].RequestsTotal
	if delta != 0 {
		r.t.Errorf("D8: %s got %d requests in 5s after it was deregistered", b.Name, delta)
	}
	r.figure("agent of %s killed -9 (backend up): deregistered, drained to %d requests in 5s, no failure", b.Addr, delta)
	r.startAll(b.Agent)
	r.heal("agent " + b.Agent + " restarted")
	r.waitHealthy(60*time.Second, b.Agent)
	eventually(r.t, b.Name+" back in rotation", 60*time.Second, func() error {
		st, err := backendStats(r.env, r.dir)
		if err != nil {
			return err
		}
		if st[b.Name].RequestsTotal == st1[b.Name].RequestsTotal {
			return fmt.Errorf("no request yet")
		}
		return nil
	})
}

func rowFlap(r *run) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	v0, err := r.env.current(ctx, "BFE1")
	if err != nil {
		r.t.Fatal(err)
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	end := time.Now().Add(60 * time.Second)
	writes := 0
	for i := 0; time.Now().Before(end); i++ {
		// SC1 takes every value of 31..69 in turn (7 and 39 are coprime),
		// never the final row's 30: a flap that ended on the final row
		// would leave its write nothing to publish (1 run in 50 did, when
		// the flap's SC1 ran over 20..69).
		sc1 := 31 + (i*7)%39
		if err := r.env.setRow(ctx, sc1, 90-sc1, 10, "chaos: row flap"); err != nil {
			r.t.Fatalf("set row: %v", err)
		}
		writes++
		<-tick.C
	}
	r.heal("row flapping stopped")
	v := r.publish(30, 60, 10)
	took := r.env.waitConverged(r.t, 60*time.Second)
	// Measure the final shares over at least 1000 BFE1 requests (±6
	// points is then over 4 standard deviations for every share).
	from := time.Now()
	var sc Tally
	eventually(r.t, "1000 BFE1 requests on the final row", 90*time.Second, func() error {
		sc = tally(r.load.snapshotSince(from), onCluster("BFE1"))
		if sc.Total < 1000 {
			return fmt.Errorf("%d so far", sc.Total)
		}
		return nil
	})
	r.figure("BFE1's row rewritten %d times in 60s (one CAS write per 100ms tick; a slow write skips ticks): v%d..v%d published; final row applied everywhere %.1fs later", writes, v0, v, took.Seconds())
	share := func(n int) float64 { return 100 * float64(n) / float64(sc.Total) }
	r.figure("D2: final shares over %d BFE1 requests: SC1 %.1f%% (want 30), SC2 %.1f%% (want 60), blackhole %.1f%% (want 10); tolerance ±6 points",
		sc.Total, share(sc.BySub["SC1"]), share(sc.BySub["SC2"]), share(sc.Blackhole))
	for name, got := range map[string]float64{"SC1": share(sc.BySub["SC1"]), "SC2": share(sc.BySub["SC2"]), "blackhole": share(sc.Blackhole)} {
		want := map[string]float64{"SC1": 30, "SC2": 60, "blackhole": 10}[name]
		if got < want-6 || got > want+6 {
			r.t.Errorf("D2: %s share %.1f%%, want %.0f%% ± 6", name, got, want)
		}
	}
	r.publish(45, 45, 10)
}

// statusOf reads p's status from its admin API, failing the scenario on error.
func (r *run) statusOf(p Proxy) ProxyStatus {
	r.t.Helper()
	ctx, cancel := ctx10()
	defer cancel()
	st, err := r.env.proxyStatus(ctx, p)
	if err != nil {
		r.t.Fatal(err)
	}
	return st
}

// corruptCache replaces p's disk cache (p is stopped) by the same file with
// one byte of the body flipped: the header (magic, length, SHA-256,
// version) stays valid, so only the checksum can reject it. It returns the
// flipped byte's offset in the body.
func (r *run) corruptCache(p Proxy) int {
	r.t.Helper()
	path := "/var/cache/sluice/" + p.ProxyCluster + ".snapshot"
	local := filepath.Join(r.dir, p.ProxyCluster+".snapshot")
	mustDocker(r.t, "cp", p.Name+":"+path, local)
	raw, err := os.ReadFile(local)
	if err != nil {
		r.t.Fatal(err)
	}
	nl := bytes.IndexByte(raw, '\n')
	if nl < 0 {
		r.t.Fatalf("%s's cache file has no header line (%d bytes)", p.ID, len(raw))
	}
	var sum string
	var n int
	var v uint64
	if _, err := fmt.Sscanf(string(raw[:nl]), "sluice-snapshot-cache/v1 len=%d sha256=%s version=%d", &n, &sum, &v); err != nil || n != len(raw)-nl-1 {
		r.t.Fatalf("%s's cache file header %q does not describe its %d-byte body (%v)", p.ID, raw[:nl], len(raw)-nl-1, err)
	}
	off := n / 2
	raw[nl+1+off] ^= 0x01
	// docker cp keeps the mode and makes root the owner: the proxy (uid
	// 65534) must still be able to read it, or Load fails on permissions
	// before the checksum is ever computed.
	if err := os.WriteFile(local, raw, 0o644); err != nil {
		r.t.Fatal(err)
	}
	if err := os.Chmod(local, 0o644); err != nil {
		r.t.Fatal(err)
	}
	mustDocker(r.t, "cp", local, p.Name+":"+path)
	return off
}

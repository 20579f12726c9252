//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdErrors reads p's sluice_etcd_errors_total for one class.
func (r *run) etcdErrors(p Proxy, class string) float64 {
	r.t.Helper()
	s, err := r.env.metricSeries(p, "sluice_etcd_errors_total")
	if err != nil {
		r.t.Fatal(err)
	}
	return s[`class="`+class+`"`]
}

// etcdPermissionRevoked takes bfe1-p2's read role (proxy-BFE1: its cluster's
// pointer, snapshots and the lineage) away while it runs and publishes a
// version: the proxy keeps serving its last good snapshot and says why
// (sluice_etcd_errors_total{class="permission"}, last_error_class in
// /v1/status, "permission denied" in its log); granted the role again, it
// applies the current version by itself.
func etcdPermissionRevoked(r *run) {
	const user, role = "bfe1-p2", "proxy-BFE1"
	p := proxies[1] // bfe1-p2
	before := r.statusOf(p)
	n0 := r.etcdErrors(p, "permission")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r.hold(2 * time.Second)
	if _, err := r.env.Etcd.UserRevokeRole(ctx, user, role); err != nil {
		r.t.Fatalf("revoke %s from %s: %v", role, user, err)
	}
	granted := false
	defer func() {
		if !granted {
			_, _ = r.env.Etcd.UserGrantRole(context.Background(), user, role)
		}
	}()
	revokedAt := time.Now()
	var st ProxyStatus
	took := eventually(r.t, p.ID+" says its read was refused", 30*time.Second, func() error {
		if n := r.etcdErrors(p, "permission"); n <= n0 {
			return fmt.Errorf("sluice_etcd_errors_total{class=\"permission\"} still %v", n)
		}
		c, cc := context.WithTimeout(context.Background(), 2*time.Second)
		defer cc()
		var err error
		if st, err = r.env.proxyStatus(c, p); err != nil {
			return err
		}
		if st.Etcd == nil || st.Etcd.LastErrorClass != "permission" || !strings.Contains(st.Etcd.LastError, "permission denied") {
			return fmt.Errorf("/v1/status etcd = %+v, want last_error_class permission naming \"permission denied\"", st.Etcd)
		}
		return nil
	})
	// etcd checks a watch's permission only when the watch is made: an open
	// one goes on delivering after the revoke until the proxy's store check
	// (every 3 s) is refused and makes the watch again, which etcd refuses.
	eventually(r.t, p.ID+" makes its watch again after a refused read", 30*time.Second, func() error {
		logs, _ := docker("logs", "--since", revokedAt.UTC().Format(time.RFC3339), p.Name)
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, "watch resync") && strings.Contains(l, "permission denied") {
				return nil
			}
		}
		return fmt.Errorf("no \"watch resync … permission denied\" line yet")
	})
	v := r.publish(40, 50, 10)
	other := proxies[0]
	eventually(r.t, other.ID+" applies v"+fmt.Sprint(v), 30*time.Second, func() error {
		c, cc := context.WithTimeout(context.Background(), 2*time.Second)
		defer cc()
		o, err := r.env.proxyStatus(c, other)
		if err == nil && o.AppliedVersion < v {
			err = fmt.Errorf("at v%d", o.AppliedVersion)
		}
		return err
	})
	r.hold(3 * time.Second)
	if now := r.statusOf(p); now.AppliedVersion != before.AppliedVersion {
		r.t.Errorf("%s without read permission applied v%d; want its last good v%d", p.ID, now.AppliedVersion, before.AppliedVersion)
	}
	logs, _ := docker("logs", "--since", revokedAt.UTC().Format(time.RFC3339), p.Name)
	if !strings.Contains(logs, "permission denied") {
		r.t.Errorf("%s's log since the revoke does not say \"permission denied\"", p.ID)
	}
	r.figure("role %s revoked from %s, v%d published once its watch was refused: %s kept serving v%d and said why %.1fs after the revoke: %q", role, user, v, p.ID, before.AppliedVersion, took.Seconds(), st.Etcd.LastError)
	if _, err := r.env.Etcd.UserGrantRole(ctx, user, role); err != nil {
		r.t.Fatalf("grant %s to %s: %v", role, user, err)
	}
	granted = true
	r.heal("role " + role + " granted to " + user + " again")
	r.figure("recovery: %s applied v%d by itself %.1fs after the role was granted again", p.ID, v, r.healTook.Seconds())
	r.publish(45, 45, 10)
}

// noSpace reports whether err is etcd's NOSPACE refusal.
func noSpace(err error) bool {
	return err != nil && strings.Contains(err.Error(), "database space exceeded")
}

// etcdNoSpace raises etcd's NOSPACE alarm (what a member does when its
// backend reaches --quota-backend-bytes; raised here through the Alarm
// API, so no quota has to be filled) and checks that writes are refused,
// nothing new is published, every proxy counts the refused writes
// (sluice_etcd_errors_total{class="nospace"}, last_error_class in
// /v1/status) and keeps serving; then the
// operator's recovery (compact, defragment every member, disarm) brings
// publishing back.
func etcdNoSpace(r *run) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	before := map[string]float64{}
	for _, p := range proxies {
		before[p.ID] = r.etcdErrors(p, "nospace")
	}
	st, err := r.env.Etcd.Status(ctx, etcdEndpoints[0])
	if err != nil {
		r.t.Fatal(err)
	}
	member := st.Header.MemberId
	r.hold(2 * time.Second)
	if _, err := pb.NewMaintenanceClient(r.env.Etcd.ActiveConnection()).Alarm(ctx,
		&pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: member, Alarm: pb.AlarmType_NOSPACE}); err != nil {
		r.t.Fatalf("raise the NOSPACE alarm: %v", err)
	}
	armed := true
	disarm := func() error {
		_, err := r.env.Etcd.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: member, Alarm: pb.AlarmType_NOSPACE})
		return err
	}
	defer func() {
		if armed {
			_ = disarm()
		}
	}()
	from := time.Now()
	eventually(r.t, "writes refused with NOSPACE", 20*time.Second, func() error {
		c, cc := context.WithTimeout(ctx, 2*time.Second)
		defer cc()
		_, err := r.env.Etcd.Put(c, r.env.Layout.Root()+"chaos-probe", "x")
		if !noSpace(err) {
			return fmt.Errorf("write: %v", err)
		}
		return nil
	})
	// Read once writes are refused: nothing can be published from here on.
	v0, err := r.env.current(ctx, "BFE1")
	if err != nil {
		r.t.Fatal(err)
	}
	c, cc := context.WithTimeout(ctx, 5*time.Second)
	err = r.env.setRow(c, 40, 50, 10, "chaos: during NOSPACE")
	cc()
	if !noSpace(err) {
		r.t.Errorf("NOSPACE: changing the desired state gave %v, want etcd's \"database space exceeded\"", err)
	}
	var parts []string
	var said string
	took := eventually(r.t, "every proxy counts a refused write", 30*time.Second, func() error {
		parts = parts[:0]
		for _, p := range proxies {
			n := r.etcdErrors(p, "nospace")
			if n <= before[p.ID] {
				return fmt.Errorf("%s: sluice_etcd_errors_total{class=\"nospace\"} still %v", p.ID, n)
			}
			c, cc := context.WithTimeout(ctx, 2*time.Second)
			st, err := r.env.proxyStatus(c, p)
			cc()
			if err != nil {
				return err
			}
			if st.Etcd == nil || st.Etcd.LastErrorClass != "nospace" {
				return fmt.Errorf("%s: /v1/status etcd = %+v, want last_error_class nospace", p.ID, st.Etcd)
			}
			said = st.Etcd.LastError
			parts = append(parts, fmt.Sprintf("%s +%.0f", p.ID, n-before[p.ID]))
		}
		return nil
	})
	n0 := r.load.Count()
	r.hold(5 * time.Second)
	if v, err := r.env.current(ctx, "BFE1"); err != nil || v != v0 {
		r.t.Errorf("NOSPACE: BFE1's current version is v%d (%v), want v%d unchanged", v, err, v0)
	}
	r.figure("NOSPACE alarm raised: writes refused, nothing published (BFE1 stays v%d); every proxy counted refused writes within %.1fs (%s), says %q in /v1/status, and %d requests were served in the next 5s",
		v0, took.Seconds(), strings.Join(parts, ", "), said, r.load.Count()-n0)
	g, err := r.env.Etcd.Get(ctx, r.env.Layout.Desired())
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.env.Etcd.Compact(ctx, g.Header.Revision); err != nil {
		r.t.Fatalf("compact: %v", err)
	}
	for _, ep := range etcdEndpoints {
		c, cc := context.WithTimeout(ctx, 30*time.Second)
		_, err := r.env.Etcd.Defragment(c, ep)
		cc()
		if err != nil {
			r.t.Fatalf("defragment %s: %v", ep, err)
		}
	}
	if err := disarm(); err != nil {
		r.t.Fatalf("disarm NOSPACE: %v", err)
	}
	armed = false
	outage := time.Since(from)
	back := time.Now()
	r.heal("NOSPACE alarm disarmed after compaction and defragmentation")
	v := r.publish(40, 50, 10)
	r.figure("recovery: compacted at revision %d, 3 members defragmented, alarm disarmed after %.0fs; v%d published %.1fs after the disarm", g.Header.Revision, outage.Seconds(), v, time.Since(back).Seconds())
	r.env.waitConverged(r.t, 60*time.Second)
	r.publish(45, 45, 10)
}

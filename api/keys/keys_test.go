package keys

import (
	"net/netip"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	l := MustNew("/sluice")
	k, err := l.Instance("demo-main", "SC1", netip.MustParseAddrPort("[::1]:8101"))
	if err != nil || k != "/sluice/instances/demo-main/SC1/[::1]:8101" {
		t.Fatalf("Instance = %q, %v", k, err)
	}
	ik, err := l.ParseInstance(k)
	if err != nil || ik.Cluster != "demo-main" || ik.SubCluster != "SC1" || ik.Addr.String() != "[::1]:8101" {
		t.Fatalf("ParseInstance = %+v, %v", ik, err)
	}
	sk, err := l.Snapshot("BFE1", 7)
	if err != nil || sk != "/sluice/snapshots/BFE1/00000000000000000007" {
		t.Fatalf("Snapshot = %q, %v", sk, err)
	}
	if k := l.Lineage(); k != "/sluice/lineage" {
		t.Fatalf("Lineage = %q", k)
	}
	ls, err := l.LastSeen("BFE1", "p1")
	if err != nil || ls != "/sluice/last-seen/BFE1/p1" {
		t.Fatalf("LastSeen = %q, %v", ls, err)
	}
	if pk, err := l.ParseLastSeen(ls); err != nil || pk != (ProxyKey{"BFE1", "p1"}) {
		t.Fatalf("ParseLastSeen = %+v, %v", pk, err)
	}
	if p, _ := l.LastSeenPrefix("BFE1"); p != "/sluice/last-seen/BFE1/" {
		t.Fatalf("LastSeenPrefix = %q", p)
	}
	if v, err := l.ParseSnapshot(sk); err != nil || v.Version != 7 || v.ProxyCluster != "BFE1" {
		t.Fatalf("ParseSnapshot = %+v, %v", v, err)
	}
}

func TestRejects(t *testing.T) {
	l := MustNew("")
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"root prefix", func() error { _, err := New("/"); return err }(), `prefix "/" has no name after "/"; want e.g. /sluice`},
		{"relative prefix", func() error { _, err := New("sluice"); return err }(), `prefix "sluice" must start with "/"`},
		{"dotdot prefix", func() error { _, err := New("/a/../b"); return err }(), `prefix "/a/../b": name ".." has '.' at 0`},
		{"non-canonical port", func() error { _, err := l.ParseInstance("/sluice/instances/c/s/127.0.0.1:08101"); return err }(),
			`key "/sluice/instances/c/s/127.0.0.1:08101": "127.0.0.1:08101" is not in canonical form 127.0.0.1:8101`},
		{"hostile name", func() error { _, err := l.Current("../etc"); return err }(), `current key: name "../etc" has '.' at 0`},
		{"short version", func() error { _, err := l.ParseSnapshot("/sluice/snapshots/BFE1/7"); return err }(),
			`key "/sluice/snapshots/BFE1/7": version "7" is not 20 decimal digits`},
		{"extra segment", func() error { _, err := l.ParseCurrent("/sluice/current/BFE1/x"); return err }(),
			`key "/sluice/current/BFE1/x": want 1 segments after /sluice/current/, have 2`},
	}
	for _, tt := range tests {
		if tt.err == nil || !strings.HasPrefix(tt.err.Error(), tt.want) {
			t.Errorf("%s: error %v, want prefix %q", tt.name, tt.err, tt.want)
		}
	}
}

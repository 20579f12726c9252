package balance

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

// A first pick from a live tree whose members are all unavailable (every
// one drained) picks none and counts nothing in flight: the root's best is
// -1 and treePick returns it before any tie-break. The selection never
// asks a group with nothing available, so the picker is called directly.
func TestLoadTreeFirstPickNoneAvailable(t *testing.T) {
	treesForAll(t)
	for _, mode := range []string{config.InstanceWLC, config.InstanceWLCRandom, config.InstanceLeastConn} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, snap(1, leastLoadPolicy(mode), 0, sc{name: "A", weight: 100, weights: []int{1, 2, 1}}))
			for i := range 3 {
				if err := e.reg.SetOverride(inst(1, i), Override{Drain: true}); err != nil {
					t.Fatal(err)
				}
			}
			c := e.cluster()
			g := c.subs[0]
			if g.load == nil || !g.load.live.Load() {
				t.Fatal("no live load tree")
			}
			v := g.currentView()
			if v.nAvail != 0 {
				t.Fatalf("%d members available, want 0 (all drained)", v.nAvail)
			}
			s := c.NewSelection(nil, netip.AddrFrom4([4]byte{192, 0, 2, 1}))
			defer s.Release()
			if i := c.picker.pick(s, g, v); i != -1 {
				t.Fatalf("pick = %d, want -1: no member is available", i)
			}
			if s.acquired != nil {
				t.Fatal("the pick counted a member in flight")
			}
			for i := range g.members {
				if n := g.members[i].ep.InFlight(); n != 0 || g.load.m[i].n != 0 {
					t.Fatalf("member %d: in flight %d, tree %d; want 0", i, n, g.load.m[i].n)
				}
			}
			if root := g.load.node[1]; root.best != -1 || root.ties != 0 {
				t.Fatalf("root %+v, want the empty node (best -1, no ties)", root)
			}
		})
	}
}

// A retry in a two-member sub-cluster whose members have both been tried
// finds no untried member in the tree (leastOK: -1) and gets none: the
// third attempt fails rather than repeat an instance, and nothing more is
// counted in flight.
func TestLoadTreeRetryAllTried(t *testing.T) {
	treesForAll(t)
	for _, mode := range []string{config.InstanceWLC, config.InstanceWLCRandom, config.InstanceLeastConn} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, snap(1, leastLoadPolicy(mode), 0, sc{name: "A", weight: 100, weights: []int{1, 1}}))
			c := e.cluster()
			g := c.subs[0]
			if g.load == nil || !g.load.live.Load() {
				t.Fatal("no live load tree")
			}
			s := c.NewSelection(nil, netip.AddrFrom4([4]byte{192, 0, 2, 1}))
			defer s.Release()
			p1, err := s.Next()
			if err != nil {
				t.Fatal(err)
			}
			p1.Done(Result{Status: 502})
			p2, err := s.Next()
			if err != nil {
				t.Fatal(err)
			}
			p2.Done(Result{Status: 502})
			if p1.Endpoint().Addr() == p2.Endpoint().Addr() {
				t.Fatalf("the retry repeated %s", p1.Endpoint().Addr())
			}
			// Both members tried, nothing in flight: the tree's pick is -1.
			if i := c.picker.pick(s, g, g.currentView()); i != -1 {
				t.Fatalf("retry pick = %d, want -1: both members were tried", i)
			}
			p3, err := s.Next()
			if err == nil {
				p3.Done(Result{Status: 200})
				t.Fatalf("third attempt picked %s, want an error: both instances tried", addrOf(p3))
			}
			if !errors.Is(err, ErrNoAvailable) {
				t.Fatalf("third attempt: %v, want %v", err, ErrNoAvailable)
			}
			for i := range g.members {
				if n := g.members[i].ep.InFlight(); n != 0 || g.load.m[i].n != 0 {
					t.Fatalf("member %d: in flight %d, tree %d; want 0", i, n, g.load.m[i].n)
				}
			}
		})
	}
}

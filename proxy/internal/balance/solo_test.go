package balance

import (
	"net/netip"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

// soloPick is one first pick from c, its answer left to the caller.
func soloPick(t *testing.T, c *Cluster) Pick {
	t.Helper()
	s := c.NewSelection(nil, netip.Addr{})
	p, err := s.Next()
	s.Release()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// soloOf is the tree every in-flight cell of e names as the address's only
// one; it fails the test if the cells disagree.
func soloOf(t *testing.T, e *Endpoint) *loadTree {
	t.Helper()
	solo := e.load[0].solo.Load()
	for i := range e.load {
		if got := e.load[i].solo.Load(); got != solo {
			t.Fatalf("%s: cell %d names tree %p, cell 0 %p", e.Addr(), i, got, solo)
		}
	}
	return solo
}

// Every cell of an address names its one load tree when exactly one tracks
// it (loadTree.acquire then skips the endpoint's trees), none when two do
// or none does, and a new table re-points them.
func TestCellsNameTheOnlyLoadTree(t *testing.T) {
	treesForAll(t)
	e := newEnv(t, snap(1, leastLoadPolicy(config.InstanceWLC), 0, sc{name: "A", weight: 100, weights: []int{1, 2, 3}}))
	g := e.cluster().subs[0]
	for i, m := range g.members {
		if got := soloOf(t, m.ep); got != g.load || got == nil {
			t.Fatalf("%s: cells name tree %p; want the one tracking it, %p", m.ep.Addr(), got, g.load)
		}
		for c := range m.ep.load {
			if at := m.ep.load[c].soloAt.Load(); at != int32(i) {
				t.Fatalf("%s: cell %d places it at %d in its tree, want %d", m.ep.Addr(), c, at, i)
			}
		}
	}
	e.apply(sharedTrees(config.InstanceWLC, config.InstanceLeastConn, []int{1, 2, 3}))
	for _, m := range e.cluster().subs[0].members {
		if got := soloOf(t, m.ep); got != nil {
			t.Fatalf("%s tracked by two trees: cells name %p, want none", m.ep.Addr(), got)
		}
	}
	e.apply(snap(1, leastLoadPolicy(config.InstanceLeastConn), 0, sc{name: "A", weight: 100, weights: []int{1, 2, 3}}))
	g = e.cluster().subs[0]
	for _, m := range g.members {
		if got := soloOf(t, m.ep); got != g.load || got == nil {
			t.Fatalf("%s: cells name tree %p; want the new table's, %p", m.ep.Addr(), got, g.load)
		}
	}
	e.apply(snap(1, leastLoadPolicy(config.InstanceRoundRobin), 0, sc{name: "A", weight: 100, weights: []int{1, 2, 3}}))
	for _, m := range e.cluster().subs[0].members {
		if got := soloOf(t, m.ep); got != nil {
			t.Fatalf("%s tracked by no tree: cells name %p, want none", m.ep.Addr(), got)
		}
	}
}

// An address two trees track is counted in both whichever of them picks it:
// a pick held through either cluster steers the other's next picks.
func TestLoadTreeAcquireReachesSharedTreesEitherWay(t *testing.T) {
	treesForAll(t)
	for _, pickFrom := range []string{"demo", "other"} {
		t.Run(pickFrom, func(t *testing.T) {
			e := newEnv(t, sharedTrees(config.InstanceLeastConn, config.InstanceLeastConn, []int{1, 1, 1}))
			picker, watcher := e.h.Load().Cluster(pickFrom), e.h.Load().Cluster("other")
			if pickFrom == "other" {
				watcher = e.cluster()
			}
			for _, c := range []*Cluster{picker, watcher} { // sync both trees
				soloPick(t, c).Done(Result{Status: 200})
			}
			held := []Pick{soloPick(t, picker), soloPick(t, picker)}
			if held[0].Endpoint() == held[1].Endpoint() {
				t.Fatalf("%s picked %s twice: want two different instances", pickFrom, addrOf(held[0]))
			}
			for range 6 {
				p := soloPick(t, watcher)
				if p.Endpoint() == held[0].Endpoint() || p.Endpoint() == held[1].Endpoint() {
					t.Fatalf("%s's pick %s is one held through %s: want the idle one", watcher.name, addrOf(p), pickFrom)
				}
				p.Done(Result{Status: 200})
			}
			for _, p := range held {
				p.Done(Result{Status: 200})
			}
		})
	}
}

// An acquire through a tree that stopped serving (a pick that found it live
// just before a table swap) counts the address in the trees now tracking
// it, not in its own.
func TestRetiredTreeAcquireReachesTheNewTree(t *testing.T) {
	treesForAll(t)
	s1 := snap(1, leastLoadPolicy(config.InstanceLeastConn), 0, sc{name: "A", weight: 100, weights: []int{1, 1, 1}})
	e := newEnv(t, s1)
	pickDone := func() { soloPick(t, e.cluster()).Done(Result{Status: 200}) }
	pickDone() // syncs the first table's tree
	old := e.cluster().subs[0].load
	e.apply(snap(2, leastLoadPolicy(config.InstanceLeastConn), 0, sc{name: "A", weight: 100, weights: []int{1, 1, 1}}))
	pickDone() // syncs the new one
	if old.live.Load() || e.cluster().subs[0].load == old {
		t.Fatal("the first table's tree still serves")
	}
	var sel Selection
	old.mu.Lock()
	old.acquire(&sel, 0)
	busy := old.m[0].ep
	var held []Pick
	for range 2 {
		p := soloPick(t, e.cluster())
		if p.Endpoint() == busy {
			t.Fatalf("new table picked %s, counted in flight through the retired tree", busy.Addr())
		}
		held = append(held, p)
	}
	for _, p := range held {
		p.Done(Result{Status: 200})
	}
	busy.load[sel.stripe&(inflightCells-1)].n.Add(-1)
	busy.noteLoad(sel.stripe)
}

// A release whose cell names the tree but a wrong place in it (a track
// running alongside: the tree and the index are two words) still reaches
// the address's own leaf.
func TestReleaseWithStaleSoloIndexReachesTheTree(t *testing.T) {
	treesForAll(t)
	e := newEnv(t, snap(1, leastLoadPolicy(config.InstanceLeastConn), 0, sc{name: "A", weight: 100, weights: []int{1, 1, 1}}))
	p := soloPick(t, e.cluster())
	g := e.cluster().subs[0]
	tr, ep := g.load, p.Endpoint()
	i := 0
	for g.members[i].ep != ep {
		i++
	}
	for c := range ep.load {
		ep.load[c].soloAt.Store(int32((i + 1) % len(g.members)))
	}
	p.Done(Result{Status: 200})
	tr.mu.Lock()
	n := tr.m[i].n
	tr.mu.Unlock()
	if n != 0 {
		t.Fatalf("tree holds %d in flight for %s after its one pick was answered, want 0", n, ep.Addr())
	}
}

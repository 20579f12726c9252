package balance

import (
	"net/netip"
	"sync"
	"testing"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
)

// sharedTrees is a snapshot of two clusters over the same addresses, both
// least-loaded (demo: mode, other: otherMode), so every address is tracked
// by two trees.
func sharedTrees(mode, otherMode string, weights []int) *snapshot.Snapshot {
	s := snap(1, leastLoadPolicy(mode), 0, sc{name: "A", weight: 100, weights: weights})
	other := s.Clusters["demo"]
	other.Policy = leastLoadPolicy(otherMode)
	s.Clusters["other"] = other
	return s
}

// A least-loaded pick counts its instance in flight under the tree's lock
// (loadTree.acquire); the other trees tracking the address must see it too:
// requests held through one least-loaded cluster steer another's picks.
func TestLoadTreeAcquireReachesSharedTrees(t *testing.T) {
	treesForAll(t)
	for _, mode := range []string{config.InstanceWLC, config.InstanceLeastConn, config.InstanceWLCRandom} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, sharedTrees(mode, mode, []int{1, 1, 1}))
			oc := e.h.Load().Cluster("other")
			// A first pick in each syncs both trees: what follows reaches
			// them only through the endpoints' updates.
			for _, c := range []*Cluster{e.cluster(), oc} {
				s := c.NewSelection(nil, netip.Addr{})
				p, err := s.Next()
				s.Release()
				if err != nil {
					t.Fatal(err)
				}
				p.Done(Result{Status: 200})
			}
			var held []Pick
			for range 2 { // picked by other's tree: two different instances
				s := oc.NewSelection(nil, netip.Addr{})
				p, err := s.Next()
				s.Release()
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, p)
			}
			idle := netip.AddrPort{}
			for _, m := range e.cluster().subs[0].members {
				if m.ep.InFlight() == 0 {
					idle = m.ep.Addr()
				}
			}
			if !idle.IsValid() || held[0].Endpoint() == held[1].Endpoint() {
				t.Fatalf("other's two picks %s %s: want two different instances", addrOf(held[0]), addrOf(held[1]))
			}
			for range 20 {
				p, err := e.pick(netip.AddrFrom4([4]byte{192, 0, 2, 1}))
				if err != nil {
					t.Fatal(err)
				}
				if p.Endpoint().Addr() != idle {
					t.Fatalf("demo picked %s; %s is the only one with nothing in flight", p.Endpoint().Addr(), idle)
				}
			}
			for _, p := range held {
				p.Done(Result{Status: 200})
			}
		})
	}
}

// Concurrent picks and answers in two least-loaded clusters sharing every
// address (each acquire fixes one tree under its own lock and the other
// after it) never deadlock, and leave both trees holding every member's
// true count once all is answered.
func TestSharedLoadTreesConverge(t *testing.T) {
	ws := make([]int, 48)
	for i := range ws {
		ws[i] = 1 + i%3
	}
	e := newEnv(t, sharedTrees(config.InstanceWLCRandom, config.InstanceFirst, ws))
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		c := e.h.Load().Cluster([]string{"demo", "other"}[w%2])
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := pickWorker(c, 8, w, 3000, func(int) int { return 7 }); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, name := range []string{"demo", "other"} {
		for _, g := range e.h.Load().Cluster(name).subs {
			tr := g.load
			tr.mu.Lock()
			tr.drain() // the last release may still wait in rel, as for the next pick
			for i := range g.members {
				if n := g.members[i].ep.InFlight(); n != 0 || tr.m[i].n != 0 {
					t.Errorf("%s/%s member %d: in flight %d, tree %d; want 0", name, g.name, i, n, tr.m[i].n)
				}
			}
			if root := tr.node[1]; root.ties != int32(len(g.members)) || tr.sum != 0 {
				t.Errorf("%s/%s: root %+v sum %d, want all %d members tied at zero", name, g.name, root, tr.sum, len(g.members))
			}
			tr.mu.Unlock()
		}
	}
}

// pickWorker is one client of c on stripe w: picks first picks from
// addresses 10.<net>.<w>.<k> for k < picks, holding up to keep(k) (pickHeld),
// then answers those still held.
func pickWorker(c *Cluster, net byte, w, picks int, keep func(int) int) error {
	var held []Pick
	for k := range picks {
		var s Selection
		c.Start(&s, nil, netip.AddrFrom4([4]byte{10, net, byte(w), byte(k)}), uint32(w))
		var err error
		if held, err = pickHeld(&s, held, keep(k)); err != nil {
			return err
		}
	}
	for _, p := range held {
		p.Done(Result{Status: 200})
	}
	return nil
}

// pickHeld makes s's first pick and releases s, holds the pick in held and
// answers the oldest held beyond keep.
func pickHeld(s *Selection, held []Pick, keep int) ([]Pick, error) {
	p, err := s.Next()
	s.Release()
	if err != nil {
		return held, err
	}
	held = append(held, p)
	if len(held) > keep {
		held[0].Done(Result{Status: 200})
		held = held[1:]
	}
	return held, nil
}

package balance

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

// checkLoadTree reports the first way tr (t.mu held, just synced: no
// pending leaf) is not what its records say: a member's count not the sum
// of its cells as recorded, a leaf not its record, a node not the
// combination of its children, or sum not the available members' total.
func checkLoadTree(tr *loadTree) error {
	if tr.pend != 0 {
		return fmt.Errorf("pending leaf %d after a sync", tr.pend-1)
	}
	var sum int64
	for i := range tr.m {
		m := &tr.m[i]
		var n int32
		for _, c := range m.cells {
			n += c
		}
		if n != m.n {
			return fmt.Errorf("member %d: count %d, cells %v", i, m.n, m.cells)
		}
		if nd := tr.leaf(int32(i)); tr.node[tr.size+i] != nd {
			return fmt.Errorf("member %d: leaf %+v, record makes %+v", i, tr.node[tr.size+i], nd)
		}
		if m.w > 0 {
			sum += int64(m.n)
		}
	}
	for k := tr.size - 1; k >= 1; k-- {
		if want := combine(tr.node[2*k], tr.node[2*k+1]); tr.node[k] != want {
			return fmt.Errorf("node %d: %+v, children make %+v", k, tr.node[k], want)
		}
	}
	if sum != tr.sum {
		return fmt.Errorf("sum %d, members total %d", tr.sum, sum)
	}
	return nil
}

// Under concurrent picks and answers on every stripe — releases racing one
// another for the tree's rel slot and the picks that drain it — every
// sync leaves the tree consistent (checkLoadTree), and once everything is
// answered each member's record is 0 with no re-read of the view: no
// release was lost or written twice.
func TestLoadTreeConcurrentReleasesConsistent(t *testing.T) {
	for _, mode := range []string{config.InstanceWLC, config.InstanceWLCRandom, config.InstanceLeastConn, config.InstanceFirst} {
		t.Run(mode, func(t *testing.T) {
			ws := make([]int, 64)
			for i := range ws {
				ws[i] = 1 + i%4
			}
			e := newEnv(t, snap(1, leastLoadPolicy(mode), 0, sc{name: "A", weight: 100, weights: ws}))
			c := e.cluster()
			g := c.subs[0]
			tr := g.load
			if tr == nil {
				t.Fatal("no load tree for 64 members")
			}
			var workers sync.WaitGroup
			errs := make(chan error, 5)
			for w := range 4 {
				workers.Add(1)
				go func() {
					defer workers.Done()
					if err := pickWorker(c, 9, w, 1500, func(k int) int { return 1 + k%4 }); err != nil {
						errs <- err
					}
				}()
			}
			stop := make(chan struct{})
			checked := make(chan int)
			go func() {
				n := 0
				for {
					select {
					case <-stop:
						checked <- n
						return
					default:
					}
					tr.mu.Lock()
					tr.sync(g.currentView())
					err := checkLoadTree(tr)
					tr.mu.Unlock()
					if err != nil {
						errs <- fmt.Errorf("check %d: %w", n, err)
						checked <- n
						return
					}
					n++
				}
			}()
			workers.Wait()
			close(stop)
			n := <-checked
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if n == 0 {
				t.Fatal("the checker never ran")
			}
			tr.mu.Lock()
			defer tr.mu.Unlock()
			tr.sync(g.currentView()) // the same view: drains rel, re-reads nothing else
			if err := checkLoadTree(tr); err != nil {
				t.Fatal(err)
			}
			for i := range tr.m {
				if n := g.members[i].ep.InFlight(); n != 0 || tr.m[i].n != 0 {
					t.Errorf("member %d: in flight %d, tree %d; want 0", i, n, tr.m[i].n)
				}
			}
			if root := tr.node[1]; root.ties != int32(len(tr.m)) || tr.sum != 0 {
				t.Errorf("root %+v sum %d, want all %d members tied at zero", root, tr.sum, len(tr.m))
			}
		})
	}
}

// pendingPick makes one pick from a fresh 3-member wlc tree and returns
// the tree, the member picked (its leaf pending) and the pick.
func pendingPick(t *testing.T) (*loadTree, *group, int, Pick) {
	t.Helper()
	treesForAll(t)
	e := newEnv(t, snap(1, leastLoadPolicy(config.InstanceWLC), 0, sc{name: "A", weight: 100, weights: []int{1, 2, 3}}))
	p := soloPick(t, e.cluster())
	g := e.cluster().subs[0]
	i := 0
	for g.members[i].ep != p.Endpoint() {
		i++
	}
	if g.load.pend != int32(i)+1 {
		t.Fatalf("pend %d after a pick of member %d, want %d", g.load.pend, i, i+1)
	}
	return g.load, g, i, p
}

// checkMember syncs tr (g's tree) and checks it, and that member i's
// record and leaf hold want in flight.
func checkMember(t *testing.T, tr *loadTree, g *group, i int, want int32) {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.sync(g.currentView())
	if err := checkLoadTree(tr); err != nil {
		t.Fatal(err)
	}
	if n, leaf := tr.m[i].n, tr.node[tr.size+i]; n != want || leaf.n != want {
		t.Fatalf("member %d: record %d, leaf %+v; want %d in flight", i, n, leaf, want)
	}
}

// A change to an address's count that is not the pending acquire's own
// release (here a pick through a table that no longer serves, which counts
// the address by Endpoint.acquire and noteLoad) reaches the leaf even while
// that leaf is pending: the next pick sees it.
func TestLoadTreePendingLeafTakesOtherChange(t *testing.T) {
	tr, g, i, p := pendingPick(t)
	ep := p.Endpoint()
	if ep.acquire(1) {
		ep.noteLoad(1)
	}
	checkMember(t, tr, g, i, 2)
	p.Done(Result{Status: 200})
	checkMember(t, tr, g, i, 1)
	if ep.release(&ep.load[1]) {
		ep.noteRelease(&ep.load[1], 1)
	}
	checkMember(t, tr, g, i, 0)
}

// A write of a pending member's count that finds it unchanged (a late
// note: an earlier re-read already saw its change) still leaves the leaf
// holding the acquire: the pending leaf is written, not dropped.
func TestLoadTreePendingLeafLateNote(t *testing.T) {
	tr, g, i, p := pendingPick(t)
	p.Endpoint().noteTrees()
	tr.mu.Lock()
	pend := tr.pend
	tr.mu.Unlock()
	if pend != 0 {
		t.Fatalf("pend %d after the member's count was written, want 0", pend)
	}
	checkMember(t, tr, g, i, 1)
	p.Done(Result{Status: 200})
	checkMember(t, tr, g, i, 0)
}

// A retry after a table swap picks by the retired table's scan: it counts
// its own pick (not the tree's first one again) and picks another member.
func TestLoadTreeRetryAfterSwapCountsItsPick(t *testing.T) {
	treesForAll(t)
	s1 := snap(1, leastLoadPolicy(config.InstanceWLC), 0, sc{name: "A", weight: 100, weights: []int{1, 1, 1}})
	e := newEnv(t, s1)
	s := e.cluster().NewSelection(nil, netip.Addr{})
	defer s.Release()
	p1, err := s.Next()
	if err != nil {
		t.Fatal(err)
	}
	defer p1.Done(Result{Status: 200})
	e.apply(snap(2, leastLoadPolicy(config.InstanceWLC), 0, sc{name: "A", weight: 100, weights: []int{1, 1, 1}}))
	p2, err := s.Next()
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Done(Result{Status: 200})
	if p2.Endpoint() == p1.Endpoint() {
		t.Fatalf("retry picked %s again", p1.Endpoint().Addr())
	}
	if n1, n2 := p1.Endpoint().InFlight(), p2.Endpoint().InFlight(); n1 != 1 || n2 != 1 {
		t.Fatalf("in flight: first pick %d, retry %d; want 1 each", n1, n2)
	}
}

package balance

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

var leastLoadModes = []string{config.InstanceWLC, config.InstanceWLCRandom, config.InstanceLeastConn, config.InstanceFirst}

func leastLoadPolicy(mode string) config.Policy {
	return policy(func(p *config.Policy) {
		p.Balance.Instance = mode
		p.Pool.MaxConnsPerHost = 3 // first: fill up to 3, then the next
		p.Retry.RetryMax, p.Retry.CrossRetry = 2, 1
		p.Retry.BudgetPercent, p.Retry.BudgetMin = 100, 1000
	})
}

// treesForAll gives every group a load tree for the test's duration.
func treesForAll(t *testing.T) {
	old := loadTreeMin
	loadTreeMin = 1
	t.Cleanup(func() { loadTreeMin = old })
}

func retire(t *Table) {
	for _, c := range t.clusters {
		for _, g := range c.subs {
			if g.load != nil {
				g.load.live.Store(false)
			}
		}
	}
}

// The tree gives exactly the scan's answer — first attempts and retries,
// ties, weight changes, drained members — pick for pick, when both walk
// the same load history from the same random source.
func TestLoadTreeMatchesScan(t *testing.T) {
	treesForAll(t)
	weights := []int{3, 1, 0, 2, 2, 5, 1, 1, 4, 2, 2, 2, 3, 1, 1, 0, 6, 2, 2, 1, 3, 3, 1}
	for _, mode := range leastLoadModes {
		t.Run(mode, func(t *testing.T) {
			s := snap(1, leastLoadPolicy(mode), 0, sc{name: "A", weight: 70, weights: weights}, sc{name: "B", weight: 30, weights: weights[:7]})
			tree, scan := newEnv(t, s), newEnv(t, s)
			retire(scan.h.Load())
			if g := tree.cluster().subs[0]; g.load == nil || !g.load.live.Load() {
				t.Fatal("tree env: no live load tree")
			}
			rnd := seededRand(11)
			type held struct{ a, b Pick }
			var out []held
			for step := range 4000 {
				switch r := rnd() % 10; {
				case r < 5 || len(out) == 0:
					ip := netip.AddrFrom4([4]byte{10, 9, byte(step >> 8), byte(step)})
					sa, sb := tree.cluster().NewSelection(nil, ip), scan.cluster().NewSelection(nil, ip)
					for attempt := 1; attempt <= int(1+rnd()%3); attempt++ {
						pa, ea := sa.Next()
						pb, eb := sb.Next()
						if !errors.Is(ea, eb) || pa.Endpoint() != nil && pb.Endpoint() != nil && pa.Endpoint().Addr() != pb.Endpoint().Addr() {
							for gi, g := range tree.cluster().subs {
								g2 := scan.cluster().subs[gi]
								v, v2 := g.currentView(), g2.currentView()
								t.Logf("%s: cursor %d/%d full %v/%v order %v / %v", g.name, v.sched.cursors[0].n.Load(), v2.sched.cursors[0].n.Load(), v.full, v2.full, v.sched.order, v2.sched.order)
								for i := range g.members {
									t.Logf("%s %d: n %d/%d w %d/%d tree n %d w %d", g.name, i, g.members[i].ep.InFlight(), g2.members[i].ep.InFlight(), v.weights[i], v2.weights[i], g.load.m[i].n, g.load.m[i].w)
								}
							}
							t.Fatalf("step %d attempt %d: tree %v %v, scan %v %v", step, attempt, addrOf(pa), ea, addrOf(pb), eb)
						}
						if ea != nil {
							break
						}
						out = append(out, held{pa, pb})
					}
					sa.Release()
					sb.Release()
				case r < 9:
					k := int(rnd() % uint64(len(out)))
					out[k].a.Done(Result{Status: 200})
					out[k].b.Done(Result{Status: 200})
					out = append(out[:k], out[k+1:]...)
				default:
					// Drain or restore a member: a new view (and weights) for the tree.
					a := inst(1, int(rnd()%uint64(len(weights))))
					drain := rnd()%2 == 0
					for _, e := range []*env{tree, scan} {
						if err := e.reg.SetOverride(a, Override{Drain: drain}); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			for _, h := range out {
				h.a.Done(Result{Status: 200})
				h.b.Done(Result{Status: 200})
			}
		})
	}
}

func addrOf(p Pick) string {
	if p.Endpoint() == nil {
		return "-"
	}
	return p.Endpoint().Addr().String()
}

// An address shared by two clusters carries one in-flight count: requests
// held through another cluster (wrr here) steer the least-loaded picks.
func TestLoadTreeSeesOtherClustersLoad(t *testing.T) {
	treesForAll(t)
	for _, mode := range []string{config.InstanceWLC, config.InstanceLeastConn, config.InstanceWLCRandom} {
		t.Run(mode, func(t *testing.T) {
			s := snap(1, leastLoadPolicy(mode), 0, sc{name: "A", weight: 100, weights: []int{1, 1, 1}})
			other := s.Clusters["demo"]
			other.Policy = policy(nil) // wrr: its picks go where it is told
			s.Clusters["other"] = other
			e := newEnv(t, s)
			oc := e.h.Load().Cluster("other")
			// A first pick syncs the tree: what follows reaches it only
			// through the endpoints' updates.
			if _, err := e.pick(netip.AddrFrom4([4]byte{192, 0, 2, 1})); err != nil {
				t.Fatal(err)
			}
			var held []Pick
			for range 2 { // two held on instance 0, one on 1: 2 is the least loaded
				for _, want := range []netip.AddrPort{inst(1, 0), inst(1, 1)} {
					p := pickAt(t, oc, want)
					held = append(held, p)
				}
			}
			for range 20 {
				p, err := e.pick(netip.AddrFrom4([4]byte{192, 0, 2, 1}))
				if err != nil {
					t.Fatal(err)
				}
				if p.Endpoint().Addr() != inst(1, 2) {
					t.Fatalf("picked %s; instance 2 is the only one with nothing in flight", p.Endpoint().Addr())
				}
			}
			for _, p := range held {
				p.Done(Result{Status: 200})
			}
		})
	}
}

// pickAt picks in c until it gets want, reporting the other picks done.
func pickAt(t *testing.T, c *Cluster, want netip.AddrPort) Pick {
	t.Helper()
	for range 100 {
		s := c.NewSelection(nil, netip.AddrFrom4([4]byte{192, 0, 2, 9}))
		p, err := s.Next()
		s.Release()
		if err != nil {
			t.Fatal(err)
		}
		if p.Endpoint().Addr() == want {
			return p
		}
		p.Done(Result{Status: 200})
	}
	t.Fatalf("never picked %s", want)
	return Pick{}
}

// A selection still on the table a swap replaced picks by the scan, from
// the same shared counts.
func TestLoadTreeRetiredBySwap(t *testing.T) {
	treesForAll(t)
	s := snap(1, leastLoadPolicy(config.InstanceWLC), 0, sc{name: "A", weight: 100, weights: []int{1, 1}})
	e := newEnv(t, s)
	old := e.cluster()
	p := pickAt(t, old, inst(1, 0))
	s2 := snap(2, leastLoadPolicy(config.InstanceWLC), 0, sc{name: "A", weight: 100, weights: []int{1, 1}})
	e.apply(s2)
	if old.subs[0].load.live.Load() || !e.cluster().subs[0].load.live.Load() {
		t.Fatal("after the swap the old tree must be retired and the new one live")
	}
	for name, c := range map[string]*Cluster{"old": old, "new": e.cluster()} {
		for range 5 {
			s := c.NewSelection(nil, netip.Addr{})
			q, err := s.Next()
			s.Release()
			if err != nil || q.Endpoint().Addr() != inst(1, 1) {
				t.Fatalf("%s table: %s %v, want %s (instance 0 has one in flight)", name, addrOf(q), err, inst(1, 1))
			}
			q.Done(Result{Status: 200})
		}
	}
	p.Done(Result{Status: 200})
}

// The pick's cost does not grow with the group: the least-loaded pick
// reads O(log n) tree nodes (a scan would read every member).
func TestLoadTreeLeastOKVisitsFewNodes(t *testing.T) {
	treesForAll(t)
	for _, n := range []int{16, 1024, 16384} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ws := make([]int, n)
			for i := range ws {
				ws[i] = 1 + i%3
			}
			e := newEnv(t, snap(1, leastLoadPolicy(config.InstanceWLC), 0, sc{name: "A", weight: 100, weights: ws}))
			g := e.cluster().subs[0]
			tr := g.load
			tr.mu.Lock()
			tr.sync(g.currentView())
			visits := 0
			skip := map[int]bool{0: true, 1: true, 2: true}
			i := tr.leastOK(1, func(i int) bool { visits++; return !skip[i] })
			tr.mu.Unlock()
			if i != 3 {
				t.Fatalf("leastOK = %d, want 3 (the first member not skipped, all idle: member order)", i)
			}
			// Each skipped member costs a path of its own, at most.
			if limit := 4 * (len(skip) + 1) * bitsLen(tr.size); visits > limit {
				t.Fatalf("%d visits for %d members, want ≤ %d", visits, n, limit)
			}
		})
	}
}

func bitsLen(n int) int {
	k := 0
	for ; n > 0; n >>= 1 {
		k++
	}
	return k
}

// Under concurrent picks, answers and table swaps, every tree converges:
// once all requests are answered each live tree holds every member's true
// in-flight count (zero), whatever order the updates ran in.
func TestLoadTreeConvergesUnderConcurrency(t *testing.T) {
	ws := make([]int, 64)
	for i := range ws {
		ws[i] = 1 + i%4
	}
	e := newEnv(t, snap(1, leastLoadPolicy(config.InstanceWLC), 0, sc{name: "A", weight: 60, weights: ws}, sc{name: "B", weight: 40, weights: ws[:40]}))
	done := make(chan struct{})
	errs := make(chan error, 8)
	for w := range 4 {
		go func() {
			var held []Pick
			for k := 0; ; k++ {
				select {
				case <-done:
					for _, p := range held {
						p.Done(Result{Status: 200})
					}
					errs <- nil
					return
				default:
				}
				s := e.h.Load().Cluster("demo").NewSelection(nil, netip.AddrFrom4([4]byte{10, 7, byte(w), byte(k)}))
				var err error
				if held, err = pickHeld(s, held, 5); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for v := uint64(2); v < 40; v++ {
		// Swaps while picking: the same members, a new table (and new trees) each time.
		e.apply(snap(v, leastLoadPolicy(config.InstanceWLC), 0, sc{name: "A", weight: 60, weights: ws}, sc{name: "B", weight: 40, weights: ws[:40]}))
	}
	close(done)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range e.cluster().subs {
		tr := g.load
		v := g.currentView()
		tr.mu.Lock()
		tr.drain() // the last release may still wait in rel, as for the next pick
		for i := range g.members {
			// Not re-synced: what the incremental updates left.
			if n := g.members[i].ep.InFlight(); n != 0 || tr.m[i].n != 0 {
				t.Errorf("%s member %d: in flight %d, tree %d; want 0", g.name, i, n, tr.m[i].n)
			}
		}
		tr.sync(v)
		if root := tr.node[1]; root.ties != int32(len(g.members)) {
			t.Errorf("%s: root %+v, want all %d members tied at zero", g.name, root, len(g.members))
		}
		tr.mu.Unlock()
	}
}

// Storing the same table again (a re-apply) keeps the trees right: a
// request held across the store still steers the picks.
func TestLoadTreeRestoredTable(t *testing.T) {
	treesForAll(t)
	e := newEnv(t, snap(1, leastLoadPolicy(config.InstanceWLC), 0, sc{name: "A", weight: 100, weights: []int{1, 1}}))
	held := pickAt(t, e.cluster(), inst(1, 0))
	e.h.Store(e.h.Load())
	if !e.cluster().subs[0].load.live.Load() {
		t.Fatal("the re-stored table's tree is not live")
	}
	for range 5 {
		if p, err := e.pick(netip.Addr{}); err != nil || p.Endpoint().Addr() != inst(1, 1) {
			t.Fatalf("%s %v, want %s: instance 0 has one in flight", addrOf(p), err, inst(1, 1))
		}
	}
	held.Done(Result{Status: 200})
}

// firstLeast (leastconn's rotating tie-break) is the first least-loaded
// member at or after from, exactly as a scan finds it, over random loads,
// weights (0: unavailable) and group sizes, power of two or not.
func TestLoadTreeFirstLeastMatchesScan(t *testing.T) {
	rnd := seededRand(5)
	for trial := range 300 {
		m := 1 + int(rnd()%40)
		size := 1
		for size < m {
			size <<= 1
		}
		tr := &loadTree{size: size, m: make([]loadMember, m), node: make([]loadNode, 2*size)}
		for i := range tr.node {
			tr.node[i] = emptyNode
		}
		for i := range m {
			tr.m[i].n, tr.m[i].w = int32(rnd()%3), int32(rnd()%4)
			tr.node[size+i] = tr.leaf(int32(i))
		}
		for k := size - 1; k >= 1; k-- {
			tr.node[k] = combine(tr.node[2*k], tr.node[2*k+1])
		}
		root := tr.node[1]
		if root.best < 0 {
			continue // no available member: the pick returns before any tie-break
		}
		for from := range m {
			want := -1
			for i := from; i < m; i++ {
				if tr.m[i].w > 0 && tr.leaf(int32(i)).cmp(root) == 0 {
					want = i
					break
				}
			}
			if got := tr.firstLeast(from, root); got != want {
				t.Fatalf("trial %d: members %+v: firstLeast(%d) = %d, want %d", trial, tr.m, from, got, want)
			}
		}
	}
}

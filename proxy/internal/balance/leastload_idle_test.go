package balance

import (
	"errors"
	"net/netip"
	"testing"
)

// The tree's answers stay the scan's when every member is available and
// the group often goes idle (all answered): the state where every member
// is tied (wlc-random takes member k without a descent) and where an
// acquire's pending path is undone by its own release before the next
// pick. Picks, retries and held requests, pick for pick, as in
// TestLoadTreeMatchesScan.
func TestLoadTreeIdleMatchesScan(t *testing.T) {
	treesForAll(t)
	weights := []int{3, 1, 2, 2, 5, 1, 1, 4, 2, 2, 2, 3, 1}
	for _, mode := range leastLoadModes {
		t.Run(mode, func(t *testing.T) {
			s := snap(1, leastLoadPolicy(mode), 0, sc{name: "A", weight: 100, weights: weights})
			tree, scan := newEnv(t, s), newEnv(t, s)
			retire(scan.h.Load())
			if g := tree.cluster().subs[0]; g.load == nil || !g.load.live.Load() {
				t.Fatal("tree env: no live load tree")
			}
			rnd := seededRand(23)
			var held [][2]Pick
			idle := 0
			for step := range 3000 {
				if len(held) == 0 {
					idle++
				}
				ip := netip.AddrFrom4([4]byte{10, 11, byte(step >> 8), byte(step)})
				sa, sb := tree.cluster().NewSelection(nil, ip), scan.cluster().NewSelection(nil, ip)
				for attempt := 1; attempt <= int(1+rnd()%2); attempt++ {
					pa, ea := sa.Next()
					pb, eb := sb.Next()
					if !errors.Is(ea, eb) || addrOf(pa) != addrOf(pb) {
						t.Fatalf("step %d attempt %d (%d held): tree %s %v, scan %s %v", step, attempt, len(held), addrOf(pa), ea, addrOf(pb), eb)
					}
					if ea != nil {
						break
					}
					held = append(held, [2]Pick{pa, pb})
				}
				sa.Release()
				sb.Release()
				// Mostly answered at once; now and then a few are held.
				for len(held) > 0 && rnd()%4 != 0 {
					k := int(rnd() % uint64(len(held)))
					held[k][0].Done(Result{Status: 200})
					held[k][1].Done(Result{Status: 200})
					held = append(held[:k], held[k+1:]...)
				}
			}
			for _, h := range held {
				h[0].Done(Result{Status: 200})
				h[1].Done(Result{Status: 200})
			}
			if idle < 1000 {
				t.Fatalf("the group was idle before %d picks of 3000, want ≥ 1000 (the state under test)", idle)
			}
		})
	}
}

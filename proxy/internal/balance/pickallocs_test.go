package balance

import (
	"net/netip"
	"testing"
)

// Issue 20 "Keep: zero allocations per pick": every instance algorithm's
// whole selection (Start, Next, Done, Release) allocates nothing, sticky-cookie
// issuing its cookie included (signed once per table at Build).
func TestEveryPickAllocatesNothing(t *testing.T) {
	for _, mode := range allInstanceModes {
		for _, n := range []int{4, 64} { // under and over loadTreeMin
			e := newEnv(t, snap(1, modePolicy(mode), 0, sc{name: "A", weight: 100, weights: benchWeights(n)}))
			c := e.cluster()
			ips := benchIPs()
			var s Selection
			i := 0
			if a := testing.AllocsPerRun(300, func() {
				c.Start(&s, nil, ips[i&1023], 0)
				i++
				p, err := s.Next()
				if err != nil {
					t.Fatalf("%s n=%d: %v", mode, n, err)
				}
				p.Done(Result{Status: 200})
				s.Release()
			}); a != 0 {
				t.Errorf("%s n=%d: %.1f allocs per pick, want 0", mode, n, a)
			}
		}
	}
}

// The cookie a sticky-cookie pick issues is its instance's own: the one
// makeCookie signs for the address, whichever member was picked.
func TestIssuedCookieNamesThePickedInstance(t *testing.T) {
	e := newEnv(t, snap(1, modePolicy("sticky-cookie"), 0, sc{name: "A", weight: 50, weights: benchWeights(40)},
		sc{name: "B", weight: 50, weights: benchWeights(7)}))
	c := e.cluster()
	seen := map[netip.AddrPort]bool{}
	for i := range 2000 {
		s := c.NewSelection(nil, keyIP(i))
		p, err := s.Next()
		if err != nil {
			t.Fatal(err)
		}
		got, want := p.SetCookie(), c.makeCookie(p.Endpoint().Addr())
		if got == nil || got.String() != want.String() {
			t.Fatalf("pick of %s issued %v, want %v", p.Endpoint().Addr(), got, want)
		}
		seen[p.Endpoint().Addr()] = true
		p.Done(Result{Status: 200})
		s.Release()
	}
	if len(seen) != 47 {
		t.Fatalf("%d instances picked, want all 47", len(seen))
	}
}

package balance

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

// ringMembers are members as Build makes them: identity = hash of addr:port.
func ringMembers(addrs []netip.AddrPort, weights []int) []member {
	ms := make([]member, len(addrs))
	for i, a := range addrs {
		b, _ := a.MarshalBinary()
		ms[i] = member{weight: weights[i], agentOK: true, addrHash: hashBytes(b)}
	}
	return ms
}

func instances(n int) []netip.AddrPort {
	as := make([]netip.AddrPort, n)
	for i := range as {
		as[i] = inst(1, i)
	}
	return as
}

func ones(n int) []int {
	ws := make([]int, n)
	for i := range ws {
		ws[i] = 1
	}
	return ws
}

// owners maps every test key to the address owning it on the ring.
func owners(addrs []netip.AddrPort, weights []int) []netip.AddrPort {
	r := buildRing(ringMembers(addrs, weights))
	out := make([]netip.AddrPort, nKeys)
	all := func(int) bool { return true }
	for k := range out {
		out[k] = addrs[r.lookup(hashAddr(keyIP(k)), all)]
	}
	return out
}

// Shares follow the weights: with 256 points per unit of weight, every
// member's share of 100 000 keys is within 20 % (relative) of its weight's
// share, for equal and for unequal weights (the ring is a pure function of
// the addresses, so the figures are exact, not a sample that may flake).
func TestRingSharesFollowWeights(t *testing.T) {
	for _, ws := range [][]int{ones(10), {1, 2, 3, 4}, ones(50), {10, 10, 30, 50}} {
		t.Run(fmt.Sprint(ws), func(t *testing.T) {
			addrs := instances(len(ws))
			got := map[netip.AddrPort]int{}
			for _, a := range owners(addrs, ws) {
				got[a]++
			}
			total := 0
			for _, w := range ws {
				total += w
			}
			worst := 0.0
			for i, a := range addrs {
				want := float64(nKeys) * float64(ws[i]) / float64(total)
				dev := (float64(got[a]) - want) / want
				worst = max(worst, dev, -dev)
				if dev > 0.2 || dev < -0.2 {
					t.Errorf("%s (weight %d): %d keys, want %.0f ± 20 %%", a, ws[i], got[a], want)
				}
			}
			t.Logf("weights %v: worst relative deviation %.1f %%", ws, 100*worst)
		})
	}
}

// Removing one of n instances moves exactly its keys (no other key moves)
// and so at most 1/n + 2 % of them; adding an (n+1)-th moves only the keys
// it takes, at most 1/(n+1) + 2 %. Issue 17, defect 5: the old ring re-spread
// every member's points and moved 13.7 % of the other instances' keys.
func TestRingMembershipChangeMovesOnlyThatInstancesKeys(t *testing.T) {
	for _, n := range []int{4, 10, 33} {
		addrs := instances(n + 1)
		base := owners(addrs[:n], ones(n))
		t.Run(fmt.Sprintf("remove 1 of %d", n), func(t *testing.T) {
			for _, gone := range []int{0, n / 2, n - 1} {
				rest := append(append([]netip.AddrPort(nil), addrs[:gone]...), addrs[gone+1:n]...)
				after := owners(rest, ones(n-1))
				moved := 0
				for k := range base {
					switch {
					case base[k] == addrs[gone]:
						moved++
					case after[k] != base[k]:
						t.Fatalf("key %d moved from %s (still there) to %s when %s left", k, base[k], after[k], addrs[gone])
					}
				}
				f := float64(moved) / nKeys
				if bound := 1/float64(n) + 0.02; f > bound {
					t.Fatalf("removing %s moved %.4f of keys > %.4f", addrs[gone], f, bound)
				}
				t.Logf("n=%d: removing %s moved %.2f %% of keys, all of them its own", n, addrs[gone], 100*f)
			}
		})
		t.Run(fmt.Sprintf("add 1 to %d", n), func(t *testing.T) {
			after := owners(addrs, ones(n+1))
			moved := 0
			for k := range base {
				if after[k] != base[k] {
					if after[k] != addrs[n] {
						t.Fatalf("key %d moved from %s to %s, not to the new %s", k, base[k], after[k], addrs[n])
					}
					moved++
				}
			}
			f := float64(moved) / nKeys
			if bound := 1/float64(n+1) + 0.02; f > bound || moved == 0 {
				t.Fatalf("adding %s moved %.4f of keys, want (0, %.4f]", addrs[n], f, bound)
			}
			t.Logf("n=%d: adding %s moved %.2f %% of keys, all to it", n, addrs[n], 100*f)
		})
	}
}

// A member's points do not depend on where it is listed.
func TestRingIndependentOfListOrder(t *testing.T) {
	addrs := instances(8)
	ws := []int{1, 2, 1, 3, 1, 1, 2, 1}
	a := owners(addrs, ws)
	rev := make([]netip.AddrPort, len(addrs))
	rws := make([]int, len(ws))
	for i := range addrs {
		rev[len(addrs)-1-i], rws[len(ws)-1-i] = addrs[i], ws[i]
	}
	b := owners(rev, rws)
	for k := range a {
		if a[k] != b[k] {
			t.Fatalf("key %d: %s listed forwards, %s listed backwards", k, a[k], b[k])
		}
	}
}

// The bound on a ring's size halves every member's points when Σ weight is
// large, keeping weights proportional and at least one point each.
func TestRingShiftBoundsPoints(t *testing.T) {
	ws := make([]int, 4000)
	for i := range ws {
		ws[i] = 1 + i%3
	}
	ms := ringMembers(func() []netip.AddrPort {
		as := make([]netip.AddrPort, len(ws))
		for i := range as {
			as[i] = inst(2+i/1000, i%1000)
		}
		return as
	}(), ws)
	r := buildRing(ms)
	if len(r.points) > ringMaxPoints || r.shift != 2 {
		t.Fatalf("%d points, shift %d; want ≤ %d points, shift 2", len(r.points), r.shift, ringMaxPoints)
	}
	if got := pointsFor(1, 20); got != 1 {
		t.Fatalf("pointsFor(1, 20) = %d, want 1", got)
	}
}

// Through the table (what a snapshot swap does): removing one of four
// instances from the configuration moves only its keys, for sticky and for
// source with hash_type consistent.
func TestRingConfigRemovalThroughTable(t *testing.T) {
	for _, mode := range []string{config.InstanceSticky, "source/consistent"} {
		t.Run(mode, func(t *testing.T) {
			pol := modePolicy(mode)
			e := newEnv(t, snap(1, pol, 0, sc{name: "A", weight: 100, weights: ones(4)}))
			const keys = 20000
			before := make([]string, keys)
			for k := range before {
				before[k] = e.cluster().Explain(nil, keyIP(k)).Instance
			}
			// snap numbers instances by position: drop the last one.
			e.apply(snap(2, pol, 0, sc{name: "A", weight: 100, weights: ones(3)}))
			gone := inst(1, 3).String()
			moved := 0
			for k := range before {
				now := e.cluster().Explain(nil, keyIP(k)).Instance
				if before[k] == gone {
					moved++
					if now == gone {
						t.Fatalf("key %d still on the removed %s", k, gone)
					}
				} else if now != before[k] {
					t.Fatalf("key %d moved from %s to %s", k, before[k], now)
				}
			}
			if f := float64(moved) / keys; f > 0.25+0.02 {
				t.Fatalf("moved %.4f > 0.27", f)
			}
		})
	}
}

// BenchmarkRingLookup is the ring's pick: a binary search over
// 256 · Σ weight points, O(log n).
func BenchmarkRingLookup(b *testing.B) {
	for _, n := range []int{4, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			as := make([]netip.AddrPort, n)
			for i := range as {
				as[i] = inst(1+i/1000, i%1000)
			}
			r := buildRing(ringMembers(as, ones(n)))
			ips := benchIPs()
			hs := make([]uint64, len(ips))
			for i, ip := range ips {
				hs[i] = hashAddr(ip)
			}
			all := func(int) bool { return true }
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if r.lookup(hs[i&1023], all) < 0 {
					b.Fatal("no member")
				}
			}
		})
	}
}

// An empty ring (a consistent-hash sub-cluster with no members) finds no
// member: -1, never an index its caller would dereference.
func TestRingEmptyLookup(t *testing.T) {
	var r ring
	called := false
	if m := r.lookup(0x0123456789abcdef, func(int) bool { called = true; return true }); m != -1 || called {
		t.Fatalf("empty ring lookup: member %d (ok called: %v), want -1 without a call", m, called)
	}
}

// BFE's range pick over no ranges (no weighted sub-cluster, no blackhole)
// chooses nothing: -1, never a sub-cluster index.
func TestPickRangeEmpty(t *testing.T) {
	if sub := pickRange(nil, 0x0123456789abcdef); sub != -1 {
		t.Fatalf("pickRange of no ranges: %d, want -1", sub)
	}
}

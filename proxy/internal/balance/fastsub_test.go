package balance

import (
	"net/netip"
	"testing"
	"time"
)

// The sub-cluster fast path (Selection.fastSub: consistent mode keyed by
// the client address, every algorithm) answers as the general first pick
// does, over every instance algorithm:
//   - a first pick by client address is made by "hash"; with no address it
//     is made at random;
//   - a view with a timed change (an override's TTL) is not used past it:
//     once the TTL ends the instance it drained is picked again, with no
//     other change to bump the registry's epoch;
//   - a sub-cluster with nothing available (its view current and empty)
//     leaves its share to the other: every pick succeeds there, by
//     "fallback".
func TestFastSubClusterPathAnswersAsFirst(t *testing.T) {
	ips := make([]netip.Addr, 400)
	for i := range ips {
		ips[i] = keyIP(i * 31)
	}
	for _, mode := range allInstanceModes {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, snap(1, modePolicy(mode), 0, sc{name: "SC1", weight: 50, weights: []int{1, 2, 3}},
				sc{name: "SC2", weight: 50, weights: []int{1, 1, 1, 1}}))
			if !e.cluster().fastSub {
				t.Fatal("the default policy does not take the fast path")
			}
			for _, ip := range ips[:50] {
				for range 2 { // the second pick finds the view built
					if p, err := e.pick(ip); err != nil || p.Reason() != "hash" {
						t.Fatalf("pick for %s: %v, reason %q, want by hash", ip, err, p.Reason())
					}
				}
			}
			if p, err := e.pick(netip.Addr{}); err != nil || p.Reason() != "random" {
				t.Fatalf("pick without a client address: %v, reason %q, want random", err, p.Reason())
			}

			// SC2's member 0 drained for a minute: not picked, then picked
			// again once the minute is over.
			drained := inst(2, 0)
			if err := e.reg.SetOverride(drained, Override{Drain: true, TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			for _, ip := range ips {
				if p, err := e.pick(ip); err != nil || p.Endpoint().Addr() == drained {
					t.Fatalf("pick for %s during the drain: %v, %v", ip, err, p.Endpoint())
				}
			}
			e.clock.Add(time.Minute + time.Second)
			picked := 0
			for _, ip := range ips {
				p, err := e.pick(ip)
				if err != nil {
					t.Fatalf("pick for %s after the TTL: %v", ip, err)
				}
				if p.Endpoint().Addr() == drained {
					picked++
				}
			}
			if picked == 0 {
				t.Fatalf("%s not picked in %d picks after its drain's TTL ended", drained, len(ips))
			}

			// Every member of SC1 drained for good.
			for i := range 3 {
				if err := e.reg.SetOverride(inst(1, i), Override{Drain: true}); err != nil {
					t.Fatal(err)
				}
			}
			fallbacks := 0
			for round := range 2 {
				for _, ip := range ips {
					p, err := e.pick(ip)
					if err != nil {
						t.Fatalf("round %d, pick for %s with SC1 drained: %v", round, ip, err)
					}
					if p.SubCluster() != "SC2" {
						t.Fatalf("round %d, pick for %s: %s in %s, want SC2", round, ip, p.Endpoint().Addr(), p.SubCluster())
					}
					if p.Reason() == "fallback" {
						fallbacks++
					}
				}
			}
			if fallbacks == 0 {
				t.Fatal("no pick fell back from SC1")
			}
		})
	}
}

// A retry of a drawing algorithm (random, random(N), p2c-ewma) never takes
// the instance already tried and always finds the other one: a draw that
// lands on the tried instance is drawn again among the rest.
func TestDrawnRetryTakesTheOtherInstance(t *testing.T) {
	for _, mode := range []string{"random", "random(2)", "p2c-ewma"} {
		pol := modePolicy(mode)
		pol.Retry.RetryMax, pol.Retry.CrossRetry = 1, 0
		pol.Retry.BudgetPercent, pol.Retry.BudgetMin = 100, 1000
		e := newEnv(t, snap(1, pol, 0, sc{name: "A", weight: 100, weights: []int{1, 1}}))
		for k := range 200 {
			s := e.cluster().NewSelection(nil, keyIP(k))
			p1, err := s.Next()
			if err != nil {
				t.Fatalf("%s, selection %d: first pick: %v", mode, k, err)
			}
			p2, err := s.Next()
			if err != nil {
				t.Fatalf("%s, selection %d: retry after %s: %v", mode, k, p1.Endpoint().Addr(), err)
			}
			if p2.Endpoint() == p1.Endpoint() {
				t.Fatalf("%s, selection %d: retry took %s again", mode, k, p1.Endpoint().Addr())
			}
			p1.Done(Result{Status: 200})
			p2.Done(Result{Status: 200})
			s.Release()
		}
	}
}

// ring.at is the member lookup accepts first when it accepts every member,
// for keys all round the circle: past the last point a key wraps to the
// first.
func TestRingAtIsLookupsFirstChoice(t *testing.T) {
	ms := make([]member, 7)
	for i := range ms {
		ms[i] = member{weight: 1 + i%3, addrHash: mix(uint64(i) + 1)}
	}
	r := buildRing(ms)
	all := func(int) bool { return true }
	last := uint64(r.points[len(r.points)-1].hash)
	hs := []uint64{0, ^uint64(0), last << 32, (last + 1) << 32, uint64(r.points[0].hash) << 32}
	rnd := seededRand(11)
	for range 2000 {
		hs = append(hs, rnd())
	}
	for _, h := range hs {
		if got, want := r.at(h), r.lookup(h, all); got != want {
			t.Fatalf("at(%#x) = %d, lookup = %d", h, got, want)
		}
	}
	if r.at((last+1)<<32) != int(r.points[0].member) {
		t.Fatalf("a key past the last point is not the first point's")
	}
	if (&ring{}).at(1) != -1 {
		t.Fatal("an empty ring has a member")
	}
}

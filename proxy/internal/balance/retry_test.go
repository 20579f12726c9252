package balance

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
)

// runSelection drives one request to the end (every attempt fails neutrally)
// and checks D5: attempts ≤ 1+retry_max+cross_retry, primary attempts ≤
// 1+retry_max, no instance twice unless it is the cluster's only available
// one, never the blackhole, ErrBlackhole only on the first call.
func runSelection(t interface{ Fatalf(string, ...any) }, c *Cluster, ip netip.Addr) (attempts int, blackholed bool) {
	rp := c.Policy().Retry
	s := c.NewSelection(nil, ip)
	defer s.Release()
	seen := map[*Endpoint]int{}
	primary, cross := 0, 0
	for k := 0; ; k++ {
		p, err := s.Next()
		if errors.Is(err, ErrBlackhole) {
			if k != 0 {
				t.Fatalf("ErrBlackhole on attempt %d", k+1)
			}
			return 0, true
		}
		if err != nil {
			if !errors.Is(err, ErrNoAvailable) && !errors.Is(err, ErrAttemptsExhausted) && !errors.Is(err, ErrRetryBudget) {
				t.Fatalf("unexpected error %v", err)
			}
			break
		}
		if p.SubCluster() == config.Blackhole || p.Attempt() != k+1 {
			t.Fatalf("bad pick %+v", p)
		}
		if p.Cross() {
			cross++
		} else {
			primary++
		}
		seen[p.Endpoint()]++
		p.Done(Result{Err: errors.New("client gone")})
	}
	total := primary + cross
	if total > 1+rp.RetryMax+rp.CrossRetry || primary > 1+rp.RetryMax || cross > rp.CrossRetry {
		t.Fatalf("attempts %d (primary %d, cross %d) exceed 1+%d+%d", total, primary, cross, rp.RetryMax, rp.CrossRetry)
	}
	avail := 0
	for _, g := range c.subs {
		avail += g.currentView().nAvail
	}
	for e, n := range seen {
		if n > 1 && avail > 1 {
			t.Fatalf("%s tried %d times with %d instances available", e.Addr(), n, avail)
		}
	}
	return total, false
}

func retryPolicy() config.Policy {
	return policy(func(p *config.Policy) {
		p.Retry.RetryMax, p.Retry.CrossRetry = 2, 2
		p.Retry.BudgetPercent, p.Retry.BudgetMin = 100, 1000
	})
}

func TestRetrySelectionBounds(t *testing.T) {
	e := newEnv(t, snap(1, retryPolicy(), 10,
		sc{name: "SC1", weight: 45, weights: []int{1, 1, 1}},
		sc{name: "SC2", weight: 45, weights: []int{1, 1}},
		sc{name: "SC3", weight: 0, weights: []int{1}}))
	full, bh := 0, 0
	for k := range 2000 {
		n, dropped := runSelection(t, e.cluster(), keyIP(k))
		if dropped {
			bh++
		}
		if n == 5 {
			full++
		}
	}
	if full == 0 || bh == 0 {
		t.Fatalf("expected full retry chains and blackholed keys: full %d blackhole %d", full, bh)
	}
}

func TestEmptyPrimaryGoesCross(t *testing.T) {
	down := map[int]string{0: config.StateUnhealthy, 1: config.StateUnhealthy}
	e := newEnv(t, snap(1, retryPolicy(), 0,
		sc{name: "SC1", weight: 100, weights: []int{1, 1}, states: down},
		sc{name: "SC2", weight: 0, weights: []int{1}}))
	s := e.cluster().NewSelection(nil, keyIP(1))
	defer s.Release()
	p, err := s.Next()
	if err != nil || !p.Cross() || p.SubCluster() != "SC2" || p.Reason() != "cross-retry" {
		t.Fatalf("pick %+v err %v: want a cross pick into the standby", p, err)
	}
	p.Done(Result{})
	// fail_fast: the empty share is answered, not spread.
	ff := retryPolicy()
	ff.Balance.FailFast = true
	e2 := newEnv(t, snap(1, ff, 0, sc{name: "SC1", weight: 50, weights: []int{1}, states: down}, sc{name: "SC2", weight: 50, weights: []int{1}}))
	var nf int
	for k := range 200 {
		s := e2.cluster().NewSelection(nil, keyIP(k))
		p, err := s.Next()
		if errors.Is(err, ErrNoAvailable) {
			nf++
		} else if err == nil {
			p.Done(Result{})
		}
		s.Release()
	}
	if nf == 0 || nf == 200 {
		t.Fatalf("fail_fast: %d of 200 failed, want about half", nf)
	}
}

func TestRetryBudget(t *testing.T) {
	pol := retryPolicy()
	pol.Retry.BudgetPercent, pol.Retry.BudgetMin = 50, 1
	e := newEnv(t, snap(1, pol, 0, sc{name: "SC1", weight: 100, weights: []int{1, 1, 1, 1}}))
	c := e.cluster()
	s1, s2 := c.NewSelection(nil, keyIP(1)), c.NewSelection(nil, keyIP(2))
	defer s1.Release()
	defer s2.Release()
	p1, _ := s1.Next()
	p2, _ := s2.Next()
	r1, err := s1.Next() // 1 retry allowed: max(1, 50 % of 2 active)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Next(); !errors.Is(err, ErrRetryBudget) {
		t.Fatalf("second concurrent retry: %v, want ErrRetryBudget", err)
	}
	r1.Done(Result{})
	r2, err := s2.Next()
	if err != nil {
		t.Fatalf("retry after the budget freed: %v", err)
	}
	for _, p := range []Pick{p1, p2, r2} {
		p.Done(Result{})
	}
}

// Random sequences of add/remove/reweight/eject/recover/pick never break
// D5 and never pick an unavailable instance.
func TestPropertyRandomOperations(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		pol := retryPolicy()
		pol.Health.FailNum, pol.Health.MaxEjectionPercent = 1, 100
		pol.Balance.Instance = rapid.SampledFrom(allInstanceModes[:13]).Draw(rt, "mode")
		type scState struct {
			w  int
			ws []int
		}
		subs := []scState{{50, []int{1, 2}}, {40, []int{3}}, {0, []int{1}}}
		bh := 10
		mk := func(v uint64) *snapshot.Snapshot {
			var ss []sc
			for i, s := range subs {
				ss = append(ss, sc{name: fmt.Sprintf("SC%d", i), weight: s.w, weights: s.ws})
			}
			return snap(v, pol, bh, ss...)
		}
		e := newEnv(rt, mk(1))
		ver := uint64(1)
		ops := rapid.IntRange(2, 10).Draw(rt, "ops")
		for range ops {
			switch rapid.IntRange(0, 5).Draw(rt, "op") {
			case 0: // add an instance
				i := rapid.IntRange(0, 2).Draw(rt, "sub")
				subs[i].ws = append(subs[i].ws, rapid.IntRange(0, 5).Draw(rt, "w"))
			case 1: // remove an instance
				i := rapid.IntRange(0, 2).Draw(rt, "sub")
				if len(subs[i].ws) > 0 {
					subs[i].ws = subs[i].ws[:len(subs[i].ws)-1]
				}
			case 2: // reweight the row (sum 100)
				a := rapid.IntRange(0, 90).Draw(rt, "a")
				subs[0].w, subs[1].w, bh = a, 90-a, 10
			case 3: // eject a random address
				for _, ep := range e.h.Load().endpoints {
					if rapid.Bool().Draw(rt, "eject") {
						ep.load[0].n.Add(1)
						fail(Pick{ep: ep, g: e.cluster().subs[0]})
					}
				}
			case 4: // recover
				for _, ep := range e.h.Load().endpoints {
					if ep.probeResult(true, e.clock.Now()) {
						e.reg.bump()
					}
				}
			case 5:
				for k := range 20 {
					runSelection(rt, e.cluster(), keyIP(k))
				}
				continue
			}
			ver++
			e.apply(mk(ver))
			for k := range 5 {
				runSelection(rt, e.cluster(), keyIP(k))
			}
		}
		for _, ep := range e.h.Load().endpoints {
			if n := ep.InFlight(); n != 0 {
				rt.Fatalf("%s in-flight %d after every pick was reported", ep.Addr(), n)
			}
		}
	})
}

// TestRetriesBeyondFourTriedNeverRepeat: a selection remembers its first
// four tried instances inline and the rest in Selection.extra; a request
// retried eight times in a sub-cluster of eight instances tries each
// exactly once, then is exhausted (extra's lookup is what keeps attempts 6
// to 8 off the fifth instance and after).
func TestRetriesBeyondFourTriedNeverRepeat(t *testing.T) {
	pol := policy(func(p *config.Policy) {
		p.Retry.RetryMax, p.Retry.CrossRetry = 7, 0
		p.Retry.BudgetPercent, p.Retry.BudgetMin = 100, 1000
	})
	e := newEnv(t, snap(1, pol, 0, sc{name: "SC1", weight: 100, weights: []int{1, 1, 1, 1, 1, 1, 1, 1}}))
	for k := range 50 {
		s := e.cluster().NewSelection(nil, keyIP(k))
		seen := map[netip.AddrPort]int{}
		for a := 1; a <= 8; a++ {
			p, err := s.Next()
			if err != nil {
				t.Fatalf("key %d attempt %d: %v (tried %v)", k, a, err, seen)
			}
			seen[p.Endpoint().Addr()]++
			p.Done(Result{Err: errors.New("client gone")})
		}
		if len(seen) != 8 {
			t.Fatalf("key %d: 8 attempts tried %d instances: %v", k, len(seen), seen)
		}
		if _, err := s.Next(); !errors.Is(err, ErrAttemptsExhausted) {
			t.Fatalf("key %d: 9th attempt: %v, want ErrAttemptsExhausted", k, err)
		}
		s.Release()
	}
}

// The zero Pick (what Next returns with an error) answers its accessors
// without dereferencing a sub-cluster it does not have.
func TestZeroPickAccessors(t *testing.T) {
	var p Pick
	if p.Endpoint() != nil || p.SubCluster() != "" || p.Algorithm() != "" || p.SetCookie() != nil || p.Cross() || p.Attempt() != 0 || p.Reason() != "hash" {
		t.Fatalf("zero pick: %v %q %q %v %v %d %q", p.Endpoint(), p.SubCluster(), p.Algorithm(), p.SetCookie(), p.Cross(), p.Attempt(), p.Reason())
	}
	p.Done(Result{}) // no endpoint: nothing to report, no panic
}

package balance

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

var allInstanceModes = []string{
	config.InstanceWRR, config.InstanceWLC, config.InstanceWLCRandom, config.InstanceP2CEWMA,
	config.InstanceSticky, config.InstanceStickyCookie, config.InstanceStaticRR, config.InstanceRoundRobin,
	config.InstanceLeastConn, config.InstanceFirst, config.InstanceRandom, "random(2)", config.InstanceSource,
	"source/consistent", config.InstanceRingHash, "uri", "uri whole/consistent", "hdr(X-User)", "url_param(uid)/consistent",
}

func modePolicy(mode string) config.Policy {
	return policy(func(p *config.Policy) {
		p.Balance.Instance = mode
		if m, ok := strings.CutSuffix(mode, "/consistent"); ok {
			p.Balance.Instance, p.Balance.HashType = m, "consistent"
		}
	})
}

// One table test over every instance algorithm (STYLE 13): under a steady
// load of 100 outstanding requests (released oldest first) the realised share
// of each available instance is within 10 % (relative) of its weight share
// ("first" fills the first available instance instead); unavailable
// instances (agent-unhealthy, weight 0, operator-drained) are never picked;
// with nothing available Next returns ErrNoAvailable.
func TestEveryInstanceAlgorithm(t *testing.T) {
	weights := []int{1, 2, 3, 4, 5, 0, 6}
	states := map[int]string{4: config.StateUnhealthy}
	const drained = 6
	const picks, window = 20000, 100
	for _, mode := range allInstanceModes {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, snap(1, modePolicy(mode), 0, sc{name: "A", weight: 100, weights: weights, states: states}))
			if err := e.reg.SetOverride(inst(1, drained), Override{Drain: true}); err != nil {
				t.Fatal(err)
			}
			counts := map[netip.AddrPort]int{}
			var out []Pick
			rnd := seededRand(7)
			for k := range picks {
				ip := netip.AddrFrom4([4]byte{172, byte(rnd()), byte(rnd()), byte(rnd())})
				s := e.cluster().NewSelection(nil, ip)
				p, err := s.Next()
				s.Release()
				if err != nil {
					t.Fatalf("pick %d: %v", k, err)
				}
				counts[p.Endpoint().Addr()]++
				out = append(out, p)
				if len(out) > window {
					out[0].Done(Result{Status: 200, Latency: 1000})
					out = out[1:]
				}
			}
			for _, p := range out {
				p.Done(Result{Status: 200, Latency: 1000})
			}
			for _, i := range []int{4, 5, drained} {
				if n := counts[inst(1, i)]; n != 0 {
					t.Fatalf("unavailable instance %d picked %d times", i, n)
				}
			}
			if mode == config.InstanceFirst {
				if counts[inst(1, 0)] != picks {
					t.Fatalf("first: %v, want all on instance 0", counts)
				}
				return
			}
			total := 1 + 2 + 3 + 4
			worst := 0.0
			for i, w := range weights[:4] {
				want := float64(picks) * float64(w) / float64(total)
				rel := math.Abs(float64(counts[inst(1, i)])-want) / want
				worst = max(worst, rel)
			}
			t.Logf("%s: max relative error %.3f, counts %v", mode, worst, counts)
			if worst > 0.10 {
				t.Fatalf("%s: max relative error %.3f > 0.10: %v", mode, worst, counts)
			}
		})
	}
}

func TestEveryInstanceAlgorithmNothingAvailable(t *testing.T) {
	for _, mode := range allInstanceModes {
		t.Run(mode, func(t *testing.T) {
			st := map[int]string{0: config.StateDraining, 1: config.StateUnhealthy}
			e := newEnv(t, snap(1, modePolicy(mode), 0, sc{name: "A", weight: 100, weights: []int{1, 1, 0}, states: st}))
			s := e.cluster().NewSelection(nil, netip.MustParseAddr("192.0.2.9"))
			defer s.Release()
			if _, err := s.Next(); !errors.Is(err, ErrNoAvailable) {
				t.Fatalf("err = %v, want ErrNoAvailable", err)
			}
		})
	}
}

// D7: a valid cookie keeps its instance; a tampered one is ignored and re-issued.
func TestStickyCookie(t *testing.T) {
	e := newEnv(t, snap(1, modePolicy(config.InstanceStickyCookie), 0, sc{name: "A", weight: 100, weights: []int{1, 1, 1}}))
	req, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
	s := e.cluster().NewSelection(req, netip.Addr{})
	p, err := s.Next()
	s.Release()
	if err != nil || p.SetCookie() == nil {
		t.Fatalf("first pick: %v, cookie %v", err, p.SetCookie())
	}
	p.Done(Result{})
	want := p.Endpoint().Addr()
	for range 10 {
		req, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
		req.AddCookie(p.SetCookie())
		s := e.cluster().NewSelection(req, netip.Addr{})
		q, err := s.Next()
		s.Release()
		if err != nil || q.Endpoint().Addr() != want || q.Reason() != "cookie" || q.SetCookie() != nil {
			t.Fatalf("cookie pick: %v %v %s %v", err, q.Endpoint().Addr(), q.Reason(), q.SetCookie())
		}
		q.Done(Result{})
	}
	// Forge: the instance's id with one character changed.
	forged := *p.SetCookie()
	good := e.cluster().makeCookie(want).Value
	ch := byte('A')
	if good[0] == 'A' {
		ch = 'B'
	}
	forged.Value = string(ch) + good[1:]
	req, _ = http.NewRequest(http.MethodGet, "http://x/", nil)
	req.AddCookie(&forged)
	s = e.cluster().NewSelection(req, netip.Addr{})
	q, err := s.Next()
	s.Release()
	if err != nil || q.Reason() == "cookie" || q.SetCookie() == nil {
		t.Fatalf("forged cookie honoured: %v reason %s cookie %v", err, q.Reason(), q.SetCookie())
	}
	q.Done(Result{})
	// The cookie's instance drained: re-issued elsewhere.
	if err := e.reg.SetOverride(want, Override{Drain: true}); err != nil {
		t.Fatal(err)
	}
	req, _ = http.NewRequest(http.MethodGet, "http://x/", nil)
	req.AddCookie(p.SetCookie())
	s = e.cluster().NewSelection(req, netip.Addr{})
	q, err = s.Next()
	s.Release()
	if err != nil || q.Endpoint().Addr() == want || q.SetCookie() == nil {
		t.Fatalf("drained cookie target: %v %s %v", err, q.Endpoint().Addr(), q.SetCookie())
	}
	q.Done(Result{})
}

// A cluster with more sub-clusters than the consistent mode's slot table can
// name (254, one value is the blackhole) is refused at build, naming the
// count and the limit; 254 are accepted.
func TestBuildRefusesTooManySubClusters(t *testing.T) {
	subs := func(n int) []sc {
		out := make([]sc, n)
		for i := range out {
			out[i] = sc{name: fmt.Sprintf("SC%03d", i), weights: []int{1}}
		}
		out[0].weight = 100
		return out
	}
	reg := NewRegistry(RegistryOptions{Now: newClock().Now, Rand: seededRand(1)})
	if _, err := build(snap(1, policy(nil), 0, subs(254)...), reg); err != nil {
		t.Fatalf("254 sub-clusters: %v", err)
	}
	_, err := build(snap(2, policy(nil), 0, subs(255)...), reg)
	if err == nil || !strings.Contains(err.Error(), "subclusters: 255, at most 254") {
		t.Fatalf("255 sub-clusters: %v, want the count and the limit 254", err)
	}
}

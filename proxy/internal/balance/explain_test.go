package balance

import (
	"fmt"
	"net/http"
	"net/netip"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

// firstPick makes the real first pick for (req, ip) on stripe 0 and reports it done.
func firstPick(t *testing.T, c *Cluster, req *http.Request, ip netip.Addr) Pick {
	t.Helper()
	s := c.NewSelection(req, ip)
	defer s.Release()
	p, err := s.Next()
	if err != nil {
		t.Fatalf("pick: %v", err)
	}
	p.Done(Result{Status: 200})
	return p
}

// For algorithms the request does not decide, explain names no instance:
// it lists the available candidates with their effective weights and
// marks the one the next pick takes — and the next real pick takes it.
func TestExplainNonDeterministicListsCandidates(t *testing.T) {
	for _, mode := range []string{config.InstanceWRR, config.InstanceRoundRobin, config.InstanceStaticRR,
		config.InstanceWLC, config.InstanceLeastConn, config.InstanceRandom, config.InstanceP2CEWMA, config.InstanceWLCRandom} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, snap(1, modePolicy(mode), 0, sc{name: "A", weight: 100, weights: []int{1, 3, 0, 2}, states: map[int]string{3: config.StateUnhealthy}}))
			c := e.cluster()
			ip := netip.MustParseAddr("192.0.2.10")
			for round := range 12 {
				ex := c.Explain(nil, ip)
				if ex.Deterministic || ex.Instance != "" {
					t.Fatalf("round %d: %s explained as deterministic (%q)", round, mode, ex.Instance)
				}
				if ex.SubCluster != "A" || len(ex.Candidates) != 2 {
					t.Fatalf("round %d: subcluster %q candidates %+v, want A with instances 0 and 1", round, ex.SubCluster, ex.Candidates)
				}
				for i, want := range []struct {
					addr string
					w    int
				}{{inst(1, 0).String(), 1}, {inst(1, 1).String(), 3}} {
					if got := ex.Candidates[i]; got.Addr != want.addr || got.Weight != want.w {
						t.Fatalf("candidate %d = %+v, want %s weight %d", i, got, want.addr, want.w)
					}
				}
				next := ""
				for _, cd := range ex.Candidates {
					if cd.Next {
						if next != "" {
							t.Fatalf("two candidates marked next: %+v", ex.Candidates)
						}
						next = cd.Addr
					}
				}
				p := firstPick(t, c, nil, ip)
				drawn := mode == config.InstanceRandom || mode == config.InstanceP2CEWMA || mode == config.InstanceWLCRandom
				switch {
				case drawn && next != "":
					t.Fatalf("%s draws: explain must not mark a next pick (%s)", mode, next)
				case !drawn && next != p.Endpoint().Addr().String():
					t.Fatalf("round %d: explain's next %q, the real pick went to %s", round, next, p.Endpoint().Addr())
				}
			}
		})
	}
}

// For hashing algorithms the instance explain names is the one real
// requests go to, key after key.
func TestExplainDeterministicMatchesRealPick(t *testing.T) {
	cases := []struct {
		mode string
		mut  func(*config.Policy)
	}{
		{config.InstanceSticky, func(p *config.Policy) { p.Balance.Hash = config.Hash{Key: config.HashHeader, Header: "X-User"} }},
		{config.InstanceSticky, nil},
		{config.InstanceSource, nil},
		{"source/consistent", nil},
		{config.InstanceFirst, nil},
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			pol := modePolicy(tc.mode)
			if tc.mut != nil {
				tc.mut(&pol)
			}
			e := newEnv(t, snap(1, pol, 10, sc{name: "A", weight: 50, weights: []int{1, 2, 3, 4}}, sc{name: "B", weight: 40, weights: []int{5, 1}}))
			c := e.cluster()
			blackholed := 0
			for k := range 200 {
				req, _ := http.NewRequest(http.MethodGet, "http://demo.test/", nil)
				req.Header.Set("X-User", fmt.Sprint("user-", k))
				ip := netip.AddrFrom4([4]byte{198, 51, byte(k >> 8), byte(k)})
				ex := c.Explain(req, ip)
				if !ex.Deterministic {
					t.Fatalf("key %d: not deterministic: %+v", k, ex)
				}
				s := c.NewSelection(req, ip)
				p, err := s.Next()
				switch {
				case ex.Blackhole:
					blackholed++
					if err != ErrBlackhole {
						t.Fatalf("key %d: explain says blackhole, the pick: %v", k, err)
					}
				case err != nil:
					t.Fatalf("key %d: %v", k, err)
				case p.Endpoint().Addr().String() != ex.Instance || p.SubCluster() != ex.SubCluster:
					t.Fatalf("key %d: explain %s/%s, real pick %s/%s", k, ex.SubCluster, ex.Instance, p.SubCluster(), p.Endpoint().Addr())
				default:
					p.Done(Result{Status: 200})
				}
				s.Release()
			}
			if blackholed == 0 || blackholed > 50 {
				t.Fatalf("%d of 200 keys blackholed, want about 10 %%", blackholed)
			}
		})
	}
}

// When each request draws its sub-cluster (request mode, or an empty key)
// explain gives the shares and every candidate, and names nothing.
func TestExplainDrawnSubCluster(t *testing.T) {
	pol := policy(func(p *config.Policy) {
		p.Balance.SubclusterMode = config.SubclusterRequest
		p.Balance.Instance = config.InstanceSticky
	})
	e := newEnv(t, snap(1, pol, 20, sc{name: "A", weight: 40, weights: []int{1, 1}}, sc{name: "B", weight: 40, weights: []int{1}}))
	ex := e.cluster().Explain(nil, netip.MustParseAddr("192.0.2.1"))
	if ex.Deterministic || ex.SubCluster != "" || ex.Instance != "" || ex.Blackhole {
		t.Fatalf("request mode explained as decided: %+v", ex)
	}
	want := map[string]float64{config.Blackhole: 20, "A": 40, "B": 40}
	if fmt.Sprint(ex.Shares) != fmt.Sprint(want) {
		t.Fatalf("shares %v, want %v", ex.Shares, want)
	}
	if len(ex.Candidates) != 3 || ex.Candidates[0].SubCluster != "A" || ex.Candidates[2].SubCluster != "B" {
		t.Fatalf("candidates %+v, want A's two and B's one", ex.Candidates)
	}
}

// Explain changes nothing a request sees: no in-flight count, no schedule
// cursor, no tie-break rotation, no random draw.
func TestExplainChangesNothing(t *testing.T) {
	for _, mode := range allInstanceModes {
		t.Run(mode, func(t *testing.T) {
			draws := 0
			e := newEnv(t, snap(1, modePolicy(mode), 10, sc{name: "A", weight: 90, weights: []int{1, 2, 3}}))
			inner := e.reg.rand
			e.reg.rand = func() uint64 { draws++; return inner() }
			c := e.cluster()
			g := c.subs[0]
			before := g.currentView().sched.cursors[0].n.Load()
			for range 10 {
				c.Explain(nil, netip.MustParseAddr("192.0.2.1"))
				c.Explain(nil, netip.Addr{})
			}
			if after := g.currentView().sched.cursors[0].n.Load(); after != before || g.rr.Load() != 0 || draws != 0 {
				t.Fatalf("explain moved state: cursor %d → %d, rotation %d, %d random draws", before, after, g.rr.Load(), draws)
			}
			for i := range g.members {
				if n := g.members[i].ep.InFlight(); n != 0 {
					t.Fatalf("member %d: %d in flight after explain", i, n)
				}
			}
		})
	}
}

// With fail_fast, a sub-cluster with nothing available keeps its share
// (answered 503), the others are not scaled up; without it the share
// spreads over the available ones.
func TestExplainSharesFailFast(t *testing.T) {
	down := map[int]string{0: config.StateUnhealthy}
	for _, ff := range []bool{true, false} {
		pol := policy(func(p *config.Policy) {
			p.Balance.SubclusterMode = config.SubclusterRequest
			p.Balance.FailFast = ff
		})
		e := newEnv(t, snap(1, pol, 20, sc{name: "A", weight: 40, weights: []int{1, 1}}, sc{name: "B", weight: 40, weights: []int{1}, states: down}))
		ex := e.cluster().Explain(nil, netip.MustParseAddr("192.0.2.1"))
		want := map[string]float64{config.Blackhole: 20, "A": 80, "B": 0}
		if ff {
			want["A"] = 40
		}
		if fmt.Sprint(ex.Shares) != fmt.Sprint(want) {
			t.Fatalf("fail_fast %v: shares %v, want %v", ff, ex.Shares, want)
		}
	}
}

// When no weighted sub-cluster has an available instance the request goes
// straight to a cross retry: explain says so and lists the standby's
// instances.
func TestExplainSpillToStandby(t *testing.T) {
	down := map[int]string{0: config.StateUnhealthy, 1: config.StateUnhealthy}
	e := newEnv(t, snap(1, retryPolicy(), 0,
		sc{name: "SC1", weight: 100, weights: []int{1, 1}, states: down},
		sc{name: "SC2", weight: 0, weights: []int{1, 1}}))
	ex := e.cluster().Explain(nil, keyIP(1))
	if !ex.Cross || ex.Reason != "cross-retry" || ex.Error != "" || len(ex.Candidates) != 2 ||
		ex.Candidates[0].SubCluster != "SC2" || ex.Candidates[1].SubCluster != "SC2" {
		t.Fatalf("spill explained as %+v, want a cross retry over SC2's two instances", ex)
	}
}

// One available instance takes the pick whatever the algorithm, and explain
// says that is why (not "first", though first would choose it too).
func TestExplainOnlyAvailable(t *testing.T) {
	e := newEnv(t, snap(1, modePolicy(config.InstanceFirst), 0,
		sc{name: "A", weight: 100, weights: []int{1, 1}, states: map[int]string{1: config.StateUnhealthy}}))
	ex := e.cluster().Explain(nil, keyIP(1))
	if !ex.Deterministic || ex.Instance != inst(1, 0).String() || ex.InstanceBy != "only-available" {
		t.Fatalf("explained as %+v, want %s by only-available", ex, inst(1, 0))
	}
}

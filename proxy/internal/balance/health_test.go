package balance

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/testkit/poll"
)

func fail(p Pick) { p.Done(Result{Err: errors.New("refused"), Kind: KindConnect}) }

// BFE state machine with injected time: fail_num failures → CHECKING
// (excluded), succ_num probe successes → NORMAL with slow start from the floor
// to the current weight; LocalLimit never counts; outlier statuses do.
func TestHealthStateMachineAndSlowStart(t *testing.T) {
	pol := policy(func(p *config.Policy) {
		p.Health.FailNum, p.Health.SuccNum = 3, 2
		p.Health.OutlierStatus = "502|503"
		p.Health.MaxEjectionPercent = 100
		p.SlowStart = config.SlowStart{Window: config.Duration(100 * time.Second), FloorPercent: 10}
	})
	e := newEnv(t, snap(1, pol, 0, sc{name: "A", weight: 100, weights: []int{10, 10}}))
	ep := e.reg.Endpoint(inst(1, 0))
	c := e.cluster()
	mk := func() Pick { return Pick{ep: ep, g: c.subs[0]} }
	ep.load[0].n.Add(6)
	mk().Done(Result{Kind: KindLocalLimit, Err: errors.New("pool full")})
	mk().Done(Result{Kind: KindLocalLimit, Err: errors.New("pool full")})
	fail(mk())
	fail(mk())
	mk().Done(Result{Kind: KindStatus, Status: 404}) // not an outlier: success, resets
	if ep.consecFails.Load() != 0 || ep.Health() != Normal {
		t.Fatalf("after non-outlier status: fails %d state %s", ep.consecFails.Load(), ep.Health())
	}
	fail(mk())
	fail(mk())
	if n := e.reg.Ejections(); n != 0 {
		t.Fatalf("%d ejections before fail_num failures", n)
	}
	mk().Done(Result{Kind: KindStatus, Status: 503})
	if ep.Health() != Checking {
		t.Fatalf("state %s, want CHECKING", ep.Health())
	}
	if n := e.reg.Ejections(); n != 1 {
		t.Fatalf("ejections = %d, want 1", n)
	}
	for range 50 {
		if p, err := e.pick(netip.Addr{}); err != nil || p.Endpoint() == ep {
			t.Fatalf("CHECKING instance picked (%v)", err)
		}
	}
	if ep.probeResult(true, e.clock.Now()); ep.Health() != Checking {
		t.Fatal("one probe success of succ_num 2 recovered it")
	}
	ep.probeResult(false, e.clock.Now()) // resets the success count
	ep.probeResult(true, e.clock.Now())
	if ep.probeResult(true, e.clock.Now()) != true || ep.Health() != Normal {
		t.Fatalf("state %s after succ_num successes", ep.Health())
	}
	e.reg.bump()
	share := func() float64 {
		n := 0
		for range 1000 {
			p, err := e.pick(netip.Addr{})
			if err != nil {
				t.Fatal(err)
			}
			if p.Endpoint() == ep {
				n++
			}
		}
		return float64(n) / 1000
	}
	// At the floor: weight 1 vs 10.
	if got := share(); got < 0.08 || got > 0.10 {
		t.Fatalf("share at ramp start %.3f, want 1/11", got)
	}
	if w := c.subs[0].currentView().weights[0]; w != 1 {
		t.Fatalf("floor weight %d, want 1 (10 %% of 10, never 0)", w)
	}
	e.clock.Add(50 * time.Second) // halfway: floor + (1-floor)/2 = 55 % → 5
	if w := c.subs[0].currentView().weights[0]; w != 5 {
		t.Fatalf("half-ramp weight %d, want 5", w)
	}
	// The ramp targets the CURRENT weight: reweight to 20 mid-ramp.
	e.apply(snap(2, pol, 0, sc{name: "A", weight: 100, weights: []int{20, 10}}))
	c = e.cluster()
	if w := c.subs[0].currentView().weights[0]; w != 11 {
		t.Fatalf("half-ramp weight after reweight %d, want 11 (55 %% of 20)", w)
	}
	e.clock.Add(51 * time.Second)
	if w := c.subs[0].currentView().weights[0]; w != 20 {
		t.Fatalf("weight after the window %d, want 20", w)
	}
	if !c.subs[0].currentView().full {
		t.Fatal("after the ramp the lock-free base schedule must be back in use")
	}
}

func TestMaxEjectionAndPanic(t *testing.T) {
	pol := policy(func(p *config.Policy) { p.Health.FailNum = 1; p.Health.MaxEjectionPercent = 25 })
	e := newEnv(t, snap(1, pol, 0, sc{name: "A", weight: 100, weights: []int{1, 1, 1, 1, 1, 1, 1, 1}}))
	c := e.cluster()
	for i := range 8 {
		e.clock.Add(time.Second)
		fail(Pick{ep: e.reg.Endpoint(inst(1, i)), g: c.subs[0]})
	}
	v := c.subs[0].currentView()
	if v.nAvail != 6 || v.avail[0] || v.avail[1] {
		t.Fatalf("max_ejection 25 %% of 8: available %d %v, want the two earliest ejected out", v.nAvail, v.avail)
	}
	// Panic: with 1 of 4 healthy (< 50 %) health is ignored.
	pol2 := policy(func(p *config.Policy) {
		p.Health.FailNum = 1
		p.Health.MaxEjectionPercent = 100
		p.Health.PanicPercent = 50
	})
	e2 := newEnv(t, snap(1, pol2, 0, sc{name: "A", weight: 100, weights: []int{1, 1, 1, 1}}))
	c2 := e2.cluster()
	for i := range 3 {
		fail(Pick{ep: e2.reg.Endpoint(inst(1, i)), g: c2.subs[0]})
	}
	if v := c2.subs[0].currentView(); !v.panic || v.nAvail != 4 {
		t.Fatalf("panic mode: panic=%v available=%d", v.panic, v.nAvail)
	}
}

func TestOverrideTTL(t *testing.T) {
	e := newEnv(t, snap(1, policy(nil), 0, sc{name: "A", weight: 100, weights: []int{1, 1}}))
	w := 3
	if err := e.reg.SetOverride(inst(1, 0), Override{Weight: &w, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if got := e.cluster().subs[0].currentView().weights[0]; got != 3 {
		t.Fatalf("override weight %d", got)
	}
	bad := -1
	if err := e.reg.SetOverride(inst(1, 0), Override{Weight: &bad}); err == nil {
		t.Fatal("negative weight accepted")
	}
	if err := e.reg.SetOverride(netip.MustParseAddrPort("1.2.3.4:5"), Override{Drain: true}); !errors.Is(err, ErrUnknownAddress) {
		t.Fatalf("unknown address: %v", err)
	}
	e.clock.Add(time.Minute)
	if got := e.cluster().subs[0].currentView().weights[0]; got != 1 {
		t.Fatalf("weight after TTL %d, want 1", got)
	}
	if len(e.reg.Overrides()) != 0 {
		t.Fatal("expired override still listed")
	}
}

// Run owns one probe loop per CHECKING address against a real HTTP server;
// the loop stops when the address recovers, and everything stops with ctx.
func TestRunProbesCheckingAddress(t *testing.T) {
	var healthy atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" && healthy.Load() {
			w.WriteHeader(204)
			return
		}
		w.WriteHeader(500)
	}))
	defer srv.Close()
	addr := netip.MustParseAddrPort(srv.Listener.Addr().String())
	pol := policy(func(p *config.Policy) {
		p.Health.FailNum, p.Health.SuccNum = 1, 1
		p.Health.CheckInterval = config.Duration(5 * time.Millisecond)
		p.Health.Probe.Status = "2xx"
	})
	s := snap(1, pol, 0, sc{name: "A", weight: 100, weights: []int{1}})
	cl := s.Clusters["demo"]
	cl.SubClusters["A"] = config.SubCluster{Instances: []config.Instance{{Addr: addr.Addr().String(), Port: int(addr.Port()), Weight: 1}}}
	r := NewRegistry(RegistryOptions{})
	tb, err := build(s, r)
	if err != nil {
		t.Fatal(err)
	}
	var h Holder
	h.Store(tb)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	sel := h.Load().Cluster("demo").NewSelection(nil, netip.Addr{})
	p, err := sel.Next()
	sel.Release()
	if err != nil {
		t.Fatal(err)
	}
	fail(p)
	ep := r.Endpoint(addr)
	if ep.Health() != Checking {
		t.Fatalf("state %s", ep.Health())
	}
	// A probe against the 500-answering backend must not recover it.
	if err := r.ProbeOnce(ctx, addr); err == nil || ep.Health() != Checking {
		t.Fatalf("probe of a 500 backend: err %v state %s", err, ep.Health())
	}
	healthy.Store(true)
	poll.EventuallyTrue(t, 10*time.Second, "probe recovery", func() bool { return ep.Health() == Normal })
	// Released address: the next table does not reference it.
	h.Store(mustBuild(t, snap(2, pol, 0, sc{name: "A", weight: 100, weights: []int{1}}), r))
	poll.EventuallyTrue(t, 10*time.Second, "release", func() bool { return r.Endpoint(addr) == nil })
}

func mustBuild(t *testing.T, s interface{}, r *Registry) *Table {
	t.Helper()
	tb, err := build(s.(*snapshot.Snapshot), r)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// A failure run is global to the address whatever the stripes of the picks:
// a success on one stripe ends a run counted on others, and fail_num
// consecutive failures on mixed stripes eject.
func TestFailureRunAcrossStripes(t *testing.T) {
	pol := policy(func(p *config.Policy) { p.Health.FailNum = 3 })
	e := newEnv(t, snap(1, pol, 0, sc{name: "A", weight: 100, weights: []int{1}}))
	c := e.cluster()
	ep := e.reg.Endpoint(inst(1, 0))
	var s Selection
	attempt := func(stripe uint32, ok bool) {
		t.Helper()
		c.Start(&s, nil, netip.MustParseAddr("192.0.2.1"), stripe)
		p, err := s.Next()
		if err != nil {
			t.Fatalf("pick on stripe %d: %v", stripe, err)
		}
		if ok {
			p.Done(Result{Status: 200})
		} else {
			fail(p)
		}
		s.Release()
	}
	attempt(0, false)
	attempt(1, false)
	attempt(2, true) // ends the run of two
	attempt(3, false)
	attempt(0, false)
	if h := ep.Health(); h != Normal {
		t.Fatalf("health after 2+2 failures split by a success = %s, want NORMAL", h)
	}
	attempt(1, false) // third in a row, on yet another stripe
	if h := ep.Health(); h != Checking {
		t.Fatalf("health after 3 consecutive failures on 3 stripes = %s, want CHECKING", h)
	}
	if n := ep.InFlight(); n != 0 {
		t.Fatalf("in flight after every Done = %d, want 0", n)
	}
}

// With panic on, a sub-cluster with no healthy member leaves its share to
// the others; once no sub-cluster of the cluster has one, every one
// ignores health (the row still splits) instead of answering 503, and the
// first recovery ends it. With panic off, all down is ErrNoAvailable.
func TestClusterWidePanic(t *testing.T) {
	for _, tc := range []struct {
		name  string
		panic int
	}{{"panic on", 50}, {"panic off", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			pol := policy(func(p *config.Policy) {
				p.Health.FailNum = 1
				p.Health.MaxEjectionPercent = 100
				p.Health.PanicPercent = tc.panic
			})
			e := newEnv(t, snap(1, pol, 0,
				sc{name: "A", weight: 70, weights: []int{1, 1}},
				sc{name: "B", weight: 30, weights: []int{1, 1}}))
			c := e.cluster()
			split := func() (map[string]int, error) {
				n := map[string]int{}
				for range 1000 {
					p, err := e.pick(netip.Addr{})
					if err != nil {
						return n, err
					}
					n[p.SubCluster()]++
				}
				return n, nil
			}
			for i := range 2 {
				fail(Pick{ep: e.reg.Endpoint(inst(1, i)), g: c.subs[0]})
			}
			n, err := split()
			if err != nil || n["B"] != 1000 {
				t.Fatalf("A down: split %v (%v), want all 1000 in B", n, err)
			}
			if v := c.subs[0].currentView(); v.panic || v.nAvail != 0 {
				t.Fatalf("A down, B healthy: A panic=%v available=%d, want no panic and none", v.panic, v.nAvail)
			}
			for i := range 2 {
				fail(Pick{ep: e.reg.Endpoint(inst(2, i)), g: c.subs[1]})
			}
			n, err = split()
			if tc.panic == 0 {
				if !errors.Is(err, ErrNoAvailable) {
					t.Fatalf("all down without panic: %v after %v, want ErrNoAvailable", err, n)
				}
				return
			}
			if err != nil || n["A"] < 650 || n["A"] > 750 || n["A"]+n["B"] != 1000 {
				t.Fatalf("all down with panic: split %v (%v), want about 700/300 by the row", n, err)
			}
			for gi := range c.subs {
				if v := c.subs[gi].currentView(); !v.panic || v.nAvail != 2 {
					t.Fatalf("sub-cluster %d: panic=%v available=%d, want panic with both", gi, v.panic, v.nAvail)
				}
			}
			// One instance of B recovers: A is plain down again, B serves.
			ep := e.reg.Endpoint(inst(2, 0))
			ep.probeResult(true, e.clock.Now())
			e.reg.bump()
			n, err = split()
			if err != nil || n["B"] != 1000 {
				t.Fatalf("after B recovered: split %v (%v), want all in B", n, err)
			}
			if v := c.subs[0].currentView(); v.panic {
				t.Fatal("A still in panic with a healthy instance in B")
			}
		})
	}
}

// ClearOverride ends an override at once (the drained instance is
// available again); clearing none is not an error; an address the registry
// does not know is ErrUnknownAddress, naming it.
func TestClearOverride(t *testing.T) {
	e := newEnv(t, snap(1, policy(nil), 0, sc{name: "A", weight: 100, weights: []int{1, 1}}))
	if err := e.reg.SetOverride(inst(1, 0), Override{Drain: true}); err != nil {
		t.Fatal(err)
	}
	if v := e.cluster().subs[0].currentView(); v.avail[0] || v.nAvail != 1 {
		t.Fatalf("drained: available %v (%d)", v.avail, v.nAvail)
	}
	for range 2 {
		if err := e.reg.ClearOverride(inst(1, 0)); err != nil {
			t.Fatalf("clear override: %v", err)
		}
	}
	if v := e.cluster().subs[0].currentView(); !v.avail[0] || v.nAvail != 2 || len(e.reg.Overrides()) != 0 {
		t.Fatalf("after clear: available %v (%d), overrides %v", v.avail, v.nAvail, e.reg.Overrides())
	}
	err := e.reg.ClearOverride(netip.MustParseAddrPort("1.2.3.4:5"))
	if !errors.Is(err, ErrUnknownAddress) || !strings.Contains(err.Error(), "1.2.3.4:5") {
		t.Fatalf("unknown address: %v", err)
	}
}

// An address a new table drops while a request to it is in flight stays
// in the registry until that request is Done, then is swept (no leak of
// dropped addresses, no endpoint freed under a request).
func TestDroppedAddressSweptAfterLastRequest(t *testing.T) {
	e := newEnv(t, snap(1, policy(nil), 0, sc{name: "A", weight: 100, weights: []int{1, 1}}))
	gone := inst(1, 1)
	var held Pick
	for k := 0; held.Endpoint() == nil; k++ {
		if k == 100 {
			t.Fatalf("100 picks never chose %s", gone)
		}
		s := e.cluster().NewSelection(nil, keyIP(k))
		p, err := s.Next()
		s.Release()
		if err != nil {
			t.Fatal(err)
		}
		if p.Endpoint().Addr() == gone {
			held = p
		} else {
			p.Done(Result{Status: 200})
		}
	}
	e.apply(snap(2, policy(nil), 0, sc{name: "A", weight: 100, weights: []int{1}}))
	if e.reg.Endpoint(gone) == nil {
		t.Fatalf("%s swept with a request in flight", gone)
	}
	held.Done(Result{Status: 200})
	if ep := e.reg.Endpoint(gone); ep != nil {
		t.Fatalf("%s still in the registry after its last request (in flight %d)", gone, ep.InFlight())
	}
	if e.reg.Endpoint(inst(1, 0)) == nil {
		t.Fatalf("%s, still in the table, swept", inst(1, 0))
	}
}

// TestEffectiveWeightsDemoteAndRecover: with effective_weights, each
// passive failure lowers an instance's weight by max(1, base/fail_num)
// (never below 1) and each success raises it by one until it is the
// configured weight again; the view's weight follows exactly.
func TestEffectiveWeightsDemoteAndRecover(t *testing.T) {
	pol := policy(func(p *config.Policy) {
		p.Balance.EffectiveWeights = true
		p.Health.FailNum = 3
	})
	e := newEnv(t, snap(1, pol, 0, sc{name: "A", weight: 100, weights: []int{30, 5}}))
	ep, other := e.reg.Endpoint(inst(1, 0)), e.reg.Endpoint(inst(1, 1))
	weight := func(i int) int64 { return int64(e.cluster().subs[0].currentView().weights[i]) }
	step := func(what string, changed bool, want0, want1 int64) {
		t.Helper()
		if changed {
			e.reg.bump()
		}
		if w0, w1 := weight(0), weight(1); w0 != want0 || w1 != want1 {
			t.Fatalf("after %s: weights %d, %d; want %d, %d", what, w0, w1, want0, want1)
		}
	}
	now := e.clock.Now()
	// base 30, fail_num 3: a step of 10; two failures stay under fail_num.
	step("failure 1", ep.reportFailure(now), 20, 5)
	step("failure 2", ep.reportFailure(now), 10, 5)
	for k := 1; k <= 20; k++ {
		want := min(10+int64(k), 30)
		step(fmt.Sprintf("success %d", k), ep.reportSuccess(&ep.load[0], e.reg), want, 5)
	}
	if ep.reportSuccess(&ep.load[0], e.reg) {
		t.Fatal("a success at the configured weight reported a change")
	}
	// base 5: a step of max(1, 5/3) = 1, and never below 1.
	step("other failure 1", other.reportFailure(now), 30, 4)
	step("other failure 2", other.reportFailure(now), 30, 3)
	other.endFailureRun() // a success between: the run starts again, not the weight
	step("other failure 3", other.reportFailure(now), 30, 2)
	step("other failure 4", other.reportFailure(now), 30, 1)
	other.endFailureRun()
	step("other failure 5", other.reportFailure(now), 30, 1)
}

package balance

import (
	"math"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
)

// denseModes are the algorithms whose groups read their members' records
// (loadRec): p2c-ewma and random(N > 1).
var denseModes = []string{config.InstanceP2CEWMA, "random(2)", "random(3)"}

// checkRecords fails unless every cell copy of every record the current
// table's dense groups read equals its cell: the copy is not stale.
func checkRecords(t *testing.T, e *env, when string) {
	t.Helper()
	for _, c := range e.h.Load().clusters {
		for _, g := range c.subs {
			if !g.dense.Load() {
				continue
			}
			for i := range g.members {
				ep := g.members[i].ep
				for k := range ep.load {
					if got, want := int64(ep.rec.cells[k].Load()), ep.load[k].n.Load(); got != want {
						t.Fatalf("%s: %s/%s member %d (%s) cell %d: record %d, cell %d", when, c.name, g.name, i, ep.Addr(), k, got, want)
					}
				}
			}
		}
	}
}

// The first pick of a dense group (drawLeast: candidates, records) makes
// the choice the general path (weightedIn, the endpoints' cells) makes,
// draw for draw: two registries with one seeded source, one of them with
// its groups' dense reads switched off, see the same picks under a load
// that moves (picks held and released out of order, latencies folded
// into p2c's EWMA) — and the records equal the cells after every step.
func TestDenseDrawMatchesGeneralPath(t *testing.T) {
	weights := make([]int, 40)
	for i := range weights {
		weights[i] = 1 + i%4
	}
	weights[7] = 0 // never drawn
	for _, mode := range denseModes {
		t.Run(mode, func(t *testing.T) {
			s := snap(1, modePolicy(mode), 0, sc{name: "A", weight: 100, weights: weights})
			dense := newEnvRand(t, s, seededRand(11))
			general := newEnvRand(t, s, seededRand(11))
			for _, g := range general.cluster().subs {
				g.dense.Store(false)
			}
			if !dense.cluster().subs[0].dense.Load() {
				t.Fatal("a dense algorithm's group is not dense")
			}
			rnd := rand.New(rand.NewPCG(3, 4))
			ip := netip.MustParseAddr("192.0.2.1")
			type held struct{ d, g Pick }
			var out []held
			for k := range 4000 {
				var sd, sg Selection
				dense.cluster().Start(&sd, nil, ip, uint32(k))
				general.cluster().Start(&sg, nil, ip, uint32(k))
				pd, errd := sd.Next()
				pg, errg := sg.Next()
				if errd != nil || errg != nil {
					t.Fatalf("pick %d: %v / %v", k, errd, errg)
				}
				if pd.Endpoint().Addr() != pg.Endpoint().Addr() {
					t.Fatalf("pick %d: dense path picked %s, general path %s", k, pd.Endpoint().Addr(), pg.Endpoint().Addr())
				}
				if pd.Endpoint().Addr() == inst(1, 7) {
					t.Fatalf("pick %d: a member of weight 0 was picked", k)
				}
				sd.Release()
				sg.Release()
				out = append(out, held{pd, pg})
				for len(out) > 30 || len(out) > 0 && rnd.IntN(3) == 0 {
					j := rnd.IntN(len(out))
					lat := time.Duration(1+rnd.IntN(50)) * time.Millisecond
					out[j].d.Done(Result{Status: 200, Latency: lat})
					out[j].g.Done(Result{Status: 200, Latency: lat})
					out = append(out[:j], out[j+1:]...)
				}
				checkRecords(t, dense, "after a step")
			}
		})
	}
}

// A dense group's picks steer by the records: with one of two members
// holding picks, p2c and random(2) never choose it once both are drawn —
// a record that missed the acquires (or still held the releases) would.
func TestDenseRecordSteers(t *testing.T) {
	for _, mode := range denseModes[:2] {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, snap(1, modePolicy(mode), 0, sc{name: "A", weight: 100, weights: []int{1, 1}}))
			busy := e.reg.Endpoint(inst(1, 0))
			var held []Pick
			for len(held) < 3 {
				var s Selection
				e.cluster().Start(&s, nil, netip.MustParseAddr("192.0.2.9"), 0)
				p, err := s.Next()
				if err != nil {
					t.Fatal(err)
				}
				if p.Endpoint() == busy {
					held = append(held, p)
				} else {
					p.Done(Result{Status: 200})
				}
				s.Release()
			}
			checkRecords(t, e, "held")
			n := 0
			for range 400 {
				var s Selection
				e.cluster().Start(&s, nil, netip.MustParseAddr("192.0.2.9"), 0)
				p, err := s.Next()
				if err != nil {
					t.Fatal(err)
				}
				if p.Endpoint() == busy {
					n++
				}
				p.Done(Result{Status: 200})
				s.Release()
			}
			// Only when both draws land on it: 1/4 of the picks (100 ± 30).
			if n > 140 {
				t.Fatalf("busy member picked %d times of 400: the record does not hold its load", n)
			}
			for _, p := range held {
				p.Done(Result{Status: 200})
			}
			checkRecords(t, e, "released")
			n = 0
			for range 400 {
				if p, _ := e.pick(netip.MustParseAddr("192.0.2.9")); p.Endpoint() == busy {
					n++
				}
			}
			if n < 140 {
				t.Fatalf("released member picked %d times of 400: the record still holds its releases", n)
			}
		})
	}
}

// Concurrent picks and releases on every stripe, while tables come and go
// (p2c-ewma, wrr, random(2) over overlapping members, and a wlc cluster
// sharing the addresses, whose tree's own acquire copies too): at rest
// every record equals its cells, and with picks held too. Run under -race.
func TestDenseRecordsConcurrent(t *testing.T) {
	mk := func(v uint64, mode string, n int) *snapshot.Snapshot {
		ws := make([]int, n)
		for i := range ws {
			ws[i] = 1 + i%3
		}
		s := snap(v, modePolicy(mode), 0, sc{name: "A", weight: 50, weights: ws}, sc{name: "B", weight: 50, weights: ws[:n/2]})
		other := s.Clusters["demo"]
		other.Policy = modePolicy(config.InstanceWLC)
		s.Clusters["other"] = other
		return s
	}
	e := newEnvRand(t, mk(1, config.InstanceP2CEWMA, 64), nil)
	modes := []string{config.InstanceWRR, "random(2)", config.InstanceP2CEWMA}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 9))
			var out []Pick
			for k := 0; ; k++ {
				select {
				case <-stop:
					for _, p := range out {
						p.Done(Result{Status: 200})
					}
					return
				default:
				}
				name := "demo"
				if k%3 == 0 {
					name = "other"
				}
				var s Selection
				ip := netip.AddrFrom4([4]byte{192, 0, 2, byte(rnd.IntN(256))})
				e.h.Load().Cluster(name).Start(&s, nil, ip, uint32(w+k))
				if p, err := s.Next(); err == nil {
					out = append(out, p)
				}
				s.Release()
				for len(out) > 8 || len(out) > 0 && rnd.IntN(2) == 0 {
					j := rnd.IntN(len(out))
					out[j].Done(Result{Status: 200, Latency: time.Millisecond})
					out = append(out[:j], out[j+1:]...)
				}
			}
		}()
	}
	for v := range 60 {
		e.apply(mk(uint64(v+2), modes[v%len(modes)], 40+v%30))
		time.Sleep(time.Millisecond)
	}
	e.apply(mk(100, config.InstanceP2CEWMA, 64))
	time.Sleep(5 * time.Millisecond)
	close(stop)
	wg.Wait()
	checkRecords(t, e, "at rest")
	for _, ep := range e.h.Load().endpoints {
		if ep.InFlight() != 0 || ep.rec.inFlight() != 0 {
			t.Fatalf("%s: in flight %d, record %d after every release", ep.Addr(), ep.InFlight(), ep.rec.inFlight())
		}
	}
	var held []Pick
	for k := range 50 {
		var s Selection
		e.cluster().Start(&s, nil, netip.AddrFrom4([4]byte{192, 0, 2, byte(k)}), uint32(k))
		if p, err := s.Next(); err == nil {
			held = append(held, p)
		}
		s.Release()
	}
	checkRecords(t, e, "held")
	for _, p := range held {
		p.Done(Result{Status: 200})
	}
	checkRecords(t, e, "released")
}

// Making a group dense copies the counts already in flight: picks held
// through a wrr table (no record kept), then a p2c table over the same
// addresses reads them; and releases made while no dense group held the
// addresses are seen when one holds them again.
func TestDenseEnableCopiesHeld(t *testing.T) {
	ws := []int{1, 2, 3, 4}
	e := newEnv(t, snap(1, modePolicy(config.InstanceWRR), 0, sc{name: "A", weight: 100, weights: ws}))
	hold := func() []Pick {
		var held []Pick
		for k := range 10 {
			var s Selection
			e.cluster().Start(&s, nil, netip.MustParseAddr("192.0.2.1"), uint32(k))
			p, err := s.Next()
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, p)
			s.Release()
		}
		return held
	}
	held := hold()
	e.apply(snap(2, modePolicy(config.InstanceP2CEWMA), 0, sc{name: "A", weight: 100, weights: ws}))
	checkRecords(t, e, "p2c after wrr's picks")
	more := hold()
	e.apply(snap(3, modePolicy(config.InstanceWRR), 0, sc{name: "A", weight: 100, weights: ws}))
	for _, p := range append(held, more[:5]...) {
		p.Done(Result{Status: 200})
	}
	e.apply(snap(4, modePolicy("random(2)"), 0, sc{name: "A", weight: 100, weights: ws}))
	checkRecords(t, e, "random(2) after releases under wrr")
	for _, p := range more[5:] {
		p.Done(Result{Status: 200})
	}
	checkRecords(t, e, "all released")
}

// The production source (RegistryOptions.Rand nil: Selection.rand, a
// wyrand per Selection seeded from the runtime's per-thread one) draws in
// proportion to the weights, over fresh Selections and over one started
// again and again: random's shares of an idle group over several stripes
// are within 3 % (relative; 5 σ for the rarest) of the weight shares,
// p2c-ewma's of the two-draw shares (the heavier of two draws wins an
// idle group: p_i² + 2 p_i Σ_{w_j < w_i} p_j), and every bit of the words
// is set about half the time.
func TestSelectionRandDraws(t *testing.T) {
	ws := []int{1, 2, 3, 4, 5, 6}
	total := 21
	for _, mode := range []string{config.InstanceRandom, config.InstanceP2CEWMA} {
		e := newEnvRand(t, snap(1, modePolicy(mode), 0, sc{name: "A", weight: 100, weights: ws}), nil)
		if e.reg.ownRand {
			t.Fatal("a registry without Rand draws from it")
		}
		const picks = 210000
		counts := map[netip.AddrPort]int{}
		var bits [64]int
		var reused Selection // the server's way: one Selection, started again and again
		for k := range picks {
			var fresh Selection
			s := &fresh
			if k%2 == 1 {
				s = &reused
			}
			e.cluster().Start(s, nil, netip.MustParseAddr("192.0.2.1"), uint32(k))
			if k < 20000 {
				w := s.rand()
				for b := range bits {
					bits[b] += int(w >> b & 1)
				}
			}
			p, err := s.Next()
			if err != nil {
				t.Fatal(err)
			}
			counts[p.Endpoint().Addr()]++
			p.Done(Result{Status: 200})
			s.Release()
		}
		for i, w := range ws {
			p := float64(w) / float64(total)
			want := float64(picks) * p
			if mode == config.InstanceP2CEWMA {
				lighter := 0.0
				for _, x := range ws[:i] {
					lighter += float64(x) / float64(total)
				}
				want = float64(picks) * (p*p + 2*p*lighter)
			}
			tol := max(0.03*want, 5*math.Sqrt(want)) // 3 %, or 5 σ for the rarest
			if got := float64(counts[inst(1, i)]); math.Abs(got-want) > tol {
				t.Errorf("%s: member %d (weight %d) picked %.0f times, want %.0f ± %.0f", mode, i, w, got, want, tol)
			}
		}
		for b, n := range bits {
			if n < 9500 || n > 10500 {
				t.Errorf("%s: bit %d set in %d of 20000 words", mode, b, n)
			}
		}
	}
}

// A hashing algorithm's view resolves exactly its available members'
// endpoints (v.eps: set iff v.avail, to the member's endpoint), which a
// first pick takes without reading v.avail: with members unhealthy,
// drained and of weight 0, and after the drain is lifted.
func TestViewEndpointsFollowAvailability(t *testing.T) {
	weights := []int{1, 2, 0, 4, 5, 6}
	for _, mode := range []string{config.InstanceSticky, config.InstanceRingHash, config.InstanceSource, "source/consistent", "uri", "hdr(X-User)", "url_param(uid)/consistent"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, snap(1, modePolicy(mode), 0, sc{name: "A", weight: 100, weights: weights, states: map[int]string{1: config.StateUnhealthy}}))
			check := func(when string) {
				g := e.cluster().subs[0]
				v := g.currentView()
				if v.eps == nil {
					t.Fatalf("%s: no endpoints resolved", when)
				}
				for i, ok := range v.avail {
					if want := map[bool]*Endpoint{true: g.members[i].ep}[ok]; v.eps[i] != want {
						t.Fatalf("%s: member %d (available %v): endpoint %p, want %p", when, i, ok, v.eps[i], want)
					}
				}
				for k := range 300 {
					p, err := e.pick(netip.AddrFrom4([4]byte{198, 51, 100, byte(k)}))
					if err != nil {
						t.Fatal(err)
					}
					for i, ok := range v.avail {
						if !ok && p.Endpoint() == g.members[i].ep {
							t.Fatalf("%s: picked unavailable member %d", when, i)
						}
					}
				}
			}
			if err := e.reg.SetOverride(inst(1, 4), Override{Drain: true}); err != nil {
				t.Fatal(err)
			}
			check("drained")
			if err := e.reg.ClearOverride(inst(1, 4)); err != nil {
				t.Fatal(err)
			}
			check("drain lifted")
		})
	}
}

package balance

import (
	"errors"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/spaolacci/murmur3"

	"github.com/sluicelb/sluice/api/config"
)

// names maps picks of the first sub-cluster to instance names.
func wrrSequence(t *testing.T, weights []int, names []string, states map[int]string, n int) string {
	t.Helper()
	e := newEnv(t, snap(1, policy(nil), 0, sc{name: "A", weight: 100, weights: weights, states: states}))
	var out []string
	for range n {
		p, err := e.pick(netip.MustParseAddr("192.0.2.1"))
		if err != nil {
			t.Fatalf("pick: %v", err)
		}
		for i := range weights {
			if p.Endpoint().Addr() == inst(1, i) {
				out = append(out, names[i])
			}
		}
	}
	return strings.Join(out, " ")
}

func TestVectorSmoothWRR(t *testing.T) {
	cases := []struct {
		name    string
		weights []int
		names   []string
		states  map[int]string
		n       int
		want    string
	}{
		{"a5b1c1", []int{5, 1, 1}, []string{"a", "b", "c"}, nil, 14, "a a b a c a a a a b a c a a"},
		{"b321", []int{3, 2, 1}, []string{"b1", "b2", "b3"}, nil, 6, "b1 b2 b1 b3 b2 b1"},
		{"b321-b1-down", []int{3, 2, 1}, []string{"b1", "b2", "b3"}, map[int]string{0: config.StateUnhealthy}, 6, "b2 b3 b2 b2 b3 b2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := wrrSequence(t, tc.weights, tc.names, tc.states, tc.n); got != tc.want {
				t.Fatalf("sequence = %q, want %q", got, tc.want)
			}
		})
	}
}

// The precomputed schedule equals the classic O(n) smooth WRR, step by step.
func TestScheduleMatchesClassicSmoothWRR(t *testing.T) {
	for _, ws := range [][]int{{5, 1, 1}, {3, 2, 1}, {1, 1, 1, 1}, {7, 3, 3, 2, 2, 1, 0, 9}, {100, 1}, {4, 4, 2, 2, 1}} {
		got := buildSchedule(ws)
		var ref smoothWRR
		for k, g := range got {
			if want := ref.pick(ws, nil); int(g) != want {
				t.Fatalf("weights %v: position %d = %d, classic smooth WRR = %d", ws, k, g, want)
			}
		}
	}
}

// Each stripe has its own cursor: two connections picking alternately each
// see nginx's exact smooth sequence (every window of Σw of their own picks
// holds each instance w times), and the live selections of both stripes count
// in the retry budget.
func TestStripesWalkTheirOwnSmoothSequence(t *testing.T) {
	weights := []int{5, 3, 1, 1}
	e := newEnv(t, snap(1, policy(nil), 0, sc{name: "A", weight: 100, weights: weights}))
	c := e.cluster()
	var a, b Selection
	seqs := [2][]netip.AddrPort{}
	ip := netip.MustParseAddr("192.0.2.1")
	for range 40 {
		for k, s := range []*Selection{&a, &b} {
			c.Start(s, nil, ip, uint32(k))
			p, err := s.Next()
			if err != nil {
				t.Fatalf("stripe %d: %v", k, err)
			}
			seqs[k] = append(seqs[k], p.Endpoint().Addr())
			p.Done(Result{Status: 200})
		}
		if active, _ := e.reg.RetryStats(); active != 2 {
			t.Fatalf("active selections = %d with both stripes live, want 2", active)
		}
		a.Release()
		b.Release()
	}
	for k, seq := range seqs {
		for start := 0; start+10 <= len(seq); start++ {
			count := map[netip.AddrPort]int{}
			for _, x := range seq[start : start+10] {
				count[x]++
			}
			for i, w := range weights {
				if count[inst(1, i)] != w {
					t.Fatalf("stripe %d window at %d: instance %d picked %d times, want %d", k, start, i, count[inst(1, i)], w)
				}
			}
		}
	}
	if slices.Equal(seqs[0], seqs[1]) {
		t.Fatalf("stripes 0 and 1 walked in lockstep: %v", seqs[0][:10])
	}
	if active, _ := e.reg.RetryStats(); active != 0 {
		t.Fatalf("active selections = %d after release, want 0", active)
	}
}

// The in-flight cells of an endpoint, the cursors of a schedule and the
// active-selection counters each fill whole cache lines, so that counters
// written by different cores never share one.
func TestCountersOwnTheirCacheLines(t *testing.T) {
	var e Endpoint
	if off, size := unsafe.Offsetof(e.load), unsafe.Sizeof(e.load[0]); off%64 != 0 || size != 64 {
		t.Fatalf("endpoint in-flight cells at offset %d, %d bytes each: want 64-byte aligned lines", off, size)
	}
	if size := unsafe.Sizeof(cursor{}); size != 64 {
		t.Fatalf("cursor is %d bytes, want 64", size)
	}
}

// schedule.pos is n mod len(order) for every cursor value, the largest included.
func TestSchedulePosIsModulo(t *testing.T) {
	r := seededRand(5)
	for _, l := range []int{1, 2, 3, 7, 10, 1000, 30000, 65535, 65536} {
		s := newSchedule(make([]int32, l), 0, 1)
		ns := []uint64{0, 1, uint64(l) - 1, uint64(l), uint64(l) + 1, ^uint64(0), ^uint64(0) - 1, 1 << 63}
		for range 10000 {
			ns = append(ns, r())
		}
		for _, n := range ns {
			if got, want := s.pos(n), n%uint64(l); got != want {
				t.Fatalf("len %d: pos(%d) = %d, want %d", l, n, got, want)
			}
		}
	}
}

func TestVectorMurmur3(t *testing.T) {
	if got := hashBytes([]byte{1}); got != 8849112093580131862 {
		t.Fatalf("murmur3(0x01) = %d", got)
	}
	if got := hashString("val"); got != 11149377234352165204 {
		t.Fatalf("murmur3(val) = %d", got)
	}
}

func TestVectorBFEMode(t *testing.T) {
	pol := policy(func(p *config.Policy) {
		p.Balance.SubclusterMode = config.SubclusterBFE
		p.Balance.Hash = config.Hash{Key: config.HashHeader, Header: "X-Key"}
	})
	e := newEnv(t, snap(1, pol, 10, sc{name: "SubCluster_1", weight: 45, weights: []int{1}}, sc{name: "SubCluster_2", weight: 45, weights: []int{1}}))
	try := func(key string) (string, error) {
		req, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
		req.Header.Set("X-Key", key)
		s := e.cluster().NewSelection(req, netip.Addr{})
		defer s.Release()
		p, err := s.Next()
		if err == nil {
			p.Done(Result{})
		}
		return p.SubCluster(), err
	}
	if _, err := try("val"); !errors.Is(err, ErrBlackhole) {
		t.Fatalf("val: err = %v, want ErrBlackhole", err)
	}
	if got, err := try("user-123"); err != nil || got != "SubCluster_2" {
		t.Fatalf("user-123: %q, %v; want SubCluster_2", got, err)
	}
	// Explain agrees without acquiring.
	req, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
	req.Header.Set("X-Key", "val")
	if ex := e.cluster().Explain(req, netip.Addr{}); !ex.Blackhole {
		t.Fatalf("explain val: %+v", ex)
	}
}

// BFE picks an instance with 2 in flight for (2,2,1,1); we pick one with 1.
func TestVectorWLC(t *testing.T) {
	for _, mode := range []string{config.InstanceWLC, config.InstanceWLCRandom, config.InstanceLeastConn} {
		t.Run(mode, func(t *testing.T) {
			pol := policy(func(p *config.Policy) { p.Balance.Instance = mode })
			e := newEnv(t, snap(1, pol, 0, sc{name: "A", weight: 100, weights: []int{1, 1, 1, 1}}))
			g := e.cluster().subs[0]
			for i, n := range []int64{2, 2, 1, 1} {
				g.members[i].ep.load[0].n.Store(n)
			}
			for range 20 {
				s := e.cluster().NewSelection(nil, netip.Addr{})
				p, err := s.Next()
				if err != nil {
					t.Fatal(err)
				}
				if a := p.Endpoint().Addr(); !slices.Contains([]netip.AddrPort{inst(1, 2), inst(1, 3)}, a) {
					t.Fatalf("picked %s with in-flight %d", a, p.Endpoint().InFlight()-1)
				}
				p.Done(Result{})
				s.Release()
			}
		})
	}
}

// sum64 is exactly github.com/spaolacci/murmur3.Sum64 for every length,
// on slices cut from inside a larger buffer: the bytes around a key (which
// the tail's 16-byte load must not take in) change nothing.
func TestSum64MatchesMurmur3(t *testing.T) {
	r := seededRand(3)
	buf := make([]byte, 160)
	for round := range 5 {
		for n := range 100 {
			for i := range buf {
				buf[i] = byte(r())
			}
			off := 16 + (n+round)%32
			b := buf[off : off+n]
			if got, want := sum64(b), murmur3.Sum64(b); got != want {
				t.Fatalf("len %d at %d: sum64 = %d, murmur3 = %d", n, off, got, want)
			}
		}
	}
}

// hashAddr is murmur3 of the address bytes (4 for IPv4 and IPv4-mapped
// IPv6, 16 for IPv6): the specialised forms give the same values.
func TestHashAddrMatchesMurmur3(t *testing.T) {
	r := seededRand(4)
	for range 1000 {
		var b16 [16]byte
		for i := range b16 {
			b16[i] = byte(r())
		}
		v6 := netip.AddrFrom16(b16)
		if got, want := hashAddr(v6), murmur3.Sum64(b16[:]); got != want && !v6.Is4In6() {
			t.Fatalf("%s: hashAddr = %d, murmur3 = %d", v6, got, want)
		}
		v4 := netip.AddrFrom4([4]byte(b16[:4]))
		want := murmur3.Sum64(b16[:4])
		if got := hashAddr(v4); got != want {
			t.Fatalf("%s: hashAddr = %d, murmur3 = %d", v4, got, want)
		}
		if got := hashAddr(netip.AddrFrom16(v4.As16())); got != want {
			t.Fatalf("%s mapped: hashAddr = %d, murmur3 = %d", v4, got, want)
		}
	}
}

// Request mode draws every request independently: the realised split follows
// the row, blackhole included, even from a single client.
func TestRequestModeFollowsRowWithBlackhole(t *testing.T) {
	pol := policy(func(p *config.Policy) { p.Balance.SubclusterMode = config.SubclusterRequest })
	e := newEnv(t, snap(1, pol, 10, sc{name: "SC1", weight: 45, weights: []int{1}}, sc{name: "SC2", weight: 45, weights: []int{1}}))
	counts := map[string]int{}
	const n = 20000
	ip := netip.MustParseAddr("192.0.2.1")
	for range n {
		p, err := e.pick(ip)
		switch {
		case errors.Is(err, ErrBlackhole):
			counts["bh"]++
		case err != nil:
			t.Fatal(err)
		default:
			counts[p.SubCluster()]++ // e.pick reported Done
		}
	}
	for k, want := range map[string]float64{"SC1": 45, "SC2": 45, "bh": 10} {
		if got := 100 * float64(counts[k]) / n; got < want-2 || got > want+2 {
			t.Errorf("%s share %.2f%%, want %.0f%% ± 2 (%v)", k, got, want, counts)
		}
	}
}

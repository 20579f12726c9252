package balance

import (
	"net/netip"
	"testing"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
)

const nKeys = 100000

func keyIP(k int) netip.Addr {
	return netip.AddrFrom4([4]byte{100, byte(k >> 16), byte(k >> 8), byte(k)})
}

// assign returns the primary sub-cluster (or GSLB_BLACKHOLE) of every key.
func assign(t *testing.T, s *snapshot.Snapshot) []string {
	t.Helper()
	e := newEnv(t, s)
	c := e.cluster()
	out := make([]string, nKeys)
	for k := range out {
		ex := c.Explain(nil, keyIP(k))
		if ex.Error != "" {
			t.Fatalf("key %d: %s", k, ex.Error)
		}
		out[k] = ex.SubCluster
	}
	return out
}

func moved(a, b []string) float64 {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return float64(n) / float64(len(a))
}

func TestConsistentShiftMovesOnlyTheShift(t *testing.T) {
	pol := policy(nil)
	one := []int{1}
	cases := []struct {
		name     string
		bh       int
		from, to [2]int
	}{
		{"50/50→40/60", 0, [2]int{50, 50}, [2]int{40, 60}},
		{"45/45/bh10→35/55/bh10", 10, [2]int{45, 45}, [2]int{35, 55}},
		{"90/10→80/20", 0, [2]int{90, 10}, [2]int{80, 20}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := assign(t, snap(1, pol, tc.bh, sc{name: "SC1", weight: tc.from[0], weights: one}, sc{name: "SC2", weight: tc.from[1], weights: one}))
			b := assign(t, snap(2, pol, tc.bh, sc{name: "SC1", weight: tc.to[0], weights: one}, sc{name: "SC2", weight: tc.to[1], weights: one}))
			m := moved(a, b)
			t.Logf("%s: %.2f %% of %d keys moved", tc.name, 100*m, nKeys)
			if m > 0.11 {
				t.Fatalf("moved %.4f > 0.11", m)
			}
			if m < 0.09 {
				t.Fatalf("moved %.4f: a 10-point shift must move about 10 %%", m)
			}
		})
	}
	t.Run("add weight-0 sub-cluster", func(t *testing.T) {
		a := assign(t, snap(1, pol, 10, sc{name: "SC1", weight: 45, weights: one}, sc{name: "SC2", weight: 45, weights: one}))
		b := assign(t, snap(2, pol, 10, sc{name: "SC1", weight: 45, weights: one}, sc{name: "SC2", weight: 45, weights: one}, sc{name: "SC0", weight: 0, weights: one}))
		if m := moved(a, b); m != 0 {
			t.Fatalf("adding a weight-0 sub-cluster moved %.4f of keys", m)
		}
	})
	// BFE mode for comparison (not asserted beyond being larger).
	t.Run("bfe mode comparison", func(t *testing.T) {
		bp := policy(func(p *config.Policy) { p.Balance.SubclusterMode = config.SubclusterBFE })
		a := assign(t, snap(1, bp, 10, sc{name: "SC1", weight: 45, weights: one}, sc{name: "SC2", weight: 45, weights: one}))
		b := assign(t, snap(2, bp, 10, sc{name: "SC1", weight: 35, weights: one}, sc{name: "SC2", weight: 55, weights: one}))
		t.Logf("bfe mode 45/45/10→35/55/10: %.2f %% moved", 100*moved(a, b))
	})
}

// Sticky instance hashing: when one of ten instances goes down only its keys move.
func TestStickyOneOfTenDown(t *testing.T) {
	for _, mode := range []string{config.InstanceSticky, "source/consistent"} {
		t.Run(mode, func(t *testing.T) {
			ws := []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}
			e := newEnv(t, snap(1, modePolicy(mode), 0, sc{name: "A", weight: 100, weights: ws}))
			before := make([]netip.AddrPort, nKeys)
			for k := range before {
				ex := e.cluster().Explain(nil, keyIP(k))
				before[k] = netip.MustParseAddrPort(ex.Instance)
			}
			down := inst(1, 3)
			if err := e.reg.SetOverride(down, Override{Drain: true}); err != nil {
				t.Fatal(err)
			}
			n := 0
			for k := range before {
				a := netip.MustParseAddrPort(e.cluster().Explain(nil, keyIP(k)).Instance)
				if a != before[k] {
					n++
					if before[k] != down {
						t.Fatalf("key %d moved from live %s to %s", k, before[k], a)
					}
				} else if a == down {
					t.Fatalf("key %d still on the down instance", k)
				}
			}
			t.Logf("%s: one of ten down moved %.2f %% of keys (all of them the down instance's)", mode, 100*float64(n)/nKeys)
		})
	}
}

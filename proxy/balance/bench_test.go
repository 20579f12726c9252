package balance

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

func benchWeights(n int) []int {
	ws := make([]int, n)
	for i := range ws {
		ws[i] = 1 + i%5
	}
	return ws
}

func benchEnv(b *testing.B, mode string, n int) *env {
	pol := modePolicy(mode)
	half := n / 2
	return newEnv(b, snap(1, pol, 10, sc{name: "SC1", weight: 45, weights: benchWeights(half)}, sc{name: "SC2", weight: 45, weights: benchWeights(n - half)}))
}

// BenchmarkPick is one full two-level pick: sub-cluster (consistent, client
// IP hash) then instance, NewSelection+Next+Done+Release.
func BenchmarkPick(b *testing.B) {
	for _, mode := range []string{config.InstanceWRR, config.InstanceWLC, config.InstanceP2CEWMA, config.InstanceSticky, config.InstanceRandom, config.InstanceStaticRR} {
		for _, n := range []int{4, 100, 1000, 10000} {
			b.Run(fmt.Sprintf("%s/n=%d", mode, n), func(b *testing.B) {
				e := benchEnv(b, mode, n)
				c := e.cluster()
				ips := make([]netip.Addr, 1024)
				for i := range ips {
					ips[i] = keyIP(i * 7919)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					s := c.NewSelection(nil, ips[i&1023])
					p, err := s.Next()
					if err == nil {
						p.Done(Result{Status: 200})
					}
					s.Release()
				}
			})
		}
	}
}

// BenchmarkPickParallel runs the wrr pick on every P (compare with -cpu 1,2).
func BenchmarkPickParallel(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("wrr/n=%d", n), func(b *testing.B) {
			e := benchEnv(b, config.InstanceWRR, n)
			c := e.cluster()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					s := c.NewSelection(nil, keyIP(i*7919))
					p, err := s.Next()
					if err == nil {
						p.Done(Result{Status: 200})
					}
					s.Release()
					i++
				}
			})
		})
	}
}

// BenchmarkMutexSmoothWRR is the reference the schedule is measured against
// (STYLE 11): classic O(n) smooth WRR behind a mutex.
func BenchmarkMutexSmoothWRR(b *testing.B) {
	for _, n := range []int{4, 100, 1000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			ws := benchWeights(n)
			var mu sync.Mutex
			var s smoothWRR
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					mu.Lock()
					s.pick(ws, nil)
					mu.Unlock()
				}
			})
		})
	}
}

func BenchmarkBuild10000(b *testing.B) {
	r := NewRegistry(RegistryOptions{Rand: seededRand(1)})
	s := snap(1, policy(nil), 10, sc{name: "SC1", weight: 45, weights: benchWeights(5000)}, sc{name: "SC2", weight: 45, weights: benchWeights(5000)})
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		// A fresh progress key each time so the schedule is really rebuilt.
		s.Meta.Version = uint64(i)
		r.mu.Lock()
		clear(r.progress)
		r.mu.Unlock()
		if _, err := Build(s, r); err != nil {
			b.Fatal(err)
		}
	}
}

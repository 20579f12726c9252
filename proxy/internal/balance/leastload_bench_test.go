package balance

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

// BenchmarkPickHeld is BenchmarkPick with 16 requests outstanding: each
// request is answered 16 picks after it was made (oldest first), as under
// concurrent traffic, so a release comes after later picks rather than
// before the next one. A least-loaded request then fixes two whole tree
// paths (its acquire's, found pending by the next pick, and its release's)
// where BenchmarkPick's release undoes its acquire's pending leaf. The
// cost of a request: Start+Next+Release and the Done of the request made
// 16 picks before; wrr is the reference. As in BenchmarkPick, a tenth of
// the picks are the blackhole share's (no instance).
func BenchmarkPickHeld(b *testing.B) {
	const held = 16
	for _, mode := range []string{config.InstanceWRR, config.InstanceWLC, config.InstanceWLCRandom, config.InstanceLeastConn, config.InstanceFirst} {
		for _, n := range []int{4, 1000, 10000} {
			b.Run(fmt.Sprintf("%s/n=%d", mode, n), func(b *testing.B) {
				c := benchEnv(b, mode, n).cluster()
				ips := benchIPs()
				var s Selection
				var ring [held]Pick
				pick := func(i int) {
					c.Start(&s, nil, ips[i&1023], 0)
					p, _ := s.Next() // an error (the blackhole share) leaves Pick{}: its Done does nothing
					s.Release()
					ring[i%held] = p
				}
				for i := range held { // the first picks build the views
					pick(i)
				}
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				b.ReportAllocs()
				b.ResetTimer()
				cpu0, cpuOK := threadCPU()
				for i := held; i < b.N+held; i++ {
					ring[i%held].Done(Result{Status: 200})
					pick(i)
				}
				if cpu1, ok := threadCPU(); ok && cpuOK {
					b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
				}
				b.StopTimer()
				for _, p := range ring {
					p.Done(Result{Status: 200})
				}
			})
		}
	}
}

// BenchmarkLoadTreeSetLoad is one tree path fix-up alone (setLoad under
// the tree's lock, with the count change before it: an atomic add): a
// member's count goes up by one, or back, members taken in a scattered
// order over idle ones, so that every fix-up runs to the root (the ties
// counted in each node change).
func BenchmarkLoadTreeSetLoad(b *testing.B) {
	for _, n := range []int{512, 5000} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			e := newEnv(b, snap(1, leastLoadPolicy(config.InstanceWLC), 0, sc{name: "A", weight: 100, weights: benchWeights(n)}))
			g := e.cluster().subs[0]
			t := g.load
			t.mu.Lock()
			defer t.mu.Unlock()
			t.sync(g.currentView())
			order := make([]int, 1024) // scattered, computed outside the loop
			for k := range order {
				order[k] = k * 7919 % n
			}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ResetTimer()
			cpu0, cpuOK := threadCPU()
			for k := 0; k < b.N; k++ {
				i := order[(k>>1)&1023]
				c := &t.m[i].ep.load[0].n
				if k&1 == 0 {
					c.Add(1)
				} else {
					c.Add(-1)
				}
				t.setLoad(i)
			}
			if cpu1, ok := threadCPU(); ok && cpuOK {
				b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
			}
		})
	}
}

package balance

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
)

func benchWeights(n int) []int {
	ws := make([]int, n)
	for i := range ws {
		ws[i] = 1 + i%5
	}
	return ws
}

// benchIPs are 1024 client addresses the pick loops cycle through.
func benchIPs() []netip.Addr {
	ips := make([]netip.Addr, 1024)
	for i := range ips {
		ips[i] = keyIP(i * 7919)
	}
	return ips
}

// benchRequests are 1024 requests the pick loops cycle through, each with
// its own path, X-User header and uid query parameter, so that the uri,
// hdr(X-User) and url_param(uid) rows hash a real key on every pick (with
// no request they fall back to the schedule). The other algorithms key on
// the client address and do not read them.
func benchRequests() []*http.Request {
	reqs := make([]*http.Request, 1024)
	for i := range reqs {
		k := i * 7919
		uri := fmt.Sprintf("/catalog/item/%d?uid=u%d&lang=en", k, k)
		u, err := url.ParseRequestURI(uri)
		if err != nil {
			panic(err)
		}
		reqs[i] = &http.Request{Method: http.MethodGet, URL: u, RequestURI: uri, Host: "shop.example",
			Header: http.Header{"X-User": {fmt.Sprintf("user-%d", k)}, "Accept": {"*/*"}}}
	}
	return reqs
}

// benchEnv is newEnv with the registry's production random source
// (math/rand/v2's per-thread generator, RegistryOptions.Rand nil): the
// tests' seeded source is deterministic behind a mutex, whose lock and
// unlock cost more than the draw a random pick makes.
func benchEnv(b *testing.B, mode string, n int) *env {
	pol := modePolicy(mode)
	half := n / 2
	return newEnvRand(b, snap(1, pol, 10, sc{name: "SC1", weight: 45, weights: benchWeights(half)}, sc{name: "SC2", weight: 45, weights: benchWeights(n - half)}), nil)
}

// BenchmarkPick is one full two-level pick: sub-cluster (consistent, client
// IP hash) then instance, Start+Next+Done+Release on a Selection the caller
// owns — the server's path (the Selection lives in its per-request state).
// It runs every instance algorithm (allInstanceModes, the table the
// algorithm tests share; "random(2)" and "source/consistent" are named
// random(2) and source-consistent here). Every pick carries a request
// (benchRequests) and a client address, both cycling over 1024 values.
func BenchmarkPick(b *testing.B) {
	for _, mode := range allInstanceModes {
		name := strings.ReplaceAll(mode, "/", "-")
		for _, n := range []int{4, 100, 1000, 10000} {
			b.Run(fmt.Sprintf("%s/n=%d", name, n), func(b *testing.B) {
				e := benchEnv(b, mode, n)
				c := e.cluster()
				ips := benchIPs()
				reqs := benchRequests()
				var s Selection
				// A round of the addresses builds every sub-cluster's view
				// (and its alias table or index) outside the timed loop.
				pickRounds(c, &s, reqs, ips, 0, len(ips))
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				b.ReportAllocs()
				b.ResetTimer()
				cpu0, cpuOK := threadCPU()
				pickRounds(c, &s, reqs, ips, 0, b.N)
				if cpu1, ok := threadCPU(); ok && cpuOK {
					// CPU time per pick: what the pick costs when it has a
					// core (the wall-clock ns/op also counts the waits).
					b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
				}
			})
		}
	}
}

// pickRounds is n full picks on c with s, the i-th and on of the requests
// and addresses (cycling): the body of the pick benchmarks. A loop of its
// own, not b.Loop: b.Loop keeps calls in its body from being inlined, which
// the server's request path does inline.
func pickRounds(c *Cluster, s *Selection, reqs []*http.Request, ips []netip.Addr, i, n int) {
	for end := i + n; i < end; i++ {
		c.Start(s, reqs[i&1023], ips[i&1023], 0)
		p, err := s.Next()
		if err == nil {
			p.Done(Result{Status: 200})
		}
		s.Release()
	}
}

// pickChunk is how many picks BenchmarkPickVsWRR runs on one side before
// it switches to the other: long enough that the two CPU clock reads
// between turns cost under 1 % of a turn, short enough that a change in
// the machine's speed falls on both sides.
const pickChunk = 4096

// BenchmarkPickVsWRR measures each instance algorithm's pick at 1 000 and
// 10 000 instances against wrr's at 4 — issue 20's targets: within 2× and
// 3× — in one process and interleaved: the two clusters take turns,
// pickChunk picks at a time, each turn timed by the thread's CPU clock. A
// cloud host's speed moves during a run (a neighbour on the core's other
// hardware thread), by as much as 1.7× between two counts of one row; by
// turns, such a change weighs on both sides alike. Metrics: x-wrr4 the
// ratio, cpu-ns/op the algorithm's pick, wrr4-cpu-ns/op the reference's.
func BenchmarkPickVsWRR(b *testing.B) {
	ips, reqs := benchIPs(), benchRequests()
	for _, mode := range allInstanceModes {
		name := strings.ReplaceAll(mode, "/", "-")
		for _, n := range []int{1000, 10000} {
			b.Run(fmt.Sprintf("%s/n=%d", name, n), func(b *testing.B) {
				ref, sub := benchEnv(b, config.InstanceWRR, 4).cluster(), benchEnv(b, mode, n).cluster()
				var rs, ss Selection
				// A round of the addresses builds every sub-cluster's view
				// outside the timed loop.
				pickRounds(ref, &rs, reqs, ips, 0, len(ips))
				pickRounds(sub, &ss, reqs, ips, 0, len(ips))
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				clock := threadCPU
				if _, ok := threadCPU(); !ok {
					start := time.Now()
					clock = func() (time.Duration, bool) { return time.Since(start), true }
				}
				var refCPU, subCPU time.Duration
				b.ReportAllocs()
				b.ResetTimer()
				for done := 0; done < b.N; done += pickChunk {
					k := min(pickChunk, b.N-done)
					t0, _ := clock()
					pickRounds(ref, &rs, reqs, ips, done, k)
					t1, _ := clock()
					pickRounds(sub, &ss, reqs, ips, done, k)
					t2, _ := clock()
					refCPU += t1 - t0
					subCPU += t2 - t1
				}
				b.StopTimer()
				if refCPU <= 0 {
					b.Fatalf("wrr's 4-instance picks took %v of CPU over %d picks: the clock does not count", refCPU, b.N)
				}
				b.ReportMetric(float64(subCPU)/float64(b.N), "cpu-ns/op")
				b.ReportMetric(float64(refCPU)/float64(b.N), "wrr4-cpu-ns/op")
				b.ReportMetric(float64(subCPU)/float64(refCPU), "x-wrr4")
			})
		}
	}
}

// BenchmarkPickPooled is BenchmarkPick/wrr through NewSelection (a pooled
// Selection): the pool round trip's cost.
func BenchmarkPickPooled(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("wrr/n=%d", n), func(b *testing.B) {
			c := benchEnv(b, config.InstanceWRR, n).cluster()
			ips := benchIPs()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
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

// BenchmarkPickParallel runs the wrr pick, and wlc's (the least-load
// tree's lock under contention), on every P (compare with -cpu 1,2). Each
// goroutine is one client connection: its own Selection and stripe, as the
// server passes one stripe per connection.
func BenchmarkPickParallel(b *testing.B) {
	for _, mode := range []string{config.InstanceWRR, config.InstanceWLC} {
		for _, n := range []int{1000, 10000} {
			b.Run(fmt.Sprintf("%s/n=%d", mode, n), func(b *testing.B) { benchPickParallel(b, mode, n) })
		}
	}
}

func benchPickParallel(b *testing.B, mode string, n int) {
	e := benchEnv(b, mode, n)
	c := e.cluster()
	var conns atomic.Uint32
	ips := benchIPs()
	var warm Selection // a round of the addresses builds every sub-cluster's view
	pickRounds(c, &warm, benchRequests(), ips, 0, len(ips))
	b.ReportAllocs()
	b.ResetTimer() // the environment's build is not the pick's
	b.RunParallel(func(pb *testing.PB) {
		// Padded as the server's per-request state is large: two
		// goroutines' selections never share a cache line.
		st := new(struct {
			_ [64]byte
			s Selection
			_ [64]byte
		})
		s := &st.s
		stripe := conns.Add(1)
		i := 0
		for pb.Next() {
			c.Start(s, nil, ips[i&1023], stripe)
			p, err := s.Next()
			if err == nil {
				p.Done(Result{Status: 200})
			}
			s.Release()
			i++
		}
	})
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
		if _, err := build(s, r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPick's request-hash rows hash a real key: every one of
// benchRequests has a uri, hdr(X-User) and url_param(uid) key of its own,
// and its pick depends on the request alone (two picks of one request from
// different client addresses land on the same instance; the round-robin
// fallback for a request without a key would move on).
func TestBenchRequestsHashEveryKey(t *testing.T) {
	reqs := benchRequests()
	ips := benchIPs()
	for _, mode := range []string{"uri", "uri whole/consistent", "hdr(X-User)", "url_param(uid)/consistent"} {
		e := newEnv(t, snap(1, modePolicy(mode), 0, sc{name: "A", weight: 100, weights: benchWeights(1000)}))
		c := e.cluster()
		seen := map[uint64]bool{}
		for i, req := range reqs {
			h, ok := c.instKey.hash(req)
			if !ok {
				t.Fatalf("%s: request %d (%s) has no key", mode, i, req.RequestURI)
			}
			seen[h] = true
		}
		if len(seen) != len(reqs) {
			t.Fatalf("%s: %d distinct key hashes over %d requests, want all distinct", mode, len(seen), len(reqs))
		}
		for i := range 200 {
			var got [2]netip.AddrPort
			for k := range got {
				var s Selection
				c.Start(&s, reqs[i], ips[(i+k*512)&1023], 0)
				p, err := s.Next()
				if err != nil {
					t.Fatalf("%s: request %d: %v", mode, i, err)
				}
				got[k] = p.Endpoint().Addr()
				p.Done(Result{Status: 200})
				s.Release()
			}
			if got[0] != got[1] {
				t.Fatalf("%s: request %d picked %s then %s: not hashed", mode, i, got[0], got[1])
			}
		}
	}
}

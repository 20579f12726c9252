package connlimit

import (
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// pipeConn is one end of a net.Pipe that records its Close.
type pipeConn struct {
	net.Conn
	closed atomic.Bool
}

func (c *pipeConn) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}

// admitPipe admits one end of a new pipe through l.
func admitPipe(t testing.TB, l *Limiter) (*Conn, *pipeConn) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	pc := &pipeConn{Conn: a}
	c := l.admit(pc)
	if c == nil {
		return nil, pc
	}
	return c.(*Conn), pc
}

// TestEvictsInIdleOrderAcrossStripes: with more connections than stripes,
// made idle in a random order, connections admitted at the limit evict
// them in exactly that order, whichever stripes they are in; the busy ones
// last, never.
func TestEvictsInIdleOrderAcrossStripes(t *testing.T) {
	const n = 5*stripes + 3
	l := New(Options{Max: n})
	conns := make([]*Conn, n)
	pipes := make([]*pipeConn, n)
	for i := range conns {
		conns[i], pipes[i] = admitPipe(t, l)
		conns[i].Busy()
	}
	if got := l.IdleConns(); got != 0 {
		t.Fatalf("IdleConns %d with every connection busy, want 0", got)
	}
	used := map[*stripe]int{}
	for _, c := range conns {
		used[c.st]++
	}
	if len(used) != stripes {
		t.Fatalf("%d connections in %d stripes, want them dealt over all %d", n, len(used), stripes)
	}
	order := rand.New(rand.NewPCG(7, 8)).Perm(n)
	busy := map[int]bool{order[3]: true, order[n-1]: true} // never made idle
	var idleOrder []int
	for _, i := range order {
		if !busy[i] {
			conns[i].Idle()
			idleOrder = append(idleOrder, i)
		}
	}
	if got := l.IdleConns(); got != len(idleOrder) {
		t.Fatalf("IdleConns %d, want %d", got, len(idleOrder))
	}
	for k := range idleOrder {
		if c, _ := admitPipe(t, l); c == nil {
			t.Fatalf("admission %d refused with %d idle", k, len(idleOrder)-k)
		}
		for i, p := range pipes {
			if got, wantClosed := p.closed.Load(), idleOrder[:k+1]; got != contains(wantClosed, i) {
				t.Fatalf("after %d evictions: connection %d closed=%v, want the first %d of the idle order %v closed",
					k+1, i, got, k+1, idleOrder)
			}
		}
		// The newly admitted connections are idle too, but newer than all.
	}
	if l.Open() != n || l.Evicted() != uint64(len(idleOrder)) {
		t.Fatalf("open %d, evicted %d; want %d, %d", l.Open(), l.Evicted(), n, len(idleOrder))
	}
}

func contains(s []int, x int) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// TestStripesConcurrent: connections going idle and busy on many
// goroutines while others are admitted at the limit (evicting) and closed:
// the counts end exact — open is every connection neither closed nor
// evicted, idle those of them left idle — and -race sees no race.
func TestStripesConcurrent(t *testing.T) {
	const workers, per, rounds = 8, 6, 300
	l := New(Options{Max: workers * per})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var all []*Conn
	for w := 0; w < workers; w++ {
		mine := make([]*Conn, per)
		for i := range mine {
			mine[i], _ = admitPipe(t, l)
		}
		all = append(all, mine...)
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 1))
			for range rounds {
				c := mine[r.IntN(per)]
				c.Busy()
				c.Idle()
				if r.IntN(10) == 0 {
					c.Close()
				}
			}
		}(uint64(w))
	}
	for range rounds {
		if c, _ := admitPipe(t, l); c != nil {
			mu.Lock()
			all = append(all, c)
			mu.Unlock()
		}
	}
	wg.Wait()
	open, idle := 0, 0
	for _, c := range all {
		if !c.gone {
			open++
			if c.next != nil {
				idle++
			}
		}
	}
	if l.Open() != open || l.IdleConns() != idle {
		t.Fatalf("open %d idle %d, want %d and %d (connections neither closed nor evicted)", l.Open(), l.IdleConns(), open, idle)
	}
	if l.Open() > l.Max() {
		t.Fatalf("open %d over the limit %d", l.Open(), l.Max())
	}
}

// BenchmarkIdleBusy is one request's transitions (Busy, then Idle) of a
// connection under a total limit, each goroutine with its own connection
// (-cpu 1,2,...: how they contend).
func BenchmarkIdleBusy(b *testing.B) {
	l := New(Options{Max: 1 << 20})
	var mu sync.Mutex
	b.ReportAllocs()
	cpu0 := processCPU(b)
	defer func() { b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op") }()
	b.RunParallel(func(pb *testing.PB) {
		mu.Lock()
		c, _ := admitPipe(b, l)
		mu.Unlock()
		for pb.Next() {
			c.Busy()
			c.Idle()
		}
	})
}

// processCPU is this process's user+system CPU time so far, in ns: the
// benchmark's cpu-ns/op, which the other jobs of a loaded machine stretch
// less than its ns/op.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

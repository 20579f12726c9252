package forward

import (
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicelb/sluice/api/config"
)

// Cached answers what Get answers, in every case: an empty slot, a slot
// holding the address's pool, the same address under another policy (two
// clusters sharing an address), another address, and a pool Retain has
// released (the slot's upstream is closed; a new one takes its place).
func TestCachedIsGet(t *testing.T) {
	ps := NewPools(Options{})
	pol := config.DefaultPolicy()
	a := netip.MustParseAddrPort("127.0.0.1:9001")
	b := netip.MustParseAddrPort("127.0.0.1:9002")
	var slot atomic.Value

	u := ps.Cached(&slot, a, pol.Pool, pol.Timeouts)
	if g := ps.Get(a, pol.Pool, pol.Timeouts); u != g {
		t.Fatalf("empty slot: Cached = %p, Get = %p", u, g)
	}
	if s, _ := slot.Load().(*Upstream); s != u {
		t.Fatalf("the slot holds %p, want %p", s, u)
	}
	if again := ps.Cached(&slot, a, pol.Pool, pol.Timeouts); again != u {
		t.Fatalf("second call: Cached = %p, want %p", again, u)
	}

	other := pol.Pool
	other.MaxIdleConnsPerHost = 7
	ot := pol.Timeouts
	ot.ResponseHeader = config.Duration(3 * time.Second)
	for name, c := range map[string]struct {
		pool config.Pool
		t    config.Timeouts
	}{"other pool": {other, pol.Timeouts}, "other timeouts": {pol.Pool, ot}} {
		got := ps.Cached(&slot, a, c.pool, c.t)
		if want := ps.Get(a, c.pool, c.t); got != want || got == u {
			t.Fatalf("%s: Cached = %p, Get = %p (the first policy's: %p)", name, got, want, u)
		}
	}
	if got, want := ps.Cached(&slot, b, pol.Pool, pol.Timeouts), ps.Get(b, pol.Pool, pol.Timeouts); got != want || got.Addr() != b {
		t.Fatalf("another address: Cached = %p (%v), Get = %p", got, got.Addr(), want)
	}

	u = ps.Cached(&slot, a, pol.Pool, pol.Timeouts)
	ps.Retain(func(netip.AddrPort) bool { return false })
	if ps.Len() != 0 {
		t.Fatalf("Len after Retain(none) = %d", ps.Len())
	}
	got := ps.Cached(&slot, a, pol.Pool, pol.Timeouts)
	if got == u {
		t.Fatal("after Retain released the pool, Cached still answers it")
	}
	if want := ps.Get(a, pol.Pool, pol.Timeouts); got != want || ps.Len() != 1 {
		t.Fatalf("after Retain: Cached = %p, Get = %p, Len %d (want 1)", got, want, ps.Len())
	}
	u.idleMu.Lock()
	closed := u.closed
	u.idleMu.Unlock()
	if !closed {
		t.Fatal("the released pool is not closed")
	}
}

// BenchmarkPoolsLookup is the per-request lookup of a pick's pool, round robin
// over n addresses: Get (the map) and Cached (each address's slot, as the
// proxy keeps one per endpoint).
func BenchmarkPoolsLookup(b *testing.B) {
	pol := config.DefaultPolicy()
	for _, n := range []int{4, 1000} {
		ps := NewPools(Options{})
		addrs := make([]netip.AddrPort, n)
		slots := make([]atomic.Value, n)
		for i := range addrs {
			addrs[i] = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(10000+i))
			ps.Get(addrs[i], pol.Pool, pol.Timeouts)
		}
		b.Run(fmt.Sprintf("Get/n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				ps.Get(addrs[i%n], pol.Pool, pol.Timeouts)
			}
		})
		b.Run(fmt.Sprintf("Cached/n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				k := i % n
				ps.Cached(&slots[k], addrs[k], pol.Pool, pol.Timeouts)
			}
		})
	}
}

// The fields a request reads first (Cached's key, getConn's idle list) stay
// on the first two cache lines of an Upstream, and the struct in the 256-byte
// size class, so those lines are aligned: at 1 000 instances each is a likely
// miss, and a third one would be paid on every request.
func TestUpstreamHotFieldsOnTwoLines(t *testing.T) {
	var u Upstream
	if s := unsafe.Sizeof(u); s > 256 || s <= 128 {
		t.Fatalf("sizeof(Upstream) = %d, want in (128, 256]: the 256-byte size class, aligned to it", s)
	}
	for name, end := range map[string]uintptr{
		"k":           unsafe.Offsetof(u.k) + unsafe.Sizeof(u.k),
		"idleMu":      unsafe.Offsetof(u.idleMu) + unsafe.Sizeof(u.idleMu),
		"idle":        unsafe.Offsetof(u.idle) + unsafe.Sizeof(u.idle),
		"closed":      unsafe.Offsetof(u.closed) + unsafe.Sizeof(u.closed),
		"idleTimeout": unsafe.Offsetof(u.idleTimeout) + unsafe.Sizeof(u.idleTimeout),
	} {
		if end > 128 {
			t.Errorf("Upstream.%s ends at byte %d, past the first two cache lines", name, end)
		}
	}
}

package balance

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/probe"
)

// silentListener accepts TCP connections on 127.0.0.1:0 and never answers
// (nor closes them before the test ends): every probe of it runs to its
// timeout, holding its slot, as a blackholed instance does.
func silentListener(t *testing.T) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() { _, _ = io.Copy(io.Discard, c); c.Close() }() // gone when the prober hangs up
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return netip.MustParseAddrPort(ln.Addr().String())
}

// Many actively checked instances that never answer plus a healthy one:
// probes in flight never exceed MaxProbes, the silent ones go DOWN, and
// the healthy one stays NORMAL (Fall 1: a single probe timed out while it
// waited for a slot would mark it down) and keeps being probed.
func TestProbesInFlightBoundedHealthyStaysNormal(t *testing.T) {
	const silent, maxProbes = 40, 8
	var healthyProbes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		healthyProbes.Add(1)
		w.WriteHeader(204)
	}))
	defer srv.Close()
	healthy := netip.MustParseAddrPort(srv.Listener.Addr().String())

	pol := policy(func(p *config.Policy) {
		p.Health.Active = true
		p.Health.Rise, p.Health.Fall = 1, 1
		p.Health.Interval = config.Duration(100 * time.Millisecond)
		p.Health.Timeout = config.Duration(time.Second)
		p.Health.Probe.Status = "2xx"
	})
	// The healthy instance has a cluster of its own, whose probe timeout
	// (500 ms: ample on a loaded machine) is shorter than the time it
	// waits for a slot behind the silent ones: counted, that wait would
	// time it out.
	hpol := pol
	hpol.Health.Timeout = config.Duration(500 * time.Millisecond)
	s := snap(1, pol, 0, sc{name: "A", weight: 100, weights: []int{1}})
	var ins []config.Instance
	var deadAddrs []netip.AddrPort
	for range silent {
		a := silentListener(t)
		deadAddrs = append(deadAddrs, a)
		ins = append(ins, config.Instance{Addr: a.Addr().String(), Port: int(a.Port()), Weight: 1})
	}
	cl := s.Clusters["demo"]
	cl.SubClusters["A"] = config.SubCluster{IDC: "idc", Instances: ins}
	hc := cl
	hc.Policy = hpol
	hc.SubClusters = map[string]config.SubCluster{"A": {IDC: "idc", Instances: []config.Instance{{Addr: healthy.Addr().String(), Port: int(healthy.Port()), Weight: 1}}}}
	s.Clusters["healthy"] = hc
	// The real probe, counted from outside the limiter.
	var running, peak atomic.Int64
	counted := func(ctx context.Context, addr netip.AddrPort, p config.Probe, timeout time.Duration) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := peak.Load(); n > m && !peak.CompareAndSwap(m, n); m = peak.Load() {
		}
		return probe.CheckPolicy(ctx, addr, p, timeout)
	}
	r := NewRegistry(RegistryOptions{MaxProbes: maxProbes, Probe: counted, Logger: slog.New(slog.DiscardHandler)})
	if r.MaxProbes() != maxProbes {
		t.Fatalf("MaxProbes() = %d, want %d", r.MaxProbes(), maxProbes)
	}
	var h Holder
	h.Store(mustBuild(t, s, r))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	hep := r.Endpoint(healthy)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if n := r.ProbesInFlight(); n > maxProbes {
			t.Fatalf("%d probes in flight, bound %d", n, maxProbes)
		}
		if hep.Health() != Normal {
			t.Fatalf("healthy instance is %s after %d probes of it, want NORMAL throughout", hep.Health(), healthyProbes.Load())
		}
		checking := 0
		for _, a := range deadAddrs {
			if r.Endpoint(a).Health() == Down {
				checking++
			}
		}
		if checking == silent && healthyProbes.Load() >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: %d of %d silent instances DOWN, healthy probed %d times (want all, ≥ 2)", checking, silent, healthyProbes.Load())
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not a wait for state
	}
	if p := peak.Load(); p > maxProbes || p < 2 {
		t.Fatalf("peak probes running %d, want 2..%d", p, maxProbes)
	}
	if p := r.limit.Peak(); p < int(peak.Load()) || p > maxProbes {
		t.Errorf("limiter saw a peak of %d in flight, want %d..%d", p, peak.Load(), maxProbes)
	}
	t.Logf("%d silent instances DOWN, healthy NORMAL after %d probes; peak %d probes in flight (bound %d)", silent, healthyProbes.Load(), peak.Load(), maxProbes)
}

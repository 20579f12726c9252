package balance

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is an injected clock for exact tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)} }
func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// seededRand is a deterministic, concurrency-safe random source.
func seededRand(seed uint64) func() uint64 {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed^0x9e37))
	return func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Uint64()
	}
}

// sc describes a sub-cluster for snap: instance weights, addresses 10.<sub>.<i/250>.<i%250+1>:80.
type sc struct {
	name    string
	weight  int
	weights []int
	states  map[int]string
}

func inst(sub, i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(sub), byte(i / 250), byte(i%250 + 1)}), 80)
}

func snap(version uint64, pol config.Policy, blackhole int, subs ...sc) *snapshot.Snapshot {
	cl := snapshot.Cluster{SubClusters: map[string]config.SubCluster{}, Policy: pol,
		Row: snapshot.Row{Denominator: 100, Weights: map[string]int{}}}
	if blackhole > 0 {
		cl.Row.Weights[config.Blackhole] = blackhole
	}
	for si, s := range subs {
		var ins []config.Instance
		for i, w := range s.weights {
			a := inst(si+1, i)
			ins = append(ins, config.Instance{Addr: a.Addr().String(), Port: int(a.Port()), Weight: w, State: s.states[i]})
		}
		cl.SubClusters[s.name] = config.SubCluster{IDC: "idc", Instances: ins}
		cl.Row.Weights[s.name] = s.weight
	}
	return &snapshot.Snapshot{Meta: snapshot.Meta{ProxyCluster: "BFE1", Version: version},
		Clusters: map[string]snapshot.Cluster{"demo": cl}}
}

func policy(mut func(*config.Policy)) config.Policy {
	p := config.DefaultPolicy()
	if mut != nil {
		mut(&p)
	}
	return p
}

// tb is what the helpers need from *testing.T, *testing.B and *rapid.T.
type tb interface {
	Helper()
	Fatalf(string, ...any)
}

type env struct {
	t     tb
	reg   *Registry
	h     *Holder
	clock *fakeClock
}

func newEnv(t tb, s *snapshot.Snapshot) *env {
	t.Helper()
	return newEnvRand(t, s, seededRand(1))
}

// newEnvRand is newEnv with the registry's random source rnd (nil: the
// production default).
func newEnvRand(t tb, s *snapshot.Snapshot, rnd func() uint64) *env {
	t.Helper()
	c := newClock()
	r := NewRegistry(RegistryOptions{Now: c.Now, Rand: rnd, StickySecret: []byte("test-secret"),
		Probe: func(ctx context.Context, a netip.AddrPort, p config.Probe, d time.Duration) error { return nil }})
	e := &env{t: t, reg: r, h: &Holder{}, clock: c}
	e.apply(s)
	return e
}

func (e *env) apply(s *snapshot.Snapshot) {
	e.t.Helper()
	tb, err := build(s, e.reg)
	if err != nil {
		e.t.Fatalf("build: %v", err)
	}
	e.h.Store(tb)
}

func (e *env) cluster() *Cluster { return e.h.Load().Cluster("demo") }

// pick does one full first pick and reports success.
func (e *env) pick(ip netip.Addr) (Pick, error) {
	s := e.cluster().NewSelection(nil, ip)
	defer s.Release()
	p, err := s.Next()
	if err == nil {
		p.Done(Result{Status: 200})
	}
	return p, err
}

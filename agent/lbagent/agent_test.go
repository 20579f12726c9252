package lbagent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
	"github.com/sluicelb/sluice/testkit/syncbuf"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// backend is a real local HTTP backend whose health answer is scripted and
// which serves its own in-flight count as JSON on /metrics.
type backend struct {
	srv      *httptest.Server
	healthy  atomic.Bool
	probes   atomic.Int64 // /healthz hits
	inFlight atomic.Int64
	metrics  atomic.Int64 // /metrics hits
	script   func(n int64) bool
	release  chan struct{}
}

func newBackend(t *testing.T) *backend {
	b := &backend{release: make(chan struct{})}
	b.healthy.Store(true)
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			n := b.probes.Add(1)
			ok := b.healthy.Load()
			if b.script != nil {
				ok = b.script(n)
			}
			if !ok {
				w.WriteHeader(503)
				return
			}
			io.WriteString(w, "ok")
		case "/metrics":
			b.metrics.Add(1)
			fmt.Fprintf(w, `{"in_flight":%d,"requests_total":0}`, b.inFlight.Load())
		case "/slow":
			b.inFlight.Add(1)
			defer b.inFlight.Add(-1)
			<-b.release
			io.WriteString(w, "done")
		}
	}))
	t.Cleanup(b.srv.Close)
	return b
}

// slowRequest sends a request that /slow holds until b.release closes;
// its outcome arrives on the channel.
func (b *backend) slowRequest() <-chan error {
	done := make(chan error, 1)
	go func() {
		resp, err := http.Get(b.srv.URL + "/slow")
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		done <- err
	}()
	return done
}

func (b *backend) addr(t *testing.T) netip.AddrPort {
	ap, err := netip.ParseAddrPort(strings.TrimPrefix(b.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	return ap
}

func baseConfig(t *testing.T, srv *etcdtest.Server, b *backend) Config {
	return Config{
		Endpoints: srv.Endpoints, Cluster: "demo-main", SubCluster: "SC1", IDC: "IDC1",
		Addr: b.addr(t), Weight: 10, Probe: config.Probe{Body: "ok"},
		ProbeInterval: 50 * time.Millisecond, ProbeTimeout: 50 * time.Millisecond, Rise: 2, Fall: 3,
		LeaseTTL: 2 * time.Second, ReportInterval: time.Second, MinWriteGap: 50 * time.Millisecond,
		DrainMin: 100 * time.Millisecond, DrainTimeout: 20 * time.Second, DrainPoll: 20 * time.Millisecond,
		Admin: "127.0.0.1:0", Logger: quiet,
	}
}

// running is an agent started in a goroutine.
type running struct {
	a      *Agent
	cancel context.CancelFunc
	done   chan error
}

func startAgent(t *testing.T, cfg Config) *running {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{a: a, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	if cfg.Admin != "" {
		// Run binds the admin listener first; wait for it, so a test never
		// asks an empty address (CI: Get "http:///readyz").
		poll.EventuallyTrue(t, 20*time.Second, "admin up", func() bool { return a.AdminAddr() != "" })
	}
	return r
}

func (r *running) stop(t *testing.T) error {
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("agent did not stop within 20s")
		return nil
	}
}

func getInstance(t *testing.T, cli *clientv3.Client, key string) (report.Instance, clientv3.LeaseID, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return report.Instance{}, 0, false
	}
	var rec report.Instance
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		t.Fatalf("decode %s: %v", key, err)
	}
	return rec, clientv3.LeaseID(resp.Kvs[0].Lease), true
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestRegistrationContentAndCleanStop(t *testing.T) {
	srv, cli := etcdtest.New(t)
	b := newBackend(t)
	b.inFlight.Store(4)
	cfg := baseConfig(t, srv, b)
	cfg.CapacityPerWeight = 50
	cfg.Labels = map[string]string{"zone": "a", "rack": "r7"}
	cfg.MetricsURL = b.srv.URL + "/metrics"
	r := startAgent(t, cfg)
	key := "/sluice/instances/demo-main/SC1/" + b.addr(t).String()
	if r.a.Key() != key {
		t.Fatalf("key %q, want %q", r.a.Key(), key)
	}
	var got report.Instance
	var lease clientv3.LeaseID
	poll.EventuallyTrue(t, 10*time.Second, "registration with load", func() bool {
		var ok bool
		got, lease, ok = getInstance(t, cli, key)
		return ok && got.InFlight == 4
	})
	want := report.Instance{
		Cluster: "demo-main", SubCluster: "SC1", IDC: "IDC1", Addr: "127.0.0.1", Port: int(b.addr(t).Port()),
		Weight: 10, CapacityRPS: 500, Labels: map[string]string{"zone": "a", "rack": "r7"},
		AgentVersion: Version, State: "healthy", InFlight: 4,
	}
	if got.Cluster != want.Cluster || got.SubCluster != want.SubCluster || got.IDC != want.IDC || got.Addr != want.Addr ||
		got.Port != want.Port || got.Weight != want.Weight || got.CapacityRPS != want.CapacityRPS ||
		fmt.Sprint(got.Labels) != fmt.Sprint(want.Labels) || got.AgentVersion != want.AgentVersion ||
		got.State != want.State || got.Reason != "" || got.UpdatedAt.IsZero() || got.MemPercent <= 0 {
		t.Fatalf("registered %+v\nwant %+v (and updated_at, mem_percent set)", got, want)
	}
	ttl, err := cli.TimeToLive(context.Background(), lease)
	if err != nil || ttl.GrantedTTL != 2 {
		t.Fatalf("lease TTL %+v %v; want 2s", ttl, err)
	}
	admin := "http://" + r.a.AdminAddr()
	if code, body := httpGet(t, admin+"/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz %d %q", code, body)
	}
	code, body := httpGet(t, admin+"/metrics")
	for _, s := range []string{`sluice_agent_state{state="healthy"} 1`, "sluice_agent_etcd_writes_total ", `sluice_agent_probes_total{result="success"}`, "sluice_agent_backend_in_flight 4"} {
		if code != 200 || !strings.Contains(body, s) {
			t.Fatalf("/metrics (%d) lacks %q:\n%s", code, s, body)
		}
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := getInstance(t, cli, key); ok {
		t.Fatal("registration left behind after a clean stop")
	}
}

func TestKilledAgentVanishesAfterTTL(t *testing.T) {
	srv, cli := etcdtest.New(t)
	b := newBackend(t)
	cfg := baseConfig(t, srv, b)
	cfg.KeepLeaseOnExit = true
	r := startAgent(t, cfg)
	key := r.a.Key()
	poll.EventuallyTrue(t, 10*time.Second, "registration", func() bool { _, _, ok := getInstance(t, cli, key); return ok })
	r.stop(t)
	killed := time.Now()
	if _, _, ok := getInstance(t, cli, key); !ok {
		t.Fatal("key gone at once; a killed agent cannot revoke")
	}
	poll.EventuallyTrue(t, 15*time.Second, "key vanishes after the 2s TTL", func() bool { _, _, ok := getInstance(t, cli, key); return !ok })
	if d := time.Since(killed); d < time.Second {
		t.Fatalf("key vanished %s after the kill, before the TTL", d)
	}
}

// stateEvents watches key from now and records each distinct state written
// along with the backend's probe count at the moment the event arrived.
type stateEvents struct {
	mu     sync.Mutex
	states []string
	probes []int64
	puts   int
	gone   bool
}

func watchStates(t *testing.T, cli *clientv3.Client, key string, b *backend) (*stateEvents, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	head, err := cli.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	ch := cli.Watch(ctx, key, clientv3.WithRev(head.Header.Revision+1))
	ev := &stateEvents{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for resp := range ch {
			for _, e := range resp.Events {
				ev.mu.Lock()
				if e.Type == clientv3.EventTypeDelete {
					ev.gone = true
					ev.states = append(ev.states, "gone")
					ev.probes = append(ev.probes, b.probes.Load())
				} else {
					ev.puts++
					var rec report.Instance
					_ = json.Unmarshal(e.Kv.Value, &rec)
					if n := len(ev.states); n == 0 || ev.states[n-1] != rec.State {
						ev.states = append(ev.states, rec.State)
						ev.probes = append(ev.probes, b.probes.Load())
					}
				}
				ev.mu.Unlock()
			}
		}
	}()
	return ev, func() { cancel(); <-done }
}

func (e *stateEvents) snapshot() ([]string, []int64, int, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.states...), append([]int64(nil), e.probes...), e.puts, e.gone
}

func TestFallThenRise(t *testing.T) {
	srv, cli := etcdtest.New(t)
	b := newBackend(t)
	// Probes 1-5 pass, 6-7 fail (fewer than fall=3), 8 passes, 9-11 fail
	// (fall reached at 11), 12 passes, 13 fails, 14-15 pass (rise=2 at 15).
	fails := map[int64]bool{6: true, 7: true, 9: true, 10: true, 11: true, 13: true}
	b.script = func(n int64) bool { return !fails[n] }
	cfg := baseConfig(t, srv, b)
	// The script counts the backend's answers: a probe timing out on a
	// loaded machine turns an answered success into a failure the script
	// does not count (GOMAXPROCS=1 at load 25: "healthy again after probe
	// 17" with 50 ms, "unhealthy written after probe 9" once in 20 runs
	// with 300 ms). 1 s to answer: the timeout is a safety net here. The
	// lease's 2 s TTL is not checked either: over the ~16 s of probes it
	// expired once under that load (states "healthy unhealthy gone").
	cfg.ProbeInterval, cfg.ProbeTimeout = time.Second, time.Second
	cfg.LeaseTTL = DefaultLeaseTTL
	ev, stopWatch := watchStates(t, cli, "/sluice/instances/demo-main/SC1/"+b.addr(t).String(), b)
	defer stopWatch()
	startAgent(t, cfg)
	poll.EventuallyTrue(t, 20*time.Second, "healthy → unhealthy → healthy", func() bool {
		s, _, _, _ := ev.snapshot()
		return len(s) >= 3
	})
	states, probes, _, _ := ev.snapshot()
	if fmt.Sprint(states[:3]) != "[healthy unhealthy healthy]" {
		t.Fatalf("states %v", states)
	}
	if probes[1] < 11 || probes[1] > 12 {
		t.Fatalf("unhealthy written after probe %d; want after probe 11 (fall=3 consecutive failures)", probes[1])
	}
	if probes[2] < 15 || probes[2] > 16 {
		t.Fatalf("healthy again after probe %d; want after probe 15 (rise=2 consecutive successes)", probes[2])
	}
}

func TestDrainWaitsForInFlightThenRevokes(t *testing.T) {
	srv, cli := etcdtest.New(t)
	b := newBackend(t)
	cfg := baseConfig(t, srv, b)
	cfg.MetricsURL = b.srv.URL + "/metrics"
	r := startAgent(t, cfg)
	key := r.a.Key()
	poll.EventuallyTrue(t, 10*time.Second, "registered healthy", func() bool { rec, _, ok := getInstance(t, cli, key); return ok && rec.State == "healthy" })
	ev, stopWatch := watchStates(t, cli, key, b)
	defer stopWatch()

	// A slow request is in flight when the drain starts.
	reqDone := b.slowRequest()
	poll.EventuallyTrue(t, 20*time.Second, "request in flight", func() bool { return b.inFlight.Load() == 1 })

	// Drain through the admin API, as `lbagent drain` does.
	resp, err := http.Post("http://"+r.a.AdminAddr()+"/drain", "", nil)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /drain: %v %v", resp, err)
	}
	resp.Body.Close()
	drainAt := time.Now()
	poll.EventuallyTrue(t, 20*time.Second, "draining written", func() bool { s, _, _, _ := ev.snapshot(); return len(s) > 0 && s[0] == "draining" })
	rec, _, _ := getInstance(t, cli, key)
	if rec.Reason != "drain requested on the admin API" {
		t.Fatalf("reason %q", rec.Reason)
	}
	// Well past drain-min, with in-flight read as 1 many times, the
	// registration must still be there.
	m0 := b.metrics.Load()
	poll.EventuallyTrue(t, 10*time.Second, "agent polled in-flight past drain-min", func() bool {
		return b.metrics.Load() >= m0+10 && time.Since(drainAt) > 5*cfg.DrainMin
	})
	if _, _, _, gone := ev.snapshot(); gone {
		t.Fatal("registration removed while a request was in flight")
	}
	if _, _, ok := getInstance(t, cli, key); !ok {
		t.Fatal("registration removed while a request was in flight")
	}
	close(b.release)
	if err := <-reqDone; err != nil {
		t.Fatalf("slow request failed: %v", err)
	}
	completed := time.Now()
	r.waitRunEnded(t, "agent did not exit after the drain")
	poll.EventuallyTrue(t, 20*time.Second, "delete event seen", func() bool { _, _, _, gone := ev.snapshot(); return gone })
	states, _, _, _ := ev.snapshot()
	if fmt.Sprint(states) != "[draining gone]" {
		t.Fatalf("sequence %v; want [draining gone]", states)
	}
	if _, _, ok := getInstance(t, cli, key); ok {
		t.Fatal("key still present after the drain")
	}
	t.Logf("drain ended %s after the slow request completed", time.Since(completed).Round(time.Millisecond))
}

// A drain that --drain-timeout ends while the backend still has a
// request in flight is not logged "drain complete": a warning says it
// timed out, with the in-flight count.
func TestDrainTimeoutIsNotLoggedComplete(t *testing.T) {
	srv, _ := etcdtest.New(t)
	b := newBackend(t)
	cfg := baseConfig(t, srv, b)
	cfg.MetricsURL = b.srv.URL + "/metrics"
	cfg.DrainTimeout = 500 * time.Millisecond
	var logs syncbuf.Buffer
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	r := startAgent(t, cfg)
	poll.EventuallyTrue(t, 10*time.Second, "registered", func() bool { _, ok := r.a.Current(); return ok && r.a.Writes() > 0 })
	reqDone := b.slowRequest()
	defer func() { close(b.release); <-reqDone }()
	poll.EventuallyTrue(t, 20*time.Second, "request in flight", func() bool { return b.inFlight.Load() == 1 })
	r.a.Drain("SIGTERM")
	r.waitRunEnded(t, "drain did not end at its timeout")
	out := logs.String()
	if strings.Contains(out, "drain complete") || !strings.Contains(out, `"level":"WARN","msg":"drain timed out before the backend's in-flight count read 0; revoking lease"`) ||
		!strings.Contains(out, `"in_flight":1`) {
		t.Fatalf("logs of a drain ended by its timeout with a request in flight:\n%s", out)
	}
}

// waitRunEnded waits up to 15 s for the agent's Run to return nil after a
// drain; stuck names the failure.
func (r *running) waitRunEnded(t *testing.T, stuck string) {
	t.Helper()
	select {
	case err := <-r.done:
		close(r.done)
		if err != nil {
			t.Fatalf("Run after drain: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal(stuck)
	}
}

func TestDrainWithoutMetricsEndsAfterDrainMin(t *testing.T) {
	srv, cli := etcdtest.New(t)
	b := newBackend(t)
	cfg := baseConfig(t, srv, b)
	cfg.DrainMin = 300 * time.Millisecond
	r := startAgent(t, cfg)
	key := r.a.Key()
	poll.EventuallyTrue(t, 10*time.Second, "registered", func() bool { _, _, ok := getInstance(t, cli, key); return ok })
	start := time.Now()
	r.a.Drain("SIGTERM")
	r.waitRunEnded(t, "drain did not end")
	if d := time.Since(start); d < cfg.DrainMin {
		t.Fatalf("drain took %s, less than drain-min %s", d, cfg.DrainMin)
	}
	if _, _, ok := getInstance(t, cli, key); ok {
		t.Fatal("key present after drain")
	}
}

func TestEtcdRestartReRegisters(t *testing.T) {
	srv, cli := etcdtest.New(t)
	b := newBackend(t)
	cfg := baseConfig(t, srv, b)
	// The record's reason is the last failed probe's: one timing out under
	// load wrote "probe timeout: timeout after 50ms", not the 503 checked.
	cfg.ProbeInterval, cfg.ProbeTimeout = 300*time.Millisecond, 300*time.Millisecond
	r := startAgent(t, cfg)
	key := r.a.Key()
	var first clientv3.LeaseID
	poll.EventuallyTrue(t, 10*time.Second, "registered", func() bool {
		rec, l, ok := getInstance(t, cli, key)
		first = l
		return ok && rec.State == "healthy"
	})
	srv.Stop()
	// The backend fails during the outage; the agent cannot write it yet.
	b.healthy.Store(false)
	t0 := time.Now()
	poll.EventuallyTrue(t, 20*time.Second, "agent notices the lost lease", func() bool { return r.a.reg.Load().Lease() == 0 })
	t.Logf("lease loss noticed after %s", time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	poll.EventuallyTrue(t, 30*time.Second, "re-registered with a new lease and the state learned during the outage", func() bool {
		rec, l, ok := getInstance(t, cli, key)
		if !ok || l == first || rec.State != "unhealthy" {
			return false
		}
		ttl, err := cli.TimeToLive(context.Background(), l)
		return err == nil && ttl.TTL > 0
	})
	t.Logf("re-registered %s after the restart began", time.Since(t0).Round(time.Millisecond))
	rec, _, _ := getInstance(t, cli, key)
	if !strings.Contains(rec.Reason, "status 503 not in 2xx") {
		t.Fatalf("reason %q", rec.Reason)
	}
}

func TestFlappingBackendBoundedWrites(t *testing.T) {
	srv, cli := etcdtest.New(t)
	b := newBackend(t)
	b.script = func(n int64) bool { return n%2 == 0 } // every probe flips
	cfg := baseConfig(t, srv, b)
	cfg.ProbeInterval, cfg.ProbeTimeout = 20*time.Millisecond, 20*time.Millisecond
	cfg.Rise, cfg.Fall = 1, 1
	cfg.MinWriteGap = 250 * time.Millisecond
	cfg.ReportInterval = time.Hour
	ev, stopWatch := watchStates(t, cli, "/sluice/instances/demo-main/SC1/"+b.addr(t).String(), b)
	defer stopWatch()
	start := time.Now()
	r := startAgent(t, cfg)
	poll.EventuallyTrue(t, 20*time.Second, "60 flapping probes", func() bool { return b.probes.Load() >= 60 })
	r.stop(t)
	elapsed := time.Since(start)
	poll.EventuallyTrue(t, 20*time.Second, "delete seen", func() bool { _, _, _, gone := ev.snapshot(); return gone })
	_, _, puts, _ := ev.snapshot()
	bound := int(elapsed/cfg.MinWriteGap) + 2
	t.Logf("%d probes (each a state change) in %s → %d writes; bound %d", b.probes.Load(), elapsed.Round(time.Millisecond), puts, bound)
	// A write cut off by the stop may be applied by etcd without the agent
	// hearing back: etcd may see one more than the agent counted.
	if w := r.a.Writes(); int64(puts) != w && int64(puts) != w+1 {
		t.Fatalf("etcd saw %d writes, agent counted %d", puts, w)
	}
	if puts < 2 || puts > bound {
		t.Fatalf("%d writes; want 2..%d", puts, bound)
	}
}

func TestAdminTokenAndConfigErrors(t *testing.T) {
	srv, _ := etcdtest.New(t)
	b := newBackend(t)
	cfg := baseConfig(t, srv, b)
	cfg.AdminToken = "s3cret"
	r := startAgent(t, cfg)
	poll.EventuallyTrue(t, 20*time.Second, "admin up", func() bool { return r.a.AdminAddr() != "" })
	admin := "http://" + r.a.AdminAddr()
	resp, err := http.Post(admin+"/drain", "", nil)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("drain without token: %v %v", resp, err)
	}
	resp.Body.Close()
	if code, _ := httpGet(t, admin+"/healthz"); code != 200 {
		t.Fatalf("/healthz needs no token; got %d", code)
	}
	if _, ok := r.a.Current(); ok {
		if cur, _ := r.a.Current(); cur.State == "draining" {
			t.Fatal("unauthorized drain was honoured")
		}
	}

	bad := []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Cluster = "../x" }, "cluster: name"},
		{func(c *Config) { c.Addr = netip.AddrPort{} }, "addr:"},
		{func(c *Config) { c.Endpoints = nil }, "etcd: no endpoints"},
		{func(c *Config) { c.Admin = "0.0.0.0:9102"; c.AdminToken = "" }, "admin token is required"},
		{func(c *Config) { c.Probe.Status = "99" }, "probe.status"},
		{func(c *Config) { c.ProbeTimeout = 5 * time.Second }, "probe-timeout: 5s must not exceed probe-interval"},
		{func(c *Config) { c.Rise = -1 }, "rise: -1"},
		{func(c *Config) { c.DrainMin = time.Minute }, "drain-min: 1m0s must not exceed drain-timeout"},
	}
	for _, tc := range bad {
		c := baseConfig(t, srv, b)
		tc.mod(&c)
		if _, err := New(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want error containing %q, got %v", tc.want, err)
		}
	}
}

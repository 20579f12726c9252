package lbscheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
	"github.com/sluicelb/sluice/scheduler/internal/publish"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var layout = keys.MustNew("/sluice")

// desired returns a valid desired state; extra static instances are added to
// SC2 (a cheap way to make the next snapshot differ).
func desired(extra int, grace string) string {
	var sc2 []string
	sc2 = append(sc2, `{"addr": "127.0.0.1", "port": 8002, "weight": 10, "capacity_rps": 1000}`)
	for i := range extra {
		sc2 = append(sc2, fmt.Sprintf(`{"addr": "10.9.9.%d", "port": 80, "weight": 10, "capacity_rps": 1000}`, i+1))
	}
	return `{
  "topology": {"idcs": ["IDC1", "IDC2"], "proxy_clusters": {"BFE1": {"idc": "IDC1"}, "BFE2": {"idc": "IDC2"}}},
  "products": {"demo": {"hosts": ["demo.example"], "rules": [{"cond": "default_t()", "cluster": "demo-main"}]}},
  "default_product": "demo",
  "clusters": {"demo-main": {"subclusters": {
    "SC1": {"idc": "IDC1", "instances": [{"addr": "127.0.0.1", "port": 8001, "weight": 10, "capacity_rps": 1000}]},
    "SC2": {"idc": "IDC2", "instances": [` + strings.Join(sc2, ",") + `]}
  }}},
  "scheduler": {"instance_grace": "` + grace + `", "max_step_percent": 100, "history": 5}
}`
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func startScheduler(t *testing.T, srv *etcdtest.Server, id string, now func() time.Time) *Scheduler {
	t.Helper()
	return startConfig(t, srv, Config{
		ID: id, APIAddr: "127.0.0.1:0", SessionTTL: 2 * time.Second,
		Debounce: 10 * time.Millisecond, Now: now, Logger: quietLogger(),
	})
}

// startConfig starts a scheduler with cfg on its own client of srv; both
// stop at cleanup.
func startConfig(t *testing.T, srv *etcdtest.Server, cfg Config) *Scheduler {
	t.Helper()
	cli, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Client = cli
	s, err := Start(context.Background(), cfg)
	if err != nil {
		cli.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Stop()
		cli.Close()
	})
	return s
}

func put(t *testing.T, cli *clientv3.Client, k, v string, opts ...clientv3.OpOption) {
	t.Helper()
	if _, err := cli.Put(context.Background(), k, v, opts...); err != nil {
		t.Fatal(err)
	}
}

// live reads BFE1's live snapshot (nil if none) and checks it is valid.
func live(t *testing.T, cli *clientv3.Client, pc string) *snapshot.Snapshot {
	t.Helper()
	p := publish.New(cli, layout, publish.Options{})
	ptr, _, err := p.Current(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	if ptr.Version == 0 {
		return nil
	}
	s, err := p.Load(context.Background(), pc, ptr.Version)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Snapshot(s); err != nil {
		t.Fatalf("published snapshot v%d is invalid: %v", s.Meta.Version, err)
	}
	return s
}

func instances(s *snapshot.Snapshot, sub string) map[string]bool {
	out := map[string]bool{}
	for _, i := range s.Clusters["demo-main"].SubClusters[sub].Instances {
		out[fmt.Sprintf("%s:%d", i.Addr, i.Port)] = true
	}
	return out
}

func leaders(ss ...*Scheduler) (n int, l *Scheduler) {
	for _, s := range ss {
		if s.IsLeader() {
			n++
			l = s
		}
	}
	return n, l
}

func TestTwoSchedulersOneLeaderFailover(t *testing.T) {
	srv, cli := etcdtest.New(t)
	put(t, cli, layout.Desired(), desired(0, "30s"))
	a := startScheduler(t, srv, "S1", nil)
	b := startScheduler(t, srv, "S2", nil)
	poll.EventuallyTrue(t, 20*time.Second, "one leader and v1 for both proxy clusters", func() bool {
		n, _ := leaders(a, b)
		s1, s2 := live(t, cli, "BFE1"), live(t, cli, "BFE2")
		return n == 1 && s1 != nil && s2 != nil
	})
	_, lead := leaders(a, b)
	other := a
	if lead == a {
		other = b
	}
	v1 := live(t, cli, "BFE1")
	if v1.Meta.Version != 1 || v1.Meta.Author != "lbscheduler/"+lead.cfg.ID || v1.Meta.Reason != "initial snapshot" {
		t.Fatalf("v1 meta %+v", v1.Meta)
	}
	// The follower computes too: its API shows the plan.
	poll.EventuallyTrue(t, 20*time.Second, "follower plan", func() bool {
		code, body := get(t, other, "/v1/plan")
		return code == 200 && strings.Contains(body, `"leader": false`) && strings.Contains(body, `"BFE1"`)
	})
	if err := lead.Stop(); err != nil {
		t.Fatal(err)
	}
	poll.EventuallyTrue(t, 20*time.Second, "the other scheduler leads", other.IsLeader)
	put(t, cli, layout.Desired(), desired(1, "30s"))
	poll.EventuallyTrue(t, 20*time.Second, "v2 by the new leader", func() bool {
		s := live(t, cli, "BFE1")
		return s.Meta.Version == 2
	})
	v2 := live(t, cli, "BFE1")
	if v2.Meta.Author != "lbscheduler/"+other.cfg.ID || v2.Meta.Parent != 1 || !instances(v2, "SC2")["10.9.9.1:80"] {
		t.Fatalf("v2 %+v", v2.Meta)
	}
	if !strings.Contains(v2.Meta.Reason, "members demo-main/SC2") {
		t.Fatalf("reason %q does not name the change", v2.Meta.Reason)
	}
	// What-if: computed, not published.
	code, body := post(t, other, "/v1/plan", `{"drain": "demo-main/SC1"}`)
	if code != 200 || !strings.Contains(body, `"what_if": true`) || !strings.Contains(body, `"BFE1"`) {
		t.Fatalf("what-if: %d %s", code, body)
	}
	if code, body := post(t, other, "/v1/plan", `{"drain": "demo-main"}`); code != 400 {
		t.Fatalf("bad what-if: %d %s", code, body)
	}
	if v := live(t, cli, "BFE1").Meta.Version; v != 2 {
		t.Fatalf("a what-if was published: live v%d", v)
	}
	code, body = get(t, other, "/v1/history?proxy_cluster=BFE1")
	if code != 200 || !strings.Contains(body, `"version": 2`) {
		t.Fatalf("history: %d %s", code, body)
	}
	code, body = get(t, other, "/metrics")
	for _, want := range []string{"sluice_scheduler_leader 1", `sluice_scheduler_publishes_total{result="published"}`, "sluice_scheduler_compute_seconds_count", "sluice_scheduler_input_staleness_seconds", "sluice_scheduler_projected_utilisation_ratio"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Fatalf("metrics lack %q", want)
		}
	}
}

func TestSessionLossStepsDownAndFencesOldTerm(t *testing.T) {
	srv, cli := etcdtest.New(t)
	put(t, cli, layout.Desired(), desired(0, "30s"))
	a := startScheduler(t, srv, "S1", nil)
	poll.EventuallyTrue(t, 20*time.Second, "leader with v1", func() bool { return a.IsLeader() && live(t, cli, "BFE1") != nil })
	old := a.lead.Load()
	// The session lease is lost (as after a pause past the TTL).
	if _, err := cli.Revoke(context.Background(), old.Lease()); err != nil {
		t.Fatal(err)
	}
	poll.EventuallyTrue(t, 20*time.Second, "a new term", func() bool { l := a.lead.Load(); return l != nil && l.Rev != old.Rev })
	// The old term cannot publish.
	before := a.pub.Count("fenced")
	stale := *live(t, cli, "BFE1")
	stale.Meta.Hash = ""
	stale.Settings.TrustedProxies = []string{"10.0.0.0/8"}
	if _, err := a.pub.Publish(context.Background(), publish.NewLeadership(old.Key, old.Rev), &stale, "stale"); err == nil || a.pub.Count("fenced") != before+1 {
		t.Fatalf("stale term published: %v (fenced %v)", err, a.pub.Count("fenced"))
	}
	put(t, cli, layout.Desired(), desired(2, "30s"))
	poll.EventuallyTrue(t, 20*time.Second, "v2 in the new term", func() bool { return live(t, cli, "BFE1").Meta.Version == 2 })
}

func get(t *testing.T, s *Scheduler, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.APIAddr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func post(t *testing.T, s *Scheduler, path, body string) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+s.APIAddr()+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestMassAgentLossDebounced(t *testing.T) {
	srv, cli := etcdtest.New(t)
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	put(t, cli, layout.Desired(), desired(0, "30s"))
	lease, err := cli.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	agents := []string{"127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"}
	for _, a := range agents {
		k, _ := layout.Instance("demo-main", "SC1", netip.MustParseAddrPort(a))
		b, _ := json.Marshal(report.Instance{Cluster: "demo-main", SubCluster: "SC1", Weight: 10, CapacityRPS: 1000, State: config.StateHealthy})
		put(t, cli, k, string(b), clientv3.WithLease(lease.ID))
	}
	s := startScheduler(t, srv, "S1", clk.Now)
	poll.EventuallyTrue(t, 20*time.Second, "agents published", func() bool {
		l := live(t, cli, "BFE1")
		return l != nil && len(instances(l, "SC1")) == 4
	})
	// Every agent vanishes at once.
	if _, err := cli.Revoke(context.Background(), lease.ID); err != nil {
		t.Fatal(err)
	}
	poll.EventuallyTrue(t, 20*time.Second, "debounce seen", func() bool { return s.inv.View().Debounced == 3 })
	put(t, cli, layout.Desired(), desired(1, "30s"))
	poll.EventuallyTrue(t, 20*time.Second, "next version", func() bool { return instances(live(t, cli, "BFE1"), "SC2")["10.9.9.1:80"] })
	if got := instances(live(t, cli, "BFE1"), "SC1"); len(got) != 4 {
		t.Fatalf("SC1 lost instances within the grace period: %v", got)
	}
	clk.Add(31 * time.Second)
	put(t, cli, layout.Desired(), desired(2, "30s"))
	poll.EventuallyTrue(t, 20*time.Second, "after grace", func() bool {
		l := live(t, cli, "BFE1")
		return instances(l, "SC2")["10.9.9.2:80"] && len(instances(l, "SC1")) == 1
	})
}

func TestShiftRampPublishesStepsWithProgress(t *testing.T) {
	srv, cli := etcdtest.New(t)
	put(t, cli, layout.Desired(), desired(0, "30s"))
	startScheduler(t, srv, "S1", nil)
	poll.EventuallyTrue(t, 20*time.Second, "v1", func() bool { return live(t, cli, "BFE1") != nil })
	base := live(t, cli, "BFE1").Clusters["demo-main"].Row.Weights
	if base["SC1"] < 20 {
		t.Fatalf("base row %v: want SC1 ≥ 20 for the shift to move 20 points", base)
	}
	pk, _ := layout.ShiftProgress("s1")
	wch := cli.Watch(context.Background(), pk)
	sh := config.Shift{ID: "s1", ProxyCluster: "BFE1", Cluster: "demo-main", From: "IDC1", To: "IDC2",
		Percent: 20, StepPercent: 10, Ramp: config.Duration(2 * time.Second), State: config.ShiftPending}
	raw, _ := json.Marshal(sh)
	sk, _ := layout.Shift("s1")
	put(t, cli, sk, string(raw))
	var seen []config.ShiftProgress
	deadline := time.After(20 * time.Second)
	for len(seen) == 0 || seen[len(seen)-1].State != config.ShiftDone {
		select {
		case wr := <-wch:
			for _, ev := range wr.Events {
				var p config.ShiftProgress
				if err := json.Unmarshal(ev.Kv.Value, &p); err != nil {
					t.Fatal(err)
				}
				seen = append(seen, p)
			}
		case <-deadline:
			t.Fatalf("shift not done; progress %+v", seen)
		}
	}
	if len(seen) < 2 || seen[0].AppliedPercent != 10 || seen[len(seen)-1].AppliedPercent != 20 {
		t.Fatalf("progress %+v, want 10 then 20", seen)
	}
	p := publish.New(cli, layout, publish.Options{})
	for _, pr := range seen {
		s, err := p.Load(context.Background(), "BFE1", pr.Version)
		if err != nil {
			t.Fatal(err)
		}
		w := s.Clusters["demo-main"].Row.Weights
		if w["SC1"] != base["SC1"]-pr.AppliedPercent || w["SC2"] != base["SC2"]+pr.AppliedPercent {
			t.Fatalf("v%d row %v with %d points applied; base %v", pr.Version, w, pr.AppliedPercent, base)
		}
		if !strings.Contains(s.Meta.Reason, fmt.Sprintf("shift s1 %d/20", pr.AppliedPercent)) {
			t.Fatalf("reason %q", s.Meta.Reason)
		}
	}
	// Abort: the row goes back.
	sh.State = config.ShiftAborted
	raw, _ = json.Marshal(sh)
	put(t, cli, sk, string(raw))
	poll.EventuallyTrue(t, 20*time.Second, "row back after abort", func() bool {
		w := live(t, cli, "BFE1").Clusters["demo-main"].Row.Weights
		return w["SC1"] == base["SC1"] && w["SC2"] == base["SC2"]
	})
	poll.EventuallyTrue(t, 20*time.Second, "progress aborted", func() bool {
		r, err := cli.Get(context.Background(), pk)
		return err == nil && len(r.Kvs) == 1 && strings.Contains(string(r.Kvs[0].Value), `"state":"aborted"`)
	})
}

// TestGraceExpiryRepublishesWithoutOtherChanges: nothing else changes after
// the agents vanish; the loop wakes itself when the grace period ends.
func TestGraceExpiryRepublishesWithoutOtherChanges(t *testing.T) {
	srv, cli := etcdtest.New(t)
	put(t, cli, layout.Desired(), desired(0, "1s"))
	lease, err := cli.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := layout.Instance("demo-main", "SC1", netip.MustParseAddrPort("127.0.0.1:9001"))
	b, _ := json.Marshal(report.Instance{Weight: 10, CapacityRPS: 1000, State: config.StateHealthy})
	put(t, cli, k, string(b), clientv3.WithLease(lease.ID))
	startScheduler(t, srv, "S1", nil)
	poll.EventuallyTrue(t, 20*time.Second, "agent published", func() bool {
		l := live(t, cli, "BFE1")
		return l != nil && instances(l, "SC1")["127.0.0.1:9001"]
	})
	v := live(t, cli, "BFE1").Meta.Version
	if _, err := cli.Revoke(context.Background(), lease.ID); err != nil {
		t.Fatal(err)
	}
	poll.EventuallyTrue(t, 20*time.Second, "agent removed after grace", func() bool { return !instances(live(t, cli, "BFE1"), "SC1")["127.0.0.1:9001"] })
	if got := live(t, cli, "BFE1").Meta.Version; got != v+1 {
		t.Fatalf("version %d after grace, want %d (one publish, not one per event)", got, v+1)
	}
}

package inventory

import (
	"context"
	"encoding/json"
	"net/netip"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const desired = `{
  "topology": {"idcs": ["IDC1", "IDC2"], "proxy_clusters": {"BFE1": {"idc": "IDC1"}, "BFE2": {"idc": "IDC2"}}},
  "products": {"demo": {"hosts": ["demo.example"], "rules": [{"cond": "default_t()", "cluster": "demo-main"}]}},
  "default_product": "demo",
  "clusters": {"demo-main": {"subclusters": {
    "SC1": {"idc": "IDC1", "instances": [{"addr": "10.0.0.1", "port": 80, "weight": 1}]},
    "SC2": {"idc": "IDC2"}
  }}},
  "scheduler": {"instance_grace": "30s"}
}`

var layout = keys.MustNew("/sluice")

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

func start(t *testing.T, cli *clientv3.Client, clk *clock) *Inventory {
	t.Helper()
	inv := New(cli, layout, Options{Now: clk.Now})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { inv.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return inv
}

func put(t *testing.T, cli *clientv3.Client, k, v string, opts ...clientv3.OpOption) int64 {
	t.Helper()
	r, err := cli.Put(context.Background(), k, v, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r.Header.Revision
}

func instKey(t *testing.T, cluster, sub, addr string) string {
	k, err := layout.Instance(cluster, sub, netip.MustParseAddrPort(addr))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func instJSON(t *testing.T, state string, weight int) string {
	b, _ := json.Marshal(report.Instance{Weight: weight, CapacityRPS: 500, State: state})
	return string(b)
}

func addrs(v View, c, s string) map[string]string {
	out := map[string]string{}
	for _, i := range v.Members[c][s] {
		out[netip.AddrPortFrom(netip.MustParseAddr(i.Addr), uint16(i.Port)).String()] = i.State
	}
	return out
}

func TestDesiredStateInvalidKeepsLastValid(t *testing.T) {
	_, cli := etcdtest.New(t)
	inv := start(t, cli, &clock{t: time.Unix(0, 0)})
	poll.EventuallyTrue(t, 10*time.Second, "synced", inv.Synced)
	if inv.View().State != nil {
		t.Fatal("state before any was written")
	}
	rev := put(t, cli, layout.Desired(), desired)
	poll.EventuallyTrue(t, 10*time.Second, "state", func() bool { return inv.View().StateRevision == rev })
	if g := inv.View().State.Scheduler.InstanceGrace.D(); g != 30*time.Second {
		t.Fatalf("grace %v", g)
	}
	// Unknown field and a wrong type: ignored, last valid state kept.
	put(t, cli, layout.Desired(), `{"topology": {"idcs": []}, "bogus": 1}`)
	put(t, cli, layout.Desired()+"-old", `{}`) // a different key with the same prefix
	marker := put(t, cli, layout.ShiftsPrefix()+"zz", `{"id":"zz","state":"pending"}`)
	poll.EventuallyTrue(t, 10*time.Second, "marker shift", func() bool { _, ok := inv.View().Shifts["zz"]; return ok })
	if v := inv.View(); v.StateRevision != rev || v.State == nil || marker <= rev {
		t.Fatalf("invalid desired state replaced the valid one: rev %d", v.StateRevision)
	}
	// Deleting the key keeps the last valid state too.
	if _, err := cli.Delete(context.Background(), layout.Desired()); err != nil {
		t.Fatal(err)
	}
	put(t, cli, layout.ShiftsPrefix()+"zy", `{"id":"zy","state":"pending"}`)
	poll.EventuallyTrue(t, 10*time.Second, "marker shift 2", func() bool { _, ok := inv.View().Shifts["zy"]; return ok })
	if inv.View().StateRevision != rev {
		t.Fatal("deleting the desired state dropped it")
	}
}

func TestInstancesMergedDebouncedAndDemandSummed(t *testing.T) {
	_, cli := etcdtest.New(t)
	clk := &clock{t: time.Unix(1000, 0)}
	inv := start(t, cli, clk)
	put(t, cli, layout.Desired(), desired)
	lease, err := cli.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	put(t, cli, instKey(t, "demo-main", "SC1", "10.0.0.1:80"), instJSON(t, config.StateUnhealthy, 1), clientv3.WithLease(lease.ID))
	put(t, cli, instKey(t, "demo-main", "SC1", "127.0.0.1:8001"), instJSON(t, config.StateHealthy, 2), clientv3.WithLease(lease.ID))
	put(t, cli, instKey(t, "demo-main", "SC2", "127.0.0.1:8002"), instJSON(t, config.StateDraining, 2))
	put(t, cli, instKey(t, "demo-main", "SC9", "127.0.0.1:8009"), instJSON(t, config.StateHealthy, 2))
	put(t, cli, instKey(t, "nope", "SC1", "127.0.0.1:8010"), instJSON(t, config.StateHealthy, 2))
	put(t, cli, instKey(t, "demo-main", "SC2", "127.0.0.1:8003"), `{"state":"sleepy","weight":1}`)
	for _, d := range []struct {
		id  string
		rps float64
	}{{"p1", 100}, {"p2", 50.5}} {
		k, _ := layout.Demand("BFE1", d.id)
		b, _ := json.Marshal(report.Demand{ProxyCluster: "BFE1", ID: d.id, Clusters: map[string]report.ClusterDemand{"demo-main": {RPS: d.rps}}})
		put(t, cli, k, string(b))
	}
	poll.EventuallyTrue(t, 10*time.Second, "members and demand", func() bool {
		v := inv.View()
		return len(v.Members["demo-main"]["SC1"]) == 2 && len(v.Members["demo-main"]["SC2"]) == 1 && v.Demand["BFE1"]["demo-main"] == 150.5
	})
	v := inv.View()
	want1 := map[string]string{"10.0.0.1:80": config.StateUnhealthy, "127.0.0.1:8001": config.StateHealthy}
	if got := addrs(v, "demo-main", "SC1"); !equal(got, want1) {
		t.Fatalf("SC1 %v, want %v (static replaced by the agent report)", got, want1)
	}
	if v.Members["demo-main"]["SC1"][1].CapacityRPS != 500 || v.Members["demo-main"]["SC1"][1].Weight != 2 {
		t.Fatalf("agent instance %+v", v.Members["demo-main"]["SC1"][1])
	}
	if _, ok := v.Members["nope"]; ok {
		t.Fatal("unknown cluster added")
	}
	// Mass loss: the lease goes, both SC1 agents vanish; the draining SC2 one
	// is deleted too and leaves at once.
	if _, err := cli.Revoke(context.Background(), lease.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(context.Background(), instKey(t, "demo-main", "SC2", "127.0.0.1:8002")); err != nil {
		t.Fatal(err)
	}
	poll.EventuallyTrue(t, 10*time.Second, "debounce", func() bool { v := inv.View(); return v.Debounced == 2 && len(v.Members["demo-main"]["SC2"]) == 0 })
	v = inv.View()
	if got := addrs(v, "demo-main", "SC1"); !equal(got, want1) {
		t.Fatalf("SC1 during grace %v, want %v", got, want1)
	}
	if !v.NextExpiry.Equal(time.Unix(1030, 0)) {
		t.Fatalf("next expiry %v", v.NextExpiry)
	}
	clk.Add(29 * time.Second)
	if v := inv.View(); v.Debounced != 2 {
		t.Fatalf("removed before the grace ended")
	}
	clk.Add(time.Second)
	v = inv.View()
	// The static instance stays (as declared), the agent-only one is gone.
	if got := addrs(v, "demo-main", "SC1"); !equal(got, map[string]string{"10.0.0.1:80": ""}) || v.Debounced != 0 {
		t.Fatalf("after grace: %v debounced %d", got, v.Debounced)
	}
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestResyncAfterEtcdRestart(t *testing.T) {
	srv, cli := etcdtest.New(t)
	inv := New(cli, layout, Options{StallTimeout: 500 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { inv.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	put(t, cli, layout.Desired(), desired)
	poll.EventuallyTrue(t, 10*time.Second, "state", func() bool { return inv.View().State != nil })
	srv.Stop()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	k, _ := layout.Demand("BFE2", "p1")
	b, _ := json.Marshal(report.Demand{Clusters: map[string]report.ClusterDemand{"demo-main": {RPS: 7}}})
	put(t, cli, k, string(b))
	poll.EventuallyTrue(t, 10*time.Second, "demand after restart", func() bool { return inv.View().Demand["BFE2"]["demo-main"] == 7 })
	if inv.Staleness() > time.Minute {
		t.Fatalf("staleness %v after resync", inv.Staleness())
	}
}

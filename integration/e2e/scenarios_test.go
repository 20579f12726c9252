//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/integration/fleet"
)

var demoMainFull = map[string]int{"SC1": 3, "SC2": 3}

// splitLoad sends n requests spread over the proxies of pc.
func splitLoad(f *fleet.Fleet, pc string, n, ipOffset int) []outcome {
	ps := f.ProxiesOf(pc)
	var all []outcome
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(1)
		go func(i int, url string) {
			defer wg.Done()
			o := load(url+"/", n/len(ps), 16, ipOffset+i*n/len(ps))
			mu.Lock()
			all = append(all, o...)
			mu.Unlock()
		}(i, p.URL)
	}
	wg.Wait()
	return all
}

func demoMainTotal(t *testing.T, f *fleet.Fleet) int64 {
	t.Helper()
	var sum int64
	for _, b := range f.BackendsOf("demo-main", "") {
		n, err := backendTotal(b)
		if err != nil {
			t.Fatal(err)
		}
		sum += n
	}
	return sum
}

// Scenario 1: the pinned row 45/45/10 on BFE1 is realised within ±2 points
// over 20 000 client IPs, and no blackholed request reaches a backend (D1).
func TestPinnedRowShares(t *testing.T) {
	f := startFleet(t, fleet.Options{})
	waitInstances(t, f, "BFE1", "demo-main", demoMainFull)
	waitApplied(t, f, "BFE1", 30*time.Second)

	before := demoMainTotal(t, f)
	outs := splitLoad(f, "BFE1", 20000, 0)
	pct, counts := shares(outs)
	t.Logf("BFE1 realised shares over %d requests: %v (counts %v)", len(outs), pct, counts)
	within(t, pct, map[string]float64{"SC1": 45, "SC2": 45, "BLACKHOLE": 10}, 2)
	reached := demoMainTotal(t, f) - before
	served := int64(counts["SC1"] + counts["SC2"])
	t.Logf("D1: %d blackholed requests; backends received %d requests for %d served", counts["BLACKHOLE"], reached, served)
	if reached != served {
		t.Errorf("D1: backends received %d requests, but only %d were served: blackholed requests reached a backend or requests were retried", reached, served)
	}
}

// Scenario 2: lbctl shift moves 30 points of BFE1's demo-main traffic from
// IDC1 to IDC2; rollout status --wait exits 0; the shares follow.
func TestShiftRollout(t *testing.T) {
	f := startFleet(t, fleet.Options{})
	waitInstances(t, f, "BFE1", "demo-main", demoMainFull)
	waitApplied(t, f, "BFE1", 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	out, code, err := f.Lbctl(ctx, "shift", "--cluster", "demo-main", "--proxy-cluster", "BFE1",
		"--from", "IDC1", "--to", "IDC2", "--percent", "30", "--wait", "--reason", "e2e shift")
	if err != nil || code != 0 {
		t.Fatalf("lbctl shift: exit %d, %v\n%s", code, err, out)
	}
	t.Logf("lbctl shift:\n%s", out)
	out, code, err = f.Lbctl(ctx, "rollout", "status", "--proxy-cluster", "BFE1", "--wait", "--wait-timeout", "1m")
	if err != nil || code != 0 {
		t.Fatalf("lbctl rollout status: exit %d, %v\n%s", code, err, out)
	}
	t.Logf("lbctl rollout status:\n%s", out)
	s, err := liveSnapshot(ctx, f, "BFE1")
	if err != nil {
		t.Fatal(err)
	}
	row := s.Clusters["demo-main"].Row.Weights
	if row["SC1"] != 15 || row["SC2"] != 75 || row[config.Blackhole] != 10 {
		t.Fatalf("row after shift = %v, want SC1 15, SC2 75, GSLB_BLACKHOLE 10", row)
	}
	outs := splitLoad(f, "BFE1", 20000, 100000)
	pct, counts := shares(outs)
	t.Logf("BFE1 shares after the shift: %v (counts %v)", pct, counts)
	within(t, pct, map[string]float64{"SC1": 15, "SC2": 75, "BLACKHOLE": 10}, 2)
}

// Scenario 3: routing by the demo product's rules.
func TestRouting(t *testing.T) {
	f := startFleet(t, fleet.Options{})
	waitInstances(t, f, "BFE2", "demo-main", demoMainFull)
	url := f.ProxiesOf("BFE2")[0].URL
	cases := []struct{ method, path, cluster string }{
		{"GET", "/static/x", "demo-static"},
		{"GET", "/static", "demo-static"},
		{"POST", "/setting/a", "demo-post"},
		{"GET", "/setting/a", "demo-main"},
		{"POST", "/other", "demo-main"},
		{"GET", "/", "demo-main"},
	}
	for _, c := range cases {
		eventually(t, 20*time.Second, c.method+" "+c.path, func() error {
			o := do(c.method, url+c.path, "10.9.9.9")
			if o.Err != nil || o.Status != http.StatusOK {
				return fmt.Errorf("status %d err %v reason %q", o.Status, o.Err, o.Reason)
			}
			if o.Cluster != c.cluster {
				return fmt.Errorf("went to %s, want %s", o.Cluster, c.cluster)
			}
			return nil
		})
	}
}

// Scenario 4: kill -9 one demo-main instance (backend and its agent): GET
// success stays 100 %, health checks exclude it, its registration expires,
// the scheduler republishes without it.
func TestKillInstance(t *testing.T) {
	f := startFleet(t, fleet.Options{})
	waitInstances(t, f, "BFE2", "demo-main", demoMainFull)
	victim := f.BackendsOf("demo-main", "SC2")[0]

	stop := make(chan struct{})
	var sent, failed atomic.Int64
	var failures sync.Map
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				for _, p := range f.ProxiesOf("BFE2") {
					o := do("GET", p.URL+"/", fmt.Sprintf("10.4.%d.%d", w, i%250))
					sent.Add(1)
					if o.Err != nil || o.Status != http.StatusOK {
						failed.Add(1)
						failures.Store(fmt.Sprintf("%d %v %s", o.Status, o.Err, o.Reason), true)
					}
				}
			}
		}(w)
	}
	defer func() { close(stop); wg.Wait() }()

	// Let traffic flow, then kill the instance and its agent.
	eventually(t, 10*time.Second, "traffic flowing", func() error {
		if sent.Load() < 200 {
			return fmt.Errorf("%d sent", sent.Load())
		}
		return nil
	})
	victim.Proc.Kill()
	victim.Agent.Kill()

	// Health checks exclude it on every BFE2 proxy.
	for _, p := range f.ProxiesOf("BFE2") {
		eventually(t, 20*time.Second, p.ID+" excludes "+victim.Addr, func() error {
			return instanceExcluded(p.AdminURL, "demo-main", victim.Addr)
		})
	}
	// The registration expires.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	eventually(t, 30*time.Second, "registration of "+victim.Addr+" expired", func() error {
		r, err := f.Client.Get(ctx, f.Layout.InstancesPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return err
		}
		for _, kv := range r.Kvs {
			if strings.HasSuffix(string(kv.Key), "/"+victim.Addr) {
				return fmt.Errorf("%s still registered", kv.Key)
			}
		}
		return nil
	})
	// The scheduler republishes without it.
	waitInstances(t, f, "BFE2", "demo-main", map[string]int{"SC1": 3, "SC2": 2})
	s, err := liveSnapshot(ctx, f, "BFE2")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range s.Clusters["demo-main"].SubClusters["SC2"].Instances {
		if fmt.Sprintf("%s:%d", in.Addr, in.Port) == victim.Addr {
			t.Fatalf("v%d still lists %s", s.Meta.Version, victim.Addr)
		}
	}
	close(stop)
	wg.Wait()
	stop = make(chan struct{})
	t.Logf("GET success during the kill: %d of %d requests failed", failed.Load(), sent.Load())
	if failed.Load() != 0 {
		var fs []string
		failures.Range(func(k, _ any) bool { fs = append(fs, k.(string)); return true })
		t.Errorf("%d of %d GETs failed: %v", failed.Load(), sent.Load(), fs)
	}
}

// instanceExcluded asks a proxy's admin API whether addr is out of service.
func instanceExcluded(adminURL, cluster, addr string) error {
	var view tableView
	if err := getJSON(adminURL+"/v1/table", &view); err != nil {
		return err
	}
	for _, in := range view.instances(cluster) {
		if in.Addr == addr {
			if in.Available {
				return fmt.Errorf("%s still available (state %s)", addr, in.Health)
			}
			return nil
		}
	}
	return nil // gone from the table entirely
}

// Scenario 5: stop every instance of SC1: BFE1 fails over by cross retry,
// the next published row moves SC1's share to SC2, and nothing extra lands in
// the blackhole.
func TestSubClusterDown(t *testing.T) {
	f := startFleet(t, fleet.Options{})
	waitInstances(t, f, "BFE1", "demo-main", demoMainFull)
	waitApplied(t, f, "BFE1", 30*time.Second)
	for _, b := range f.BackendsOf("demo-main", "SC1") {
		if err := b.Proc.Stop(10 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// Right away (before any republish): cross retry keeps requests working.
	outs := splitLoad(f, "BFE1", 2000, 200000)
	pct, counts := shares(outs)
	t.Logf("BFE1 right after SC1 stopped: %v (counts %v)", pct, counts)
	within(t, pct, map[string]float64{"SC2": 90, "BLACKHOLE": 10}, 3)

	// The scheduler publishes a row without SC1.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	eventually(t, 30*time.Second, "BFE1 row moves SC1's share to SC2", func() error {
		s, err := liveSnapshot(ctx, f, "BFE1")
		if err != nil {
			return err
		}
		row := s.Clusters["demo-main"].Row.Weights
		if row["SC1"] != 0 || row["SC2"] != 90 || row[config.Blackhole] != 10 {
			return fmt.Errorf("v%d row %v", s.Meta.Version, row)
		}
		return nil
	})
	waitApplied(t, f, "BFE1", 30*time.Second)
	outs = splitLoad(f, "BFE1", 4000, 300000)
	pct, counts = shares(outs)
	t.Logf("BFE1 after the republish: %v (counts %v)", pct, counts)
	within(t, pct, map[string]float64{"SC2": 90, "BLACKHOLE": 10}, 2.5)
}

// Scenario 6: with etcd stopped, proxies keep serving; a proxy restarted
// meanwhile serves from its disk cache; after etcd returns, every proxy
// converges to the latest version.
func TestEtcdOutage(t *testing.T) {
	f := startFleet(t, fleet.Options{})
	waitInstances(t, f, "BFE2", "demo-main", demoMainFull)
	v := waitApplied(t, f, "BFE2", 30*time.Second)

	f.Etcd.Stop()
	outs := splitLoad(f, "BFE2", 2000, 400000)
	_, counts := shares(outs)
	t.Logf("I3: during the etcd outage: %v", counts)
	if counts["SC1"]+counts["SC2"] != len(outs) {
		t.Fatalf("I3: %v failed of %d during the etcd outage", counts, len(outs))
	}
	// Restart one proxy while etcd is down: it serves from its disk cache.
	px := f.ProxiesOf("BFE2")[0]
	if err := px.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := f.RestartProxy(px); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := fleet.WaitHTTP(ctx, px.AdminURL+"/readyz", 30*time.Second); err != nil {
		t.Fatalf("restarted proxy not ready from its disk cache: %v", err)
	}
	var st struct {
		AppliedVersion uint64 `json:"applied_version"`
		Source         string `json:"source"`
	}
	if err := getJSON(px.AdminURL+"/v1/status", &st); err != nil {
		t.Fatal(err)
	}
	if st.AppliedVersion != v || st.Source != "disk-cache" {
		t.Fatalf("restarted proxy status %+v, want v%d from disk-cache", st, v)
	}
	outs = load(px.URL+"/", 500, 8, 500000)
	if _, c := shares(outs); c["SC1"]+c["SC2"] != len(outs) {
		t.Fatalf("restarted proxy during outage: %v", c)
	}
	// etcd back: a change publishes and every proxy converges.
	if err := f.Etcd.Restart(); err != nil {
		t.Fatal(err)
	}
	out, code, err := f.Lbctl(ctx, "weights", "set", "--cluster", "demo-main", "--proxy-cluster", "BFE2", "SC1=30", "SC2=70", "--reason", "after outage", "--yes")
	if err != nil || code != 0 {
		t.Fatalf("lbctl weights set: exit %d %v\n%s", code, err, out)
	}
	eventually(t, 60*time.Second, "new version published", func() error {
		p, err := f.Current(ctx, "BFE2")
		if err != nil {
			return err
		}
		if p.Version <= v {
			return fmt.Errorf("live still v%d", p.Version)
		}
		return nil
	})
	waitApplied(t, f, "BFE2", 60*time.Second)
}

// Scenario 7: an invalid snapshot written straight into etcd is rejected by
// every proxy, lbctl rollout status names the reason, traffic is unchanged.
func TestInvalidSnapshotRejected(t *testing.T) {
	f := startFleet(t, fleet.Options{})
	waitInstances(t, f, "BFE2", "demo-main", demoMainFull)
	v := waitApplied(t, f, "BFE2", 30*time.Second)
	// Stop the scheduler so it does not publish a fix right away.
	if err := f.Schedulers[0].Stop(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	good, err := liveSnapshot(ctx, f, "BFE2")
	if err != nil {
		t.Fatal(err)
	}
	bad := *good
	bad.Clusters = map[string]snapshot.Cluster{}
	for k, c := range good.Clusters {
		bad.Clusters[k] = c
	}
	c := bad.Clusters["demo-main"]
	c.Row = snapshot.Row{Denominator: 100, Weights: map[string]int{"SC1": 70, "SC2": 70}}
	bad.Clusters["demo-main"] = c
	bad.Meta.Version = v + 1
	bad.Meta.Parent = v
	bad.Meta.Hash = snapshot.ContentHash(&bad)
	m, parts, err := snapshot.Encode(&bad)
	if err != nil || len(parts) != 0 {
		t.Fatalf("encode: %v (%d parts)", err, len(parts))
	}
	mk, _ := f.Layout.Snapshot("BFE2", v+1)
	ck, _ := f.Layout.Current("BFE2")
	mj, _ := json.Marshal(m)
	pj, _ := json.Marshal(snapshot.Pointer{Lineage: bad.Meta.Lineage, Version: v + 1, Hash: bad.Meta.Hash})
	if _, err := f.Client.Txn(ctx).Then(clientv3.OpPut(mk, string(mj)), clientv3.OpPut(ck, string(pj))).Commit(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "every BFE2 proxy rejects v"+fmt.Sprint(v+1), func() error {
		sts, err := statuses(ctx, f, "BFE2")
		if err != nil {
			return err
		}
		for _, p := range f.ProxiesOf("BFE2") {
			st := sts[p.ID]
			if st.RejectedVersion != v+1 || st.AppliedVersion != v {
				return fmt.Errorf("%s: applied v%d rejected v%d", p.ID, st.AppliedVersion, st.RejectedVersion)
			}
			if !strings.Contains(st.RejectedReason, "sum") {
				return fmt.Errorf("%s: reason %q does not say the row does not sum", p.ID, st.RejectedReason)
			}
		}
		return nil
	})
	out, code, err := f.Lbctl(ctx, "rollout", "status", "--proxy-cluster", "BFE2")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lbctl rollout status (exit %d):\n%s", code, out)
	if code == 0 || !strings.Contains(out, "REJECTED") || !strings.Contains(out, "sum") {
		t.Fatalf("rollout status should fail naming the rejection: exit %d\n%s", code, out)
	}
	outs := splitLoad(f, "BFE2", 2000, 600000)
	if _, c := shares(outs); c["SC1"]+c["SC2"] != len(outs) {
		t.Fatalf("traffic changed after the rejection: %v", c)
	}
}

// Scenario 8: with two schedulers, killing the leader hands over and the
// next change publishes. I6 as far as this scenario can see it: the old
// leader is dead (SIGKILL), so a broken publish fence has no writer to let
// through here (TestFaultsSchedulerCutOffFromEtcd is the scenario that
// can); what it checks is that every version written after the kill is the
// new leader's, written in its term, contiguous from the last one before,
// and that the proxies apply the last.
func TestSchedulerFailover(t *testing.T) {
	f := startFleet(t, fleet.Options{Schedulers: 2})
	waitInstances(t, f, "BFE2", "demo-main", demoMainFull)
	v := waitApplied(t, f, "BFE2", 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leader := leaderIndex(t, f)
	oldID, newID := fmt.Sprintf("sched-%d", leader+1), fmt.Sprintf("sched-%d", 2-leader)
	id, oldKey, read := electionLeader(ctx, t, f)
	if id != oldID {
		t.Fatalf("the leader key names %s, the election %q", oldID, id)
	}
	f.Schedulers[leader].Kill()
	since := takeoverRevision(ctx, t, f, oldKey, read)
	eventually(t, 60*time.Second, newID+" wins the election", func() error {
		if id, _, _ := electionLeader(ctx, t, f); id != newID {
			return fmt.Errorf("the election says %q leads", id)
		}
		return nil
	})
	out, code, err := f.Lbctl(ctx, "weights", "set", "--cluster", "demo-main", "--proxy-cluster", "BFE2", "SC1=20", "SC2=80", "--reason", "failover", "--yes")
	if err != nil || code != 0 {
		t.Fatalf("lbctl weights set: exit %d %v\n%s", code, err, out)
	}
	var pin uint64
	eventually(t, 60*time.Second, "the surviving scheduler publishes the pin", func() error {
		s, err := liveSnapshot(ctx, f, "BFE2")
		if err != nil {
			return err
		}
		row := s.Clusters["demo-main"].Row.Weights
		if s.Meta.Version <= v || row["SC1"] != 20 || row["SC2"] != 80 {
			return fmt.Errorf("v%d row %v", s.Meta.Version, row)
		}
		pin = s.Meta.Version
		return nil
	})
	last := waitApplied(t, f, "BFE2", 30*time.Second)
	if last < pin {
		t.Fatalf("the proxies applied v%d, before the pin v%d", last, pin)
	}
	authors := checkOnePublisher(ctx, t, f, "BFE2", v, last, oldID, newID, since)
	t.Logf("I6: %s killed after v%d; its term ended at revision %d; v%d..v%d by %v; the proxies applied v%d",
		oldID, v, since, v+1, last, authors, last)
}

func leaderIndex(t *testing.T, f *fleet.Fleet) int {
	t.Helper()
	idx := -1
	eventually(t, 30*time.Second, "a scheduler leads", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := f.Client.Get(ctx, f.Layout.Leader())
		if err != nil {
			return err
		}
		if len(r.Kvs) == 0 {
			return fmt.Errorf("no leader key yet")
		}
		var l report.Leader
		if err := json.Unmarshal(r.Kvs[0].Value, &l); err != nil {
			return err
		}
		for i := range f.Schedulers {
			if l.ID == fmt.Sprintf("sched-%d", i+1) {
				idx = i
				return nil
			}
		}
		return fmt.Errorf("leader %q is not one of ours", l.ID)
	})
	return idx
}

// tableView is the part of a proxy's /v1/table the suite reads.
type tableView struct {
	Clusters map[string]struct {
		SubClusters []struct {
			Name      string         `json:"name"`
			Instances []instanceView `json:"instances"`
		} `json:"subclusters"`
	} `json:"clusters"`
}

type instanceView struct {
	Addr      string `json:"addr"`
	Health    string `json:"health"`
	Available bool   `json:"available"`
}

func (v tableView) instances(cluster string) []instanceView {
	var out []instanceView
	for _, sc := range v.Clusters[cluster].SubClusters {
		out = append(out, sc.Instances...)
	}
	return out
}

// Scenario 10: every instance of demo-main stops, in both sub-clusters. The
// proxies answer every request at once with a generated 5xx and a reason —
// no hang, nothing sent elsewhere — settle on 503 once the agents and health
// checks exclude them all, keep serving the other clusters, and serve
// demo-main again when its backends return.
func TestAllSubClustersDown(t *testing.T) {
	f := startFleet(t, fleet.Options{})
	waitInstances(t, f, "BFE2", "demo-main", demoMainFull)
	waitApplied(t, f, "BFE2", 30*time.Second)
	var down []*fleet.Backend
	for _, sc := range []string{"SC1", "SC2"} {
		down = append(down, f.BackendsOf("demo-main", sc)...)
	}
	for _, b := range down {
		if err := b.Proc.Stop(10 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	px := f.ProxiesOf("BFE2")[0]
	generated := func(outs []outcome) error {
		for _, o := range outs {
			switch {
			case o.Err != nil:
				return o.Err
			case o.Status == http.StatusOK:
				t.Fatalf("200 from %s/%s/%s with every demo-main instance stopped", o.Cluster, o.SubCluster, o.Instance)
			case o.Status < 500 || o.Reason == "":
				t.Fatalf("answer %d with reason %q: want a generated 5xx with a reason", o.Status, o.Reason)
			}
		}
		return nil
	}
	// Right away: generated answers, quick (connect timeout 500ms, 4 tries).
	began := time.Now()
	outs := load(px.URL+"/", 40, 4, 0)
	if err := generated(outs); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > 8*time.Second {
		t.Fatalf("40 requests took %s with the cluster down: want failures that come quickly", d)
	}
	eventually(t, 30*time.Second, "every demo-main request answered 503 no-available-instance", func() error {
		outs := load(px.URL+"/", 100, 4, 0)
		if err := generated(outs); err != nil {
			return err
		}
		_, counts := shares(outs)
		for _, o := range outs {
			if o.Status != http.StatusServiceUnavailable || o.Reason != "no-available-instance" {
				return fmt.Errorf("%d %s (outcomes %v)", o.Status, o.Reason, counts)
			}
		}
		return nil
	})
	if o := do("GET", px.URL+"/static/logo.png", ""); o.Status != http.StatusOK || o.Cluster != "demo-static" {
		t.Fatalf("/static with demo-main down: %d from %q (%v), want 200 from demo-static", o.Status, o.Cluster, o.Err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, b := range down {
		if err := f.RestartBackend(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	// Which sub-clusters serve is the published row's business (BFE2
	// prefers its own IDC's SC2); every answer must be a success again.
	eventually(t, 60*time.Second, "demo-main serves again", func() error {
		outs := load(px.URL+"/", 400, 8, 0)
		_, counts := shares(outs)
		for _, o := range outs {
			if o.Err != nil || o.Status != http.StatusOK || o.Cluster != "demo-main" {
				return fmt.Errorf("%d %v %s from %q (counts %v)", o.Status, o.Err, o.Reason, o.Cluster, counts)
			}
		}
		return nil
	})
}

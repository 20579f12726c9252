package lbproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/proxy/internal/admin"
	"github.com/sluicelb/sluice/proxy/server"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

// TestMain checks for leaked goroutines. Two fasthttp goroutines are not
// ours to stop: the process-wide Date-header updater and a stopped worker
// pool's cleaner, which notices the stop only after a sleep of up to 10 s.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"))
}

// frontEnv selects the front of start (empty: the default).
const frontEnv = "SLUICE_TEST_FRONT"

// TestStdFrontSuite runs every test of this package once more with
// --front std (the default is fasthttp), but those in frontFree.
func TestStdFrontSuite(t *testing.T) {
	if os.Getenv(frontEnv) != "" {
		t.Logf("already the %s run", os.Getenv(frontEnv))
		return
	}
	cmd := exec.Command(os.Args[0], "-test.count=1", "-test.skip", frontFree)
	cmd.Env = append(os.Environ(), frontEnv+"="+server.FrontStd)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("std front run failed: %v\n%s", err, out)
	}
}

// frontFree names the tests that send nothing through the plain HTTP
// listener, the only one --front serves: the etcd client's keepalive, an etcd
// restart (apply and status report), an untrusted etcd certificate (admin
// API). Run again with the std front they would check nothing new, for
// about 37 of the suite's 60 s on a loaded 2-core machine. TestStopRightAfterStart
// names its fronts itself.
const frontFree = "^(TestDeadEtcdConnectionDetected|TestFullEtcdRestart|TestUntrustedEtcdCertificateAtBoot|TestStopRightAfterStart)$"

func TestBadFrontRefused(t *testing.T) {
	err := Run(context.Background(), Config{ProxyCluster: "BFE1", ID: "p1", ConfigFile: "x.json",
		Listen: "127.0.0.1:0", FrontKind: "nginx"})
	if err == nil || !strings.Contains(err.Error(), `front "nginx"`) {
		t.Fatalf("Run with front nginx: %v, want a front error", err)
	}
}

func TestPprofOnlyWhenEnabledAndBehindToken(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "snap.json")
	if err := os.WriteFile(path, []byte(pprofSnapshot), 0o644); err != nil {
		t.Fatal(err)
	}
	off := start(t, Config{ConfigFile: path})
	if code, _ := adminDo(t, "GET", "http://"+off.addrs.Admin+"/debug/pprof/", ""); code != 404 {
		t.Fatalf("pprof without --pprof: %d, want 404", code)
	}
	on := start(t, Config{ConfigFile: path, Pprof: true, AdminToken: "s3cret", ID: "p2"})
	if code, _ := adminDo(t, "GET", "http://"+on.addrs.Admin+"/debug/pprof/", ""); code != 401 {
		t.Fatalf("pprof without the token: %d, want 401", code)
	}
	req, _ := http.NewRequest("GET", "http://"+on.addrs.Admin+"/debug/pprof/cmdline", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || len(b) == 0 {
		t.Fatalf("pprof with the token: %d %q, want 200 and the command line", res.StatusCode, b)
	}
}

const pprofSnapshot = `{"meta":{"proxy_cluster":"BFE1","version":1,"created_at":"2025-01-01T00:00:00Z"},
 "products":{"p":{"hosts":["p.test"],"rules":[{"name":"all","cond":"default_t()","cluster":"c"}]}},
 "default_product":"p",
 "clusters":{"c":{"subclusters":{"SC1":{"idc":"IDC1","instances":[{"addr":"127.0.0.1","port":9,"weight":1}]}},
   "row":{"denominator":100,"weights":{"SC1":100}}}}}`

const prefix = "/lbproxytest"

var layout = keys.MustNew(prefix)

func backendServer(t *testing.T, name string, hits *atomic.Int64) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits != nil {
			hits.Add(1)
		}
		if r.URL.Path == "/slow" {
			time.Sleep(300 * time.Millisecond) // the backend is slow on purpose: a request in flight at shutdown
		}
		io.WriteString(w, name)
	}))
	t.Cleanup(s.Close)
	return s
}

func snapFor(version uint64, backendURL string, weights map[string]int) *snapshot.Snapshot {
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(backendURL, "http://"))
	var p int
	for _, c := range port {
		p = p*10 + int(c-'0')
	}
	s := &snapshot.Snapshot{
		Meta: snapshot.Meta{ProxyCluster: "BFE1", Version: version, CreatedAt: time.Unix(1700000000, 0).UTC()},
		Products: map[string]config.Product{"demo": {Hosts: []string{"demo.test"},
			Rules: []config.Rule{{Name: "all", Cond: "default_t()", Cluster: "main"}}}},
		DefaultProduct: "demo",
		Clusters: map[string]snapshot.Cluster{"main": {
			SubClusters: map[string]config.SubCluster{"SC1": {IDC: "IDC1", Instances: []config.Instance{{Addr: host, Port: p, Weight: 1}}}},
			Policy:      config.DefaultPolicy(),
			Row:         snapshot.Row{Denominator: 100, Weights: weights},
		}},
	}
	s.Meta.Hash = snapshot.ContentHash(s)
	return s
}

// publish writes s as the scheduler does: parts, then manifest + pointer in one txn.
func publish(t *testing.T, cli *clientv3.Client, s *snapshot.Snapshot) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, parts, err := snapshot.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		k, _ := layout.Part(p.Digest)
		if _, err := cli.Put(ctx, k, string(p.Data)); err != nil {
			t.Fatal(err)
		}
	}
	mraw, _ := json.Marshal(m)
	praw, _ := json.Marshal(snapshot.Pointer{Version: s.Meta.Version, Hash: s.Meta.Hash})
	sk, _ := layout.Snapshot("BFE1", s.Meta.Version)
	ck, _ := layout.Current("BFE1")
	if _, err := cli.Txn(ctx).Then(clientv3.OpPut(sk, string(mraw)), clientv3.OpPut(ck, string(praw))).Commit(); err != nil {
		t.Fatal(err)
	}
}

type running struct {
	addrs Addrs
	stop  context.CancelFunc
	done  chan error
}

func start(t *testing.T, cfg Config) *running {
	t.Helper()
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	al, _ := net.Listen("tcp", "127.0.0.1:0")
	cfg.Listener, cfg.AdminListener = l, al
	return startWith(t, cfg)
}

// startWith runs lbproxy with the listeners cfg already has.
func startWith(t *testing.T, cfg Config) *running {
	t.Helper()
	switch cfg.ProxyCluster {
	case "":
		cfg.ProxyCluster = "BFE1"
	case noProxyCluster:
		cfg.ProxyCluster = ""
	}
	if cfg.ID == "" {
		cfg.ID = "p1"
	}
	cfg.Prefix = prefix
	if cfg.FrontKind == "" {
		cfg.FrontKind = os.Getenv(frontEnv) // TestStdFrontSuite
	}
	if cfg.TraceExporter == "" {
		cfg.TraceExporter = "none"
	}
	cfg.ReportInterval = 200 * time.Millisecond
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
	}
	started := make(chan Addrs, 1)
	cfg.Started = func(a Addrs) { started <- a }
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- Run(ctx, cfg) }()
	select {
	case r.addrs = <-started:
	case err := <-r.done:
		cancel()
		t.Fatalf("Run: %v", err)
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatal("Run did not start")
	}
	t.Cleanup(func() { r.shutdown(t) })
	return r
}

func (r *running) shutdown(t *testing.T) {
	r.stop()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run returned %v, want nil after shutdown", err)
		}
		r.done <- nil // later calls return at once
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func httpGet(t *testing.T, url string, host string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if host != "" {
		req.Host = host
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res.Header
}

func adminStatus(t *testing.T, r *running) Status {
	_, body, _ := httpGet(t, "http://"+r.addrs.Admin+"/v1/status", "")
	var st Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("status %q: %v", body, err)
	}
	return st
}

// I5 through the whole binary path: an invalid snapshot is rejected, the
// reason shows in /v1/status, traffic is unchanged; a valid newer one applies.
func TestInvalidSnapshotRejectedTrafficUnchanged(t *testing.T) {
	_, cli := etcdtest.New(t)
	b1 := backendServer(t, "b1", nil)
	b2 := backendServer(t, "b2", nil)
	r := start(t, Config{Etcd: Etcd{Endpoints: cli.Endpoints()}, CacheDir: t.TempDir()})
	if code, _, _ := httpGet(t, "http://"+r.addrs.Admin+"/readyz", ""); code != 503 {
		t.Fatalf("readyz before any snapshot: %d, want 503", code)
	}
	publish(t, cli, snapFor(1, b1.URL, map[string]int{"SC1": 100}))
	poll.EventuallyTrue(t, 10*time.Second, "v1 applied", func() bool {
		code, _, _ := httpGet(t, "http://"+r.addrs.Admin+"/readyz", "")
		return code == 200
	})
	bad := snapFor(2, b2.URL, map[string]int{"SC1": 60}) // row does not sum to 100
	publish(t, cli, bad)
	poll.EventuallyTrue(t, 10*time.Second, "v2 rejected", func() bool { return adminStatus(t, r).RejectedVersion == 2 })
	st := adminStatus(t, r)
	if st.AppliedVersion != 1 || !strings.Contains(st.RejectedReason, "SC1") && !strings.Contains(st.RejectedReason, "row") {
		t.Fatalf("status %+v: want applied 1 and a reason naming the row", st)
	}
	for i := 0; i < 5; i++ {
		if code, body, _ := httpGet(t, "http://"+r.addrs.HTTP+"/", "demo.test"); code != 200 || body != "b1" {
			t.Fatalf("after rejection: %d %q, want 200 from b1", code, body)
		}
	}
	publish(t, cli, snapFor(3, b2.URL, map[string]int{"SC1": 100}))
	poll.EventuallyTrue(t, 10*time.Second, "v3 serves b2", func() bool {
		_, body, _ := httpGet(t, "http://"+r.addrs.HTTP+"/", "demo.test")
		return body == "b2"
	})
	// The status key in etcd carries the applied version.
	sk, _ := layout.Status("BFE1", "p1")
	poll.EventuallyTrue(t, 10*time.Second, "status key at v3", func() bool {
		res, err := cli.Get(context.Background(), sk)
		return err == nil && len(res.Kvs) == 1 && strings.Contains(string(res.Kvs[0].Value), `"applied_version":3`)
	})
}

// A proxy restarted while etcd is down serves its last good snapshot from
// the disk cache.
func TestRestartWithEtcdDownServesDiskCache(t *testing.T) {
	srv, cli := etcdtest.New(t)
	b1 := backendServer(t, "b1", nil)
	dir := t.TempDir()
	r := start(t, Config{Etcd: Etcd{Endpoints: cli.Endpoints()}, CacheDir: dir})
	publish(t, cli, snapFor(4, b1.URL, map[string]int{"SC1": 100}))
	poll.EventuallyTrue(t, 10*time.Second, "v4 applied", func() bool { return adminStatus(t, r).AppliedVersion == 4 })
	r.shutdown(t)
	srv.Stop()

	r2 := start(t, Config{Etcd: Etcd{Endpoints: cli.Endpoints(), DialTimeout: time.Second}, CacheDir: dir, ID: "p2"})
	poll.EventuallyTrue(t, 10*time.Second, "cache applied", func() bool { return adminStatus(t, r2).AppliedVersion == 4 })
	st := adminStatus(t, r2)
	if st.Source != "disk-cache" || st.EtcdConnected == nil || *st.EtcdConnected {
		t.Fatalf("status %+v: want source disk-cache, etcd not connected", st)
	}
	if code, body, _ := httpGet(t, "http://"+r2.addrs.HTTP+"/", "demo.test"); code != 200 || body != "b1" {
		t.Fatalf("served %d %q, want 200 from b1 out of the disk cache", code, body)
	}
	// etcd back: the proxy converges to what is published meanwhile.
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	cli2, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli2.Close()
	b2 := backendServer(t, "b2", nil)
	publish(t, cli2, snapFor(5, b2.URL, map[string]int{"SC1": 100}))
	poll.EventuallyTrue(t, 20*time.Second, "v5 applied after etcd restart", func() bool { return adminStatus(t, r2).AppliedVersion == 5 })
	if code, body, _ := httpGet(t, "http://"+r2.addrs.HTTP+"/", "demo.test"); code != 200 || body != "b2" {
		t.Fatalf("after convergence: %d %q, want 200 from b2", code, body)
	}
}

// Graceful shutdown lets an in-flight request finish and removes the status key.
func TestGracefulShutdownFinishesInFlight(t *testing.T) {
	_, cli := etcdtest.New(t)
	var hits atomic.Int64
	b1 := backendServer(t, "b1", &hits)
	r := start(t, Config{Etcd: Etcd{Endpoints: cli.Endpoints()}, CacheDir: t.TempDir()})
	publish(t, cli, snapFor(1, b1.URL, map[string]int{"SC1": 100}))
	poll.EventuallyTrue(t, 10*time.Second, "applied", func() bool { return adminStatus(t, r).AppliedVersion == 1 })
	sk, _ := layout.Status("BFE1", "p1")
	poll.EventuallyTrue(t, 10*time.Second, "status key", func() bool {
		res, err := cli.Get(context.Background(), sk)
		return err == nil && len(res.Kvs) == 1
	})
	type out struct {
		code int
		body string
	}
	got := make(chan out, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, "http://"+r.addrs.HTTP+"/slow", nil)
		req.Host = "demo.test"
		res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			got <- out{body: err.Error()}
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		got <- out{res.StatusCode, string(b)}
	}()
	poll.EventuallyTrue(t, 20*time.Second, "slow request at the backend", func() bool { return hits.Load() == 1 })
	r.shutdown(t)
	if o := <-got; o.code != 200 || o.body != "b1" {
		t.Fatalf("in-flight request at shutdown: %d %q, want 200 b1", o.code, o.body)
	}
	res, err := cli.Get(context.Background(), sk)
	if err != nil || len(res.Kvs) != 0 {
		t.Fatalf("status key still present after graceful shutdown (%v)", err)
	}
}

func TestAdminRefusesExposedBindWithoutToken(t *testing.T) {
	err := Run(context.Background(), Config{ProxyCluster: "BFE1", ID: "p1", ConfigFile: "x.json",
		Listen: "127.0.0.1:0", Admin: "0.0.0.0:0", Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if !errors.Is(err, admin.ErrTokenRequired) {
		t.Fatalf("Run = %v, want ErrTokenRequired", err)
	}
}

func adminDo(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var m map[string]any
	raw, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s %s: not a JSON object: %q", method, url, raw)
	}
	return res.StatusCode, m
}

func TestAdminAPI(t *testing.T) {
	_, cli := etcdtest.New(t)
	b1 := backendServer(t, "b1", nil)
	r := start(t, Config{Etcd: Etcd{Endpoints: cli.Endpoints()}, CacheDir: t.TempDir()})
	publish(t, cli, snapFor(1, b1.URL, map[string]int{"SC1": 100}))
	poll.EventuallyTrue(t, 10*time.Second, "applied", func() bool { return adminStatus(t, r).AppliedVersion == 1 })
	base := "http://" + r.addrs.Admin
	addr := strings.TrimPrefix(b1.URL, "http://")

	code, tv := adminDo(t, "GET", base+"/v1/table", "")
	if code != 200 || !strings.Contains(toJSON(tv), addr) {
		t.Fatalf("/v1/table %d %v: want the instance %s", code, tv, addr)
	}
	code, ex := adminDo(t, "GET", base+"/v1/explain?url=http://demo.test/a&client_ip=192.0.2.1", "")
	if code != 200 || ex["cluster"] != "main" || ex["client_ip"] != "192.0.2.1" || !strings.Contains(toJSON(ex), addr) {
		t.Fatalf("/v1/explain %d %v", code, ex)
	}
	if code, e := adminDo(t, "GET", base+"/v1/explain?url=not-a-url", ""); code != 400 || e["error"] == nil {
		t.Fatalf("bad explain: %d %v, want 400 with error", code, e)
	}
	if code, e := adminDo(t, "POST", base+"/v1/overrides", `{"addr":"`+addr+`","drain":true,"ttl":"1m"}`); code != 200 || e["ttl_seconds"] != 60.0 {
		t.Fatalf("set override: %d %v, want 200 with ttl_seconds 60", code, e)
	}
	if code, e := adminDo(t, "GET", base+"/v1/overrides", ""); code != 200 || toJSON(e[addr]) != `{"drain":true,"ttl_seconds":60}` {
		t.Fatalf("list overrides: %d %v, want %s drained with ttl_seconds 60 (seconds in JSON)", code, e, addr)
	}
	if code, _, h := httpGet(t, "http://"+r.addrs.HTTP+"/", "demo.test"); code != 503 || h.Get("X-Sluice-Reason") != "no-available-instance" {
		t.Fatalf("drained only instance: %d %q, want 503 no-available-instance", code, h.Get("X-Sluice-Reason"))
	}
	if code, e := adminDo(t, "POST", base+"/v1/overrides", `{"addr":"`+addr+`","weight":-1,"ttl":"1m"}`); code != 400 || !strings.Contains(toJSON(e), "weight") {
		t.Fatalf("bad weight: %d %v, want 400 naming weight", code, e)
	}
	if code, e := adminDo(t, "POST", base+"/v1/overrides", `{"addr":"`+addr+`","drain":true}`); code != 400 || !strings.Contains(toJSON(e), "ttl") {
		t.Fatalf("missing ttl: %d %v, want 400 naming ttl", code, e)
	}
	if code, e := adminDo(t, "POST", base+"/v1/overrides", `{"addr":"10.9.9.9:80","drain":true,"ttl":"1m"}`); code != 404 {
		t.Fatalf("unknown address: %d %v, want 404", code, e)
	}
	if code, e := adminDo(t, "DELETE", base+"/v1/overrides/"+addr, ""); code != 200 {
		t.Fatalf("clear override: %d %v", code, e)
	}
	if code, body, _ := httpGet(t, "http://"+r.addrs.HTTP+"/", "demo.test"); code != 200 || body != "b1" {
		t.Fatalf("after clearing: %d %q", code, body)
	}
	_, metrics, _ := httpGet(t, base+"/metrics", "")
	for _, want := range []string{
		`sluice_proxy_requests_total{cluster="main",code="2xx",subcluster="SC1"}`,
		`sluice_proxy_subcluster_weight{cluster="main",subcluster="SC1"} 100`,
		`sluice_proxy_instance_healthy{cluster="main",instance="` + addr + `"`,
		`sluice_proxy_snapshot_version`,
		`sluice_proxy_snapshot_staleness_seconds`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestAdminTokenRequiredWhenSet(t *testing.T) {
	_, cli := etcdtest.New(t)
	r := start(t, Config{Etcd: Etcd{Endpoints: cli.Endpoints()}, CacheDir: t.TempDir(), AdminToken: "s3cret"})
	if code, _ := adminDo(t, "GET", "http://"+r.addrs.Admin+"/v1/status", ""); code != 401 {
		t.Fatalf("no token: %d, want 401", code)
	}
	req, _ := http.NewRequest("GET", "http://"+r.addrs.Admin+"/v1/status", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("with token: %d, want 200", res.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()
	if code, _, _ := httpGet(t, "http://"+r.addrs.Admin+"/healthz", ""); code != 200 {
		t.Fatalf("healthz needs no token: %d", code)
	}
}

// --config with a desired-state file: served at once, reloaded when the file
// changes, and a bad edit keeps the last good configuration.
func TestConfigFileReload(t *testing.T) {
	path, state := stateFile(t)
	r := start(t, Config{ConfigFile: path})
	if code, body, _ := httpGet(t, "http://"+r.addrs.HTTP+"/", "a.test"); code != 200 || body != "from-file" {
		t.Fatalf("GET: %d %q", code, body)
	}
	v1 := adminStatus(t, r).AppliedVersion
	os.WriteFile(path, []byte(state(5)), 0o644)
	poll.EventuallyTrue(t, 20*time.Second, "changed file reloaded", func() bool { return adminStatus(t, r).AppliedVersion != v1 })
	v2 := adminStatus(t, r).AppliedVersion
	os.WriteFile(path, []byte("topology: {idcs: [IDC1]\n"), 0o644) // broken YAML
	poll.EventuallyTrue(t, 20*time.Second, "the broken file noticed", func() bool {
		_, m, _ := httpGet(t, "http://"+r.addrs.Admin+"/metrics", "")
		return strings.Contains(m, `sluice_proxy_config_reloads_total{result="invalid"} 1`)
	})
	if st := adminStatus(t, r); st.AppliedVersion != v2 {
		t.Fatalf("a broken file changed the applied version: %d → %d", v2, st.AppliedVersion)
	}
	if code, body, _ := httpGet(t, "http://"+r.addrs.HTTP+"/", "a.test"); code != 200 || body != "from-file" {
		t.Fatalf("GET after a bad reload: %d %q", code, body)
	}
}

// accessFile is an access-log file of the test and a way to read it.
func accessFile(t *testing.T) (*os.File, func() string) {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "access.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, func() string {
		b, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
}

// A buffered access log holds its lines until the flush interval or
// shutdown, and loses none of them at shutdown.
func TestBufferedAccessLog(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer backend.Close()
	port := backend.Listener.Addr().(*net.TCPAddr).Port
	path := filepath.Join(t.TempDir(), "state.yaml")
	os.WriteFile(path, []byte(fmt.Sprintf(`topology: {idcs: [IDC1], proxy_clusters: {BFE1: {idc: IDC1}}}
products: {p: {hosts: [a.test], rules: [{cond: "default_t()", cluster: c}]}}
clusters: {c: {subclusters: {S1: {idc: IDC1, instances: [{addr: 127.0.0.1, port: %d, weight: 1}]}}}}
`, port)), 0o644)

	t.Run("held until shutdown", func(t *testing.T) {
		f, logged := accessFile(t)
		r := start(t, Config{ConfigFile: path, AccessLog: f, AccessLogBuffer: 1 << 20, AccessLogFlush: time.Hour})
		for i := 0; i < 3; i++ {
			if code, _, _ := httpGet(t, "http://"+r.addrs.HTTP+fmt.Sprintf("/r%d", i), "a.test"); code != 200 {
				t.Fatalf("GET: %d", code)
			}
		}
		if s := logged(); s != "" {
			t.Fatalf("access log written before a flush: %q", s)
		}
		r.shutdown(t)
		lines := strings.Split(strings.TrimSpace(logged()), "\n")
		if len(lines) != 3 {
			t.Fatalf("%d access-log lines after shutdown, want 3:\n%s", len(lines), logged())
		}
		for i, l := range lines {
			var e struct {
				Path   string `json:"path"`
				Status int    `json:"status"`
			}
			if err := json.Unmarshal([]byte(l), &e); err != nil || e.Path != fmt.Sprintf("/r%d", i) || e.Status != 200 {
				t.Fatalf("line %d %q (%v): want path /r%d, status 200", i, l, err, i)
			}
		}
	})
	t.Run("written every flush interval", func(t *testing.T) {
		f, logged := accessFile(t)
		r := start(t, Config{ConfigFile: path, AccessLog: f, AccessLogBuffer: 1 << 20, AccessLogFlush: 20 * time.Millisecond})
		httpGet(t, "http://"+r.addrs.HTTP+"/tick", "a.test")
		poll.EventuallyTrue(t, 20*time.Second, "the line flushed while running", func() bool {
			return strings.Contains(logged(), `"path":"/tick"`)
		})
		if _, m, _ := httpGet(t, "http://"+r.addrs.Admin+"/metrics", ""); !strings.Contains(m, "sluice_proxy_access_log_dropped_bytes_total 0") {
			t.Fatal("metrics lack sluice_proxy_access_log_dropped_bytes_total 0")
		}
	})
}

// The fronts' defaults follow the upstream client (the fasthttp fronts need
// the fast one); an explicit kind is kept, a bad one refused with its flag
// named and the config left as it was.
func TestFrontKindDefaults(t *testing.T) {
	for _, tc := range []struct {
		upstream, front, tlsFront string
		wantFront, wantTLS        string
		wantErr                   string
	}{
		{"", "", "", server.FrontFastHTTP, server.FrontFastHTTP, ""},
		{server.UpstreamFast, "", "", server.FrontFastHTTP, server.FrontFastHTTP, ""},
		{server.UpstreamStd, "", "", server.FrontStd, server.FrontStd, ""},
		{"", server.FrontStd, server.FrontStd, server.FrontStd, server.FrontStd, ""},
		{"", "", server.FrontStd, server.FrontFastHTTP, server.FrontStd, ""},
		{server.UpstreamStd, "", server.FrontFastHTTP, "", server.FrontFastHTTP, `TLS front "fasthttp" needs the "fast" upstream client`},
		{"", "", "nginx", "", "nginx", `TLS front "nginx": want "std" or "fasthttp"`},
	} {
		c := Config{ConfigFile: "x.json", Listen: "127.0.0.1:0", Admin: "127.0.0.1:0",
			UpstreamClient: tc.upstream, FrontKind: tc.front, TLSFrontKind: tc.tlsFront}
		err := c.check()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%+v: check() = %v, want an error containing %q", tc, err, tc.wantErr)
			}
		} else if err != nil {
			t.Errorf("%+v: check() = %v", tc, err)
		}
		if c.FrontKind != tc.wantFront || c.TLSFrontKind != tc.wantTLS {
			t.Errorf("%+v: front %q, TLS front %q; want %q, %q", tc, c.FrontKind, c.TLSFrontKind, tc.wantFront, tc.wantTLS)
		}
	}
}

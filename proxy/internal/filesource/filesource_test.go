package filesource

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
	"github.com/sluicelb/sluice/testkit/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// bfeConf is the repository's own BFE conf directory (testdata/bfe/conf at the
// repository root), relative to this package's directory.
const bfeConf = "../../../testdata/bfe/conf"

func testSnapshot(port int) *snapshot.Snapshot {
	return &snapshot.Snapshot{
		Meta:     snapshot.Meta{ProxyCluster: "BFE1", Version: 1},
		Settings: snapshot.Settings{IDC: "IDC1"},
		Products: map[string]config.Product{"demo": {
			Hosts: []string{"demo.sluice.test"},
			Rules: []config.Rule{{Cond: "default_t()", Cluster: "demo-main"}},
		}},
		DefaultProduct: "demo",
		Clusters: map[string]snapshot.Cluster{"demo-main": {
			SubClusters: map[string]config.SubCluster{"SC1": {IDC: "IDC1", Instances: []config.Instance{{Addr: "127.0.0.1", Port: port, Weight: 1}}}},
			Policy:      config.DefaultPolicy(),
			Row:         snapshot.Row{Denominator: 100, Weights: map[string]int{"SC1": 100}},
		}},
	}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	// Write then rename, as editors and config managers do.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// writeRaw replaces path's content with s at once (write then rename): a
// poll never reads a half-written or emptied file, which would count one
// more reload than the test made. The temporary file is outside path's
// directory, where a BFE directory's fingerprint would see it.
func writeRaw(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.CreateTemp("", "writeraw")
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil { // CreateTemp made it 0600, in the test's temp root's file system
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		t.Fatal(err)
	}
}

type recorder struct {
	mu    sync.Mutex
	snaps []*snapshot.Snapshot
}

func (r *recorder) apply(c validate.Checked) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.snaps = append(r.snaps, c.Snapshot())
	return nil
}

func (r *recorder) all() []*snapshot.Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*snapshot.Snapshot(nil), r.snaps...)
}

func (r *recorder) lastPort() int {
	s := r.all()
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1].Clusters["demo-main"].SubClusters["SC1"].Instances[0].Port
}

func counter(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_proxy_config_reloads_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelIs(m, "result", result) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func labelIs(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

func run(t *testing.T, cfg Config) (*prometheus.Registry, <-chan error) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v after cancel, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of cancel")
		}
	})
	return reg, done
}

func TestLoadSnapshotFileJSONAndYAML(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "snap.json")
	writeJSON(t, p, testSnapshot(8001))
	checked, err := Load(Config{Path: p, ProxyCluster: "BFE1"})
	if err != nil {
		t.Fatal(err)
	}
	s := checked.Snapshot()
	if s.Meta.Version != 1 || s.Meta.Hash != snapshot.ContentHash(s) || s.Meta.ProxyCluster != "BFE1" {
		t.Fatalf("meta = %+v", s.Meta)
	}
	y := filepath.Join(dir, "snap.yaml")
	writeRaw(t, y, `
meta: {proxy_cluster: BFE1, version: 4}
default_product: demo
products:
  demo: {hosts: [demo.sluice.test], rules: [{cond: "default_t()", cluster: demo-main}]}
clusters:
  demo-main:
    subclusters: {SC1: {idc: IDC1, instances: [{addr: 127.0.0.1, port: 8001, weight: 1}]}}
    row: {denominator: 100, weights: {SC1: 100}}
`)
	checkedY, err := Load(Config{Path: y})
	if err != nil {
		t.Fatal(err)
	}
	sy := checkedY.Snapshot()
	if sy.Meta.Version != 4 || sy.Clusters["demo-main"].Policy.Retry.RetryMax != 2 {
		t.Fatalf("yaml snapshot: meta %+v, retry %+v (defaults must be filled)", sy.Meta, sy.Clusters["demo-main"].Policy.Retry)
	}
}

func TestLoadErrorsNameTheProblem(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, content, pc, want string
	}{
		{"unknown field", `{"meta":{"proxy_cluster":"BFE1","version":1},"bogus":1}`, "", "bogus"},
		{"wrong proxy cluster", `{"meta":{"proxy_cluster":"BFE2","version":1}}`, "BFE1", `"BFE2"`},
		{"no proxy cluster", `{"meta":{"version":1}}`, "", "proxy_cluster"},
		{"bad hash", `{"meta":{"proxy_cluster":"BFE1","version":1,"hash":"00"}}`, "", "meta.hash"},
		{"fractional port", `{"meta":{"proxy_cluster":"BFE1"},"clusters":{"c":{"subclusters":{"S":{"idc":"I","instances":[{"addr":"127.0.0.1","port":1.5,"weight":1}]}},"row":{"denominator":100,"weights":{"S":100}}}}}`, "", "port"},
		{"empty", ``, "", "empty"},
		{"row does not sum", `{"meta":{"proxy_cluster":"BFE1"},"clusters":{"c":{"subclusters":{"S":{"idc":"I","instances":[{"addr":"127.0.0.1","port":80,"weight":1}]}},"row":{"denominator":100,"weights":{"S":90}}}}}`, "", "invalid snapshot"},
	}
	for _, c := range cases {
		p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_"))
		writeRaw(t, p, c.content)
		_, err := Load(Config{Path: p, ProxyCluster: c.pc})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: err = %v, want it to name %q and the file", c.name, err, c.want)
		}
	}
	if _, err := Load(Config{Path: filepath.Join(dir, "missing.json")}); err == nil || !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("missing file: err = %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

func TestLoadDesiredState(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.yaml")
	writeRaw(t, p, `
topology:
  idcs: [IDC1, IDC2]
  proxy_clusters: {BFE1: {idc: IDC1}}
products:
  demo: {hosts: [demo.sluice.test], rules: [{cond: "default_t()", cluster: demo-main}]}
clusters:
  demo-main:
    subclusters:
      SC1: {idc: IDC1, instances: [{addr: 127.0.0.1, port: 8001, weight: 3}]}
      SC2: {idc: IDC2, instances: [{addr: 127.0.0.2, port: 8001, weight: 1}]}
`)
	checked, err := Load(Config{Path: p})
	if err != nil {
		t.Fatal(err)
	}
	s := checked.Snapshot()
	row := s.Clusters["demo-main"].Row
	if s.Meta.ProxyCluster != "BFE1" || row.Denominator != 100 || row.Weights["SC1"] != 75 || row.Weights["SC2"] != 25 {
		t.Fatalf("snapshot from state: meta %+v row %+v", s.Meta, row)
	}
	if _, err := Load(Config{Path: p, ProxyCluster: "BFE9"}); err == nil || !strings.Contains(err.Error(), "BFE9") {
		t.Fatalf("unknown proxy cluster: err = %v", err)
	}
}

func TestRunReloadsOnChangeAndKeepsLastGood(t *testing.T) {
	p := filepath.Join(t.TempDir(), "snap.json")
	writeJSON(t, p, testSnapshot(8001))
	rec := &recorder{}
	reg, _ := run(t, Config{Path: p, ProxyCluster: "BFE1", Apply: rec.apply, PollInterval: 20 * time.Millisecond, Signals: []os.Signal{syscall.SIGUSR2}})
	poll.EventuallyTrue(t, 10*time.Second, "initial load applied", func() bool { return rec.lastPort() == 8001 })

	writeJSON(t, p, testSnapshot(8002))
	poll.EventuallyTrue(t, 10*time.Second, "change reloaded", func() bool { return rec.lastPort() == 8002 })

	writeRaw(t, p, `{"meta": {"proxy_cluster": "BFE1", "version": 1}, "clusters": {`) // truncated
	poll.EventuallyTrue(t, 10*time.Second, "bad reload counted", func() bool { return counter(t, reg, "invalid") == 1 })
	if got := len(rec.all()); got != 2 || rec.lastPort() != 8002 {
		t.Fatalf("after a bad reload: %d applies, port %d; want 2 applies, last good 8002", got, rec.lastPort())
	}

	writeJSON(t, p, testSnapshot(8003))
	poll.EventuallyTrue(t, 10*time.Second, "good reload after the bad one", func() bool { return rec.lastPort() == 8003 })
	all := rec.all()
	for i := 1; i < len(all); i++ {
		if all[i].Meta.Version <= all[i-1].Meta.Version || all[i].Meta.Parent != all[i-1].Meta.Version {
			t.Fatalf("versions not increasing: v%d (parent %d) after v%d", all[i].Meta.Version, all[i].Meta.Parent, all[i-1].Meta.Version)
		}
	}
	// The counter follows Apply's return: wait for it, then count exactly.
	poll.EventuallyTrue(t, 10*time.Second, "the third apply counted", func() bool { return counter(t, reg, "applied") >= 3 })
	if counter(t, reg, "applied") != 3 {
		t.Fatalf("applied counter = %v, want 3", counter(t, reg, "applied"))
	}
}

func TestRunReloadsOnSIGHUP(t *testing.T) {
	p := filepath.Join(t.TempDir(), "snap.json")
	writeJSON(t, p, testSnapshot(8001))
	rec := &recorder{}
	reg, _ := run(t, Config{Path: p, ProxyCluster: "BFE1", Apply: rec.apply, PollInterval: time.Hour})
	poll.EventuallyTrue(t, 10*time.Second, "initial load applied", func() bool { return rec.lastPort() == 8001 })
	writeJSON(t, p, testSnapshot(8002))
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	poll.EventuallyTrue(t, 10*time.Second, "SIGHUP reloaded", func() bool { return rec.lastPort() == 8002 })
	// SIGHUP with nothing changed applies nothing.
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	poll.EventuallyTrue(t, 10*time.Second, "unchanged counted", func() bool { return counter(t, reg, "unchanged") == 1 })
	if n := len(rec.all()); n != 2 {
		t.Fatalf("%d applies, want 2", n)
	}
}

func TestRunFailsWhenInitialLoadFails(t *testing.T) {
	p := filepath.Join(t.TempDir(), "snap.json")
	writeRaw(t, p, `{"meta":`)
	rec := &recorder{}
	err := Run(context.Background(), Config{Path: p, ProxyCluster: "BFE1", Apply: rec.apply, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("Run = %v, want an error naming the file", err)
	}
	if len(rec.all()) != 0 {
		t.Fatal("Apply called for a bad initial load")
	}
}

func TestBFEConfDir(t *testing.T) {
	if _, err := os.Stat(filepath.Join(bfeConf, "server_data_conf", "host_rule.data")); err != nil {
		t.Fatalf("BFE sample missing at %s (testdata/bfe/conf in the repository): %v", bfeConf, err)
	}
	dir := filepath.Join(t.TempDir(), "conf")
	if err := os.CopyFS(dir, os.DirFS(bfeConf)); err != nil {
		t.Fatal(err)
	}
	checked, err := Load(Config{Path: dir, Kind: KindBFE, ProxyCluster: "BFE1"})
	if err != nil {
		t.Fatal(err)
	}
	s := checked.Snapshot()
	if s.Meta.ProxyCluster != "BFE1" || s.Clusters["web_plain"].Policy.Balance.SubclusterMode != config.SubclusterBFE ||
		len(s.Products["shop"].Rules) == 0 {
		t.Fatalf("BFE snapshot: meta %+v, clusters %d, products %d", s.Meta, len(s.Clusters), len(s.Products))
	}

	rec := &recorder{}
	reg, _ := run(t, Config{Path: dir, Kind: KindBFE, ProxyCluster: "BFE1", Apply: rec.apply, PollInterval: 20 * time.Millisecond, Signals: []os.Signal{syscall.SIGUSR2}})
	poll.EventuallyTrue(t, 10*time.Second, "BFE dir applied", func() bool { return len(rec.all()) == 1 })
	// Break one file: the reload fails and the last good stays.
	hr := filepath.Join(dir, "server_data_conf", "host_rule.data")
	good, err := os.ReadFile(hr)
	if err != nil {
		t.Fatal(err)
	}
	writeRaw(t, hr, `{"Version": "x", "HostTags": `)
	poll.EventuallyTrue(t, 10*time.Second, "bad BFE reload counted", func() bool { return counter(t, reg, "invalid") == 1 })
	if len(rec.all()) != 1 {
		t.Fatalf("bad BFE dir applied")
	}
	// Restore it with a new host: a changed snapshot is applied.
	changed := strings.Replace(string(good), `"shop.example.com"`, `"shop.example.com", "new.sluice.test"`, 1)
	if changed == string(good) {
		t.Fatal("sample host_rule.data has no \"shop.example.com\" to extend")
	}
	writeRaw(t, hr, changed)
	poll.EventuallyTrue(t, 10*time.Second, "fixed BFE dir reloaded", func() bool { return len(rec.all()) == 2 })
	hosts := rec.all()[1].Products["shop"].Hosts
	if !contains(hosts, "new.sluice.test") {
		t.Fatalf("reloaded hosts %v lack the new host", hosts)
	}
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

package configwatch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
	"github.com/sluicelb/sluice/proxy/internal/diskcache"
	"github.com/sluicelb/sluice/testkit/poll"
)

const pc = "BFE1"

var layout = keys.MustNew("/sluicetest")

// lineageSnapshot is testSnapshot(version) of a lineage.
func lineageSnapshot(lineage string, version uint64) *snapshot.Snapshot {
	s := testSnapshot(version)
	s.Meta.Lineage = lineage
	return s
}

// testSnapshot is a small valid snapshot whose content depends on version.
func testSnapshot(version uint64) *snapshot.Snapshot {
	s := &snapshot.Snapshot{
		Meta:     snapshot.Meta{ProxyCluster: pc, Version: version, Parent: version - 1, Author: "test", CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)},
		Settings: snapshot.Settings{IDC: "IDC1"},
		Products: map[string]config.Product{"demo": {
			Hosts: []string{"demo.sluice.test"},
			Rules: []config.Rule{{Name: "all", Cond: "default_t()", Cluster: "demo-main"}},
		}},
		DefaultProduct: "demo",
		Clusters: map[string]snapshot.Cluster{"demo-main": {
			SubClusters: map[string]config.SubCluster{
				"SC1": {IDC: "IDC1", Instances: []config.Instance{{Addr: "127.0.0.1", Port: 8001, Weight: 1 + int(version%7)}}},
				"SC2": {IDC: "IDC2", Instances: []config.Instance{{Addr: "127.0.0.2", Port: 8001, Weight: 1}}},
			},
			Policy: config.DefaultPolicy(),
			Row:    snapshot.Row{Denominator: 100, Weights: map[string]int{"SC1": 45, "SC2": 45, config.Blackhole: 10}},
		}},
	}
	s.Meta.Hash = snapshot.ContentHash(s)
	return s
}

// publish writes s the way the scheduler does: parts first, then the
// manifest and the pointer in one transaction.
func publish(t testing.TB, cli *clientv3.Client, s *snapshot.Snapshot) {
	t.Helper()
	m, parts, err := snapshot.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	mraw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	publishPtr(t, cli, pointerOf(s), mraw, parts)
}

// publishRaw writes parts, then manifest bytes and a pointer {version, hash}.
func publishRaw(t testing.TB, cli *clientv3.Client, version uint64, hash string, manifest []byte, parts []snapshot.Part) {
	t.Helper()
	publishPtr(t, cli, snapshot.Pointer{Version: version, Hash: hash}, manifest, parts)
}

// publishPtr writes parts, then manifest bytes and the pointer.
func publishPtr(t testing.TB, cli *clientv3.Client, p snapshot.Pointer, manifest []byte, parts []snapshot.Part) {
	t.Helper()
	version := p.Version
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, p := range parts {
		k, err := layout.Part(p.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, k, string(p.Data)); err != nil {
			t.Fatal(err)
		}
	}
	mk, err := layout.Snapshot(pc, version)
	if err != nil {
		t.Fatal(err)
	}
	ck, _ := layout.Current(pc)
	ptr, _ := json.Marshal(p)
	if _, err := cli.Txn(ctx).Then(clientv3.OpPut(mk, string(manifest)), clientv3.OpPut(ck, string(ptr))).Commit(); err != nil {
		t.Fatal(err)
	}
}

// movePointer points current at an existing snapshot (an operator rollback).
func movePointer(t testing.TB, cli *clientv3.Client, s *snapshot.Snapshot) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ck, _ := layout.Current(pc)
	ptr, _ := json.Marshal(pointerOf(s))
	if _, err := cli.Put(ctx, ck, string(ptr)); err != nil {
		t.Fatal(err)
	}
}

// splitManifest moves the inline content of m into one part.
func splitManifest(m snapshot.Manifest) (snapshot.Manifest, snapshot.Part) {
	sum := sha256.Sum256(m.Inline)
	p := snapshot.Part{Digest: hex.EncodeToString(sum[:]), Data: m.Inline}
	m.Parts, m.Inline = []string{p.Digest}, nil
	return m, p
}

// recorder is an Apply func that records versions and can refuse some.
type recorder struct {
	mu      sync.Mutex
	applied []uint64
	refuse  map[uint64]error
	notify  chan uint64
}

func newRecorder() *recorder { return &recorder{refuse: map[uint64]error{}} }

func (r *recorder) apply(c validate.Checked) error {
	s := c.Snapshot()
	r.mu.Lock()
	err := r.refuse[s.Meta.Version]
	if err == nil {
		r.applied = append(r.applied, s.Meta.Version)
	}
	n := r.notify
	r.mu.Unlock()
	if err == nil && n != nil {
		n <- s.Meta.Version
	}
	return err
}

func (r *recorder) versions() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]uint64(nil), r.applied...)
}

func (r *recorder) last() uint64 {
	v := r.versions()
	if len(v) == 0 {
		return 0
	}
	return v[len(v)-1]
}

// waitApplied waits until w has applied version v: Apply (rec) was called
// with it and the watcher has recorded it. The watcher calls Apply first and
// records, counts, logs and notifies after it returns, so a test that saw
// only rec.last() == v may still read the Status from before.
func waitApplied(t testing.TB, w *Watcher, rec *recorder, v uint64, within time.Duration, what string) {
	t.Helper()
	poll.EventuallyTrue(t, within, what, func() bool { return rec.last() == v && w.Status().AppliedVersion == v })
}

// idleWatcher is a watcher that is not run: a test calls its fetch steps.
func idleWatcher(t testing.TB, cli *clientv3.Client) *Watcher {
	t.Helper()
	w, err := New(Config{Client: cli, Layout: layout, ProxyCluster: pc, Apply: newRecorder().apply, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// start runs a watcher until the test ends.
func start(t testing.TB, cfg Config) *Watcher {
	t.Helper()
	if cfg.Layout.Prefix() == "" {
		cfg.Layout = layout
	}
	if cfg.ProxyCluster == "" {
		cfg.ProxyCluster = pc
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v, want nil after cancel", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Run did not return within 30s of cancel")
		}
	})
	return w
}

func newClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func openCache(t testing.TB, dir string) *diskcache.Cache {
	t.Helper()
	c, err := diskcache.Open(dir, pc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func equal(a, b []uint64) bool {
	return fmt.Sprint(a) == fmt.Sprint(b)
}

var errRefused = errors.New("table build refused")

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// corrupt flips one byte near the end of a file.
func corrupt(t testing.TB, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-3] ^= 0x20
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func clientv3PrefixOpt() clientv3.OpOption { return clientv3.WithPrefix() }

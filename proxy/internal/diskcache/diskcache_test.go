package diskcache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testSnapshot(version uint64) *snapshot.Snapshot {
	s := &snapshot.Snapshot{
		Meta:     snapshot.Meta{ProxyCluster: "BFE1", Version: version, CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)},
		Settings: snapshot.Settings{IDC: "IDC1"},
		Products: map[string]config.Product{"demo": {
			Hosts: []string{"demo.sluice.test"},
			Rules: []config.Rule{{Name: "all", Cond: "default_t()", Cluster: "demo-main"}},
		}},
		DefaultProduct: "demo",
		Clusters: map[string]snapshot.Cluster{"demo-main": {
			SubClusters: map[string]config.SubCluster{"SC1": {IDC: "IDC1", Instances: []config.Instance{
				{Addr: "127.0.0.1", Port: 8001, Weight: int(version%5) + 1},
			}}},
			Policy: config.DefaultPolicy(),
			Row:    snapshot.Row{Denominator: 100, Weights: map[string]int{"SC1": 90, config.Blackhole: 10}},
		}},
	}
	s.Meta.Hash = snapshot.ContentHash(s)
	return s
}

func open(t *testing.T, dir string) *Cache {
	t.Helper()
	c, err := Open(dir, "BFE1")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSaveLoadRoundTrip(t *testing.T) {
	c := open(t, t.TempDir())
	if _, err := c.Load(); !errors.Is(err, fs.ErrNotExist) || !IsNotExist(err) {
		t.Fatalf("Load on empty dir: %v, want fs.ErrNotExist", err)
	}
	for v := uint64(1); v <= 3; v++ {
		if err := c.Save(testSnapshot(v)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.Load()
	if err != nil {
		t.Fatal(err)
	}
	want := testSnapshot(3)
	if got.Snapshot().Meta.Version != 3 || got.Snapshot().Meta.Hash != want.Meta.Hash || snapshot.ContentHash(got.Snapshot()) != want.Meta.Hash {
		t.Fatalf("loaded v%d hash %s, want v3 hash %s", got.Snapshot().Meta.Version, got.Snapshot().Meta.Hash, want.Meta.Hash)
	}
	if fi, err := os.Stat(c.Path()); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Fatalf("cache file mode: %v %v; want no group/other access", fi.Mode(), err)
	}
}

func TestCrashMidWriteKeepsOldFile(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir)
	if err := c.Save(testSnapshot(5)); err != nil {
		t.Fatal(err)
	}
	// A crash during Save leaves a half-written temp file next to the good one.
	tmp := filepath.Join(dir, "BFE1.snapshot.tmp-12345")
	if err := os.WriteFile(tmp, []byte(magic+" len=999 sha256=00 version=6\n{\"meta\":"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := c.Load()
	if err != nil || got.Snapshot().Meta.Version != 5 {
		t.Fatalf("Load after crash = %v, %v; want v5", got, err)
	}
	// A recent temp file may be a Save in progress: Open keeps it.
	open(t, dir)
	if _, err := os.Stat(tmp); err != nil {
		t.Fatalf("fresh temp file removed by Open: %v", err)
	}
	// Reopening later (the restarted process) removes the leftover.
	old := time.Now().Add(-2 * staleTemp)
	if err := os.Chtimes(tmp, old, old); err != nil {
		t.Fatal(err)
	}
	c2 := open(t, dir)
	if _, err := os.Stat(tmp); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("temp file still there after Open: %v", err)
	}
	if got, err := c2.Load(); err != nil || got.Snapshot().Meta.Version != 5 {
		t.Fatalf("Load after reopen = %v, %v; want v5", got, err)
	}
}

func TestCorruptFiles(t *testing.T) {
	good := func(t *testing.T) []byte {
		dir := t.TempDir()
		c := open(t, dir)
		if err := c.Save(testSnapshot(7)); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(c.Path())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name    string
		mutate  func([]byte) []byte
		wantErr string
	}{
		{"flipped byte", func(b []byte) []byte { b[len(b)-5] ^= 1; return b }, "sha256"},
		{"truncated", func(b []byte) []byte { return b[:len(b)-10] }, "truncated write"},
		{"no header", func(b []byte) []byte { return []byte("{}") }, "no header line"},
		{"wrong magic", func(b []byte) []byte { return append([]byte("other/v9"), b[len(magic):]...) }, "is not"},
		{"garbage json with valid checksum", func(b []byte) []byte { return rebuild([]byte(`{"meta": garbage`)) }, "decode snapshot"},
		{"unknown field", func(b []byte) []byte {
			body := b[strings.IndexByte(string(b), '\n')+1:]
			return rebuild(append([]byte(`{"bogus":1,`), body[1:]...))
		}, "bogus"},
		{"other proxy cluster", func(b []byte) []byte {
			body := b[strings.IndexByte(string(b), '\n')+1:]
			return rebuild([]byte(strings.Replace(string(body), `"proxy_cluster":"BFE1"`, `"proxy_cluster":"BFE2"`, 1)))
		}, `"BFE2"`},
		{"semantically invalid (row sum)", func(b []byte) []byte {
			s := testSnapshot(7)
			c := s.Clusters["demo-main"]
			c.Row.Weights["SC1"] = 95
			s.Clusters["demo-main"] = c
			s.Meta.Hash = snapshot.ContentHash(s)
			body, _ := json.Marshal(s)
			return rebuild(body)
		}, "invalid snapshot v7"},
		{"content hash mismatch", func(b []byte) []byte {
			body := b[strings.IndexByte(string(b), '\n')+1:]
			return rebuild([]byte(strings.Replace(string(body), `"port":8001`, `"port":8002`, 1)))
		}, "content hash"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			c := open(t, dir)
			if err := os.WriteFile(c.Path(), tc.mutate(good(t)), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := c.Load()
			if s.Snapshot() != nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Load = %v, %v; want ErrCorrupt mentioning %q", s, err, tc.wantErr)
			}
			if _, err := os.Stat(c.Path() + ".corrupt"); err != nil {
				t.Fatalf("corrupt file not kept for inspection: %v", err)
			}
			if _, err := c.Load(); !IsNotExist(err) {
				t.Fatalf("second Load: %v, want not-exist (file moved aside)", err)
			}
		})
	}
}

// rebuild wraps body in a header with a correct length and checksum.
func rebuild(body []byte) []byte {
	sum := sha256.Sum256(body)
	h := fmt.Sprintf("%s len=%d sha256=%s version=7\n", magic, len(body), hex.EncodeToString(sum[:]))
	return append([]byte(h), body...)
}

func TestRejectsBadNames(t *testing.T) {
	if _, err := Open(t.TempDir(), "../etc"); err == nil {
		t.Fatal("Open accepted a proxy cluster name with a path in it")
	}
	c := open(t, t.TempDir())
	s := testSnapshot(1)
	s.Meta.ProxyCluster = "BFE2"
	if err := c.Save(s); err == nil || !strings.Contains(err.Error(), "BFE2") {
		t.Fatalf("Save of another proxy cluster's snapshot: %v", err)
	}
}

package filesource

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkPollUnchanged is one poll of an unchanged source: "hash" is
// what every poll did before stamps (read and hash the content), "stat"
// what it does now once the stamps are trusted.
func BenchmarkPollUnchanged(b *testing.B) {
	p := filepath.Join(b.TempDir(), "snap.json")
	if err := os.WriteFile(p, make([]byte, 256<<10), 0o600); err != nil {
		b.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(p, old, old); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cfg  Config
	}{{"file-256KiB", Config{Path: p}}, {"bfe-dir", Config{Path: bfeConf, Kind: KindBFE}}} {
		b.Run(c.name+"/hash", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := fingerprint(c.cfg); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/stat", func(b *testing.B) {
			w := newPoller(c.cfg)
			w.clock = afterWindow
			w.reset()
			b.ReportAllocs()
			for b.Loop() {
				if ch, err := w.changed(); ch || err != nil {
					b.Fatal(ch, err)
				}
			}
			if w.hashes != 1 {
				b.Fatalf("%d hashes, want 1", w.hashes)
			}
		})
	}
}

package filesource

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelb/sluice/testkit/poll"
)

// writeInPlace rewrites path's content in place (the same inode, as `cat >`
// or an editor that does not rename) and sets its mtime to mtime, as
// `cp -p`, `rsync -t` or `tar x` do: only the ctime tells it was written.
func writeInPlace(t *testing.T, path string, port int, mtime time.Time) {
	t.Helper()
	b, err := json.MarshalIndent(testSnapshot(port), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// pastTick waits until the clock is well past path's ctime, so that the
// next write gets another ctime whatever the kernel's timestamp tick.
func pastTick(t *testing.T, path string) {
	t.Helper()
	st, err := stampOf(Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	poll.EventuallyTrue(t, 5*time.Second, "the clock past the file's ctime", func() bool { return time.Since(st.newest) > 50*time.Millisecond })
}

// afterWindow is a clock past racyWindow of the files a test just wrote:
// their stamps are trusted at once (TestPollSameSizeRewriteSameStamp tests
// the window itself).
func afterWindow() time.Time { return time.Now().Add(time.Minute) }

// An unchanged source costs a stat per poll, not a read and a hash; the
// content is hashed again only when the stamps move, and a move that is
// not a change (touch) is not reported as one.
func TestPollUnchangedIsStatOnly(t *testing.T) {
	p := filepath.Join(t.TempDir(), "snap.json")
	old := time.Now().Add(-time.Hour)
	writeInPlace(t, p, 8001, old)
	w := newPoller(Config{Path: p})
	w.clock = afterWindow // the ctime is now: hashed at once it is not trusted yet
	w.reset()
	if w.hashes != 1 || w.fp == "" {
		t.Fatalf("reset: %d hashes, fingerprint %q; want one hash", w.hashes, w.fp)
	}
	for i := 0; i < 5; i++ {
		if ch, err := w.changed(); ch || err != nil {
			t.Fatalf("poll %d of an unchanged file: changed %v, %v", i, ch, err)
		}
	}
	if w.hashes != 1 {
		t.Fatalf("5 polls of an unchanged file hashed it %d more times, want 0", w.hashes-1)
	}
	later := old.Add(time.Minute)
	if err := os.Chtimes(p, later, later); err != nil {
		t.Fatal(err)
	}
	if ch, err := w.changed(); ch || err != nil || w.hashes != 2 {
		t.Fatalf("after touch: changed %v, %v, %d hashes; want no change, found by a second hash", ch, err, w.hashes)
	}
}

// A same-size rewrite whose mtime was set back is caught by the ctime (and
// a rename by the inode), with no help from the racy rule: the mtime is an
// hour old.
func TestPollSameSizeRewriteMtimeKept(t *testing.T) {
	p := filepath.Join(t.TempDir(), "snap.json")
	old := time.Now().Add(-time.Hour)
	writeInPlace(t, p, 8001, old)
	w := newPoller(Config{Path: p})
	w.clock = afterWindow // the stamps alone decide
	w.reset()
	pastTick(t, p)
	writeInPlace(t, p, 8002, old)
	if ch, err := w.changed(); !ch || err != nil {
		t.Fatalf("same size, same mtime, new content: changed %v, %v; want a change", ch, err)
	}
	pastTick(t, p)
	writeJSON(t, p, testSnapshot(8003)) // write then rename: another inode
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	if ch, err := w.changed(); !ch || err != nil {
		t.Fatalf("renamed over, mtime kept: changed %v, %v; want a change", ch, err)
	}
}

// On a file system whose stamps are coarse (a second, two on FAT; the
// kernel's clock tick anywhere), a same-size rewrite within one tick of the
// previous write leaves every stamp as it was. Content hashed within
// racyWindow of its newest stamp is hashed again until a hash is taken
// after the window: the rewrite is caught, and then polls are stat only.
func TestPollSameSizeRewriteSameStamp(t *testing.T) {
	p := filepath.Join(t.TempDir(), "snap.json")
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	writeInPlace(t, p, 8001, t0)
	now := t0.Add(400 * time.Millisecond)
	w := newPoller(Config{Path: p})
	w.clock = func() time.Time { return now }
	// Every stamp the same whatever is written: the worst file system.
	w.stat = func(Config) (stamps, error) { return stamps{sig: "same", newest: t0, trusted: true}, nil }
	w.reset() // hashed 0.4 s after the newest stamp: not to be trusted yet
	writeInPlace(t, p, 8002, t0)
	now = t0.Add(2 * time.Second)
	if ch, err := w.changed(); !ch || err != nil {
		t.Fatalf("same-size rewrite within the stamp's tick: changed %v, %v; want a change", ch, err)
	}
	now = t0.Add(4 * time.Second)
	if ch, err := w.changed(); ch || err != nil || w.hashes != 3 {
		t.Fatalf("hashed 2 s after the stamp, polled again: changed %v, %v, %d hashes; want no change, a third hash", ch, err, w.hashes)
	}
	now = t0.Add(time.Minute)
	for i := 0; i < 3; i++ {
		if ch, err := w.changed(); ch || err != nil {
			t.Fatalf("poll %d: changed %v, %v", i, ch, err)
		}
	}
	if w.hashes != 3 {
		t.Fatalf("%d hashes; want 3: the hash at 4 s was taken past the window, so stat only from then on", w.hashes)
	}
	// A stamp in the future (a skewed clock) is never trusted.
	w.stat = func(Config) (stamps, error) {
		return stamps{sig: "later", newest: now.Add(time.Hour), trusted: true}, nil
	}
	for i := 0; i < 2; i++ {
		w.changed()
	}
	if w.hashes != 5 {
		t.Fatalf("%d hashes with a stamp in the future; want every poll to hash (5)", w.hashes)
	}
}

// Run reloads a same-size in-place rewrite whose mtime was set back.
func TestRunReloadsSameSizeRewrite(t *testing.T) {
	p := filepath.Join(t.TempDir(), "snap.json")
	old := time.Now().Add(-time.Hour)
	writeInPlace(t, p, 8001, old)
	rec := &recorder{}
	run(t, Config{Path: p, ProxyCluster: "BFE1", Apply: rec.apply, PollInterval: 20 * time.Millisecond, Signals: []os.Signal{syscall.SIGUSR2}})
	poll.EventuallyTrue(t, 10*time.Second, "initial load applied", func() bool { return rec.lastPort() == 8001 })
	writeInPlace(t, p, 8002, old)
	poll.EventuallyTrue(t, 10*time.Second, "same-size rewrite reloaded", func() bool { return rec.lastPort() == 8002 })
}

// A BFE directory's poll stats its files: a same-size rewrite of one with
// its mtime kept is a change, an unchanged directory is not hashed again.
func TestPollBFEDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "conf")
	if err := os.CopyFS(dir, os.DirFS(bfeConf)); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	var victim string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			victim = p
			return os.Chtimes(p, old, old)
		}
		return err
	})
	if err != nil || victim == "" {
		t.Fatalf("walk: %v, file %q", err, victim)
	}
	w := newPoller(Config{Path: dir, Kind: KindBFE})
	w.clock = afterWindow
	w.reset()
	if ch, err := w.changed(); ch || err != nil || w.hashes != 1 {
		t.Fatalf("unchanged dir: changed %v, %v, %d hashes; want no change, 1 hash", ch, err, w.hashes)
	}
	b, err := os.ReadFile(victim)
	if err != nil || len(b) == 0 {
		t.Fatalf("read %s: %v (%d bytes)", victim, err, len(b))
	}
	b[len(b)-1] ^= 1
	if err := os.WriteFile(victim, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(victim, old, old); err != nil {
		t.Fatal(err)
	}
	if ch, err := w.changed(); !ch || err != nil {
		t.Fatalf("one file rewritten, same size and mtime: changed %v, %v; want a change", ch, err)
	}
}

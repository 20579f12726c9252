package filesource

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// racyWindow: content hashed less than this long after its newest
// modification time is hashed again at the next poll, whatever the stamps
// say. A file system stamps times at its own granularity (the kernel's
// coarse clock tick, a second on some file systems and NFS servers, two on
// FAT), so a same-size rewrite in place within that tick leaves size, mtime
// and ctime as they were; it can only have come after a hash taken within
// the tick. Once a hash was taken this long after the newest mtime, a later
// write gets a later mtime and ctime, and the stamps alone tell.
const racyWindow = 3 * time.Second

// stamps is what a poll learns from stat alone: sig covers every file of
// the source (its path, size, mode, mtime, and on Linux device, inode and
// ctime), newest is the newest mtime or ctime among them, trusted is false
// when the platform gave no inode (then every poll hashes).
type stamps struct {
	sig     string
	newest  time.Time
	trusted bool
}

// stampOf stats the source: the file (symlinks followed, so a swapped
// symlink is another inode), or every regular file of a BFE directory,
// the same files fingerprint reads.
func stampOf(cfg Config) (stamps, error) {
	st := stamps{trusted: true}
	var b strings.Builder
	add := func(rel string, fi fs.FileInfo) {
		dev, ino, ctime, ok := sysStamp(fi)
		st.trusted = st.trusted && ok
		fmt.Fprintf(&b, "%s\x00%d\x00%d\x00%d\x00%d\x00%d\x00%d\n", rel, fi.Size(), fi.Mode(), fi.ModTime().UnixNano(), dev, ino, ctime)
		if m := fi.ModTime(); m.After(st.newest) {
			st.newest = m
		}
		if c := time.Unix(0, ctime); ok && c.After(st.newest) {
			st.newest = c
		}
	}
	if cfg.Kind != KindBFE {
		fi, err := os.Stat(cfg.Path)
		if err != nil {
			return stamps{}, err
		}
		add("", fi)
		st.sig = b.String()
		return st, nil
	}
	err := filepath.WalkDir(cfg.Path, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(cfg.Path, p)
		add(rel, fi)
		return nil
	})
	if err != nil {
		return stamps{}, err
	}
	st.sig = b.String()
	return st, nil
}

// poller tells whether the source's content changed since the last look,
// cheaply: stat first (stampOf), and the content hash (fingerprint) only
// when the stamps moved, the platform gives no inode, or the last hash was
// taken within racyWindow of the newest modification (see racyWindow).
type poller struct {
	cfg      Config
	stat     func(Config) (stamps, error) // stampOf; tests stand in a file system's coarse stamps
	clock    func() time.Time             // the real clock: compared with file times
	st       stamps
	hashedAt time.Time // when the hash in fp began
	fp       string
	hashes   int // content hashes taken (tests and benchmarks)
}

func newPoller(cfg Config) *poller { return &poller{cfg: cfg, stat: stampOf, clock: time.Now} }

// reset takes the source as it is now as the one seen (at start, and
// before a reload on a signal). An error leaves nothing seen: the next
// poll that can read the source reports a change.
func (p *poller) reset() {
	p.st, p.fp = stamps{}, ""
	st, err := p.stat(p.cfg)
	if err != nil {
		return
	}
	at := p.clock()
	fp, err := p.hash()
	if err != nil {
		return
	}
	p.st, p.hashedAt, p.fp = st, at, fp
}

// changed reports whether the content differs from the one seen last, and
// makes it the one seen. The stamps are read before the content, so a write
// between the two is seen by the next poll, never lost.
func (p *poller) changed() (bool, error) {
	st, err := p.stat(p.cfg)
	if err != nil {
		return false, err
	}
	if st.trusted && st.sig == p.st.sig && p.hashedAt.Sub(st.newest) >= racyWindow {
		return false, nil
	}
	at := p.clock()
	fp, err := p.hash()
	if err != nil {
		return false, err
	}
	p.st, p.hashedAt = st, at
	if fp == p.fp {
		return false, nil
	}
	p.fp = fp
	return true, nil
}

func (p *poller) hash() (string, error) {
	p.hashes++
	return fingerprint(p.cfg)
}

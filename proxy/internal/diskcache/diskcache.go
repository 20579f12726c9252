// Package diskcache keeps a proxy's last good snapshot on disk, so a proxy
// restarted while etcd is unreachable serves what it served before (I3).
//
// The file is written whole to a temporary file, fsynced and renamed over
// the old one (then the directory is fsynced), so a crash mid-write leaves
// the old file intact. Its content is a one-line header carrying the length
// and SHA-256 of the JSON body that follows; Load verifies both, decodes
// strictly and runs the semantic validator before returning anything.
package diskcache

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
)

// ErrCorrupt is returned (wrapped) by Load when the file exists but cannot be
// trusted: bad header, length or checksum mismatch, undecodable or invalid
// content. The file is then renamed to Path()+".corrupt" for inspection.
var ErrCorrupt = errors.New("disk cache corrupt")

// magic starts every cache file; the version lets the format evolve.
const magic = "sluice-snapshot-cache/v1"

// staleTemp is the age past which Open deletes leftover temp files.
const staleTemp = time.Minute

// maxFile bounds what Load reads (header + the largest decodable snapshot).
const maxFile = snapshot.MaxDecoded + 4096

// Cache is the cache file of one proxy cluster in one directory. Its methods
// are safe for concurrent use.
type Cache struct {
	dir, proxyCluster, path string
	mu                      sync.Mutex
}

// Open returns the cache for proxyCluster in dir, creating dir (0700) if
// needed and removing temporary files left by an interrupted Save (older
// than a minute).
func Open(dir string, proxyCluster string) (*Cache, error) {
	if err := keys.ValidName(proxyCluster); err != nil {
		return nil, fmt.Errorf("open disk cache: proxy cluster: %w", err)
	}
	if dir == "" {
		return nil, errors.New("open disk cache: directory is empty")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open disk cache: %w", err)
	}
	c := &Cache{dir: dir, proxyCluster: proxyCluster, path: filepath.Join(dir, proxyCluster+".snapshot")}
	// Remove what an interrupted Save left behind. Recent temp files may
	// belong to a Save in progress (another Cache on the same directory).
	stale, _ := filepath.Glob(filepath.Join(dir, proxyCluster+".snapshot.tmp-*"))
	for _, f := range stale {
		if fi, err := os.Stat(f); err == nil && time.Since(fi.ModTime()) > staleTemp {
			_ = os.Remove(f)
		}
	}
	return c, nil
}

// Path is the cache file's path.
func (c *Cache) Path() string { return c.path }

// Save replaces the cached snapshot with s atomically.
func (c *Cache) Save(s *snapshot.Snapshot) error {
	if s == nil {
		return errors.New("save disk cache: snapshot is nil")
	}
	if s.Meta.ProxyCluster != c.proxyCluster {
		return fmt.Errorf("save disk cache: snapshot is for proxy cluster %q, cache is for %q", s.Meta.ProxyCluster, c.proxyCluster)
	}
	cp := *s
	if cp.Meta.Hash == "" {
		cp.Meta.Hash = snapshot.ContentHash(s)
	}
	body, err := json.Marshal(&cp)
	if err != nil {
		return fmt.Errorf("save disk cache: %w", err)
	}
	sum := sha256.Sum256(body)
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "%s len=%d sha256=%s version=%d\n", magic, len(body), hex.EncodeToString(sum[:]), s.Meta.Version)
	buf.Write(body)

	c.mu.Lock()
	defer c.mu.Unlock()
	tmp, err := os.CreateTemp(c.dir, filepath.Base(c.path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("save disk cache: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("save disk cache: write: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("save disk cache: fsync: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save disk cache: close: %w", err)
	}
	if err := os.Rename(tmp.Name(), c.path); err != nil {
		return fmt.Errorf("save disk cache: rename: %w", err)
	}
	ok = true
	if d, err := os.Open(c.dir); err == nil {
		// Make the rename itself durable; failure here leaves a valid file.
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// Load returns the cached snapshot. A missing file gives an error wrapping
// fs.ErrNotExist; an untrustworthy one an error wrapping ErrCorrupt (and the
// file is moved aside to Path()+".corrupt"). The snapshot comes back checked
// (validate.Check), ready for server.Apply.
func (c *Cache) Load() (validate.Checked, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	raw, err := readLimited(c.path)
	if err != nil {
		return validate.Checked{}, fmt.Errorf("load disk cache: %w", err)
	}
	s, err := c.parse(raw)
	if err != nil {
		if rerr := os.Rename(c.path, c.path+".corrupt"); rerr == nil {
			err = fmt.Errorf("%w (moved to %s)", err, c.path+".corrupt")
		}
		return validate.Checked{}, fmt.Errorf("load disk cache %s: %w: %w", c.path, ErrCorrupt, err)
	}
	return s, nil
}

func readLimited(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Size() > maxFile {
		return nil, fmt.Errorf("%s is %d bytes, over the %d-byte limit: %w", path, fi.Size(), maxFile, ErrCorrupt)
	}
	return os.ReadFile(path)
}

func (c *Cache) parse(raw []byte) (validate.Checked, error) {
	nl := bytes.IndexByte(raw, '\n')
	if nl < 0 {
		return validate.Checked{}, errors.New("no header line")
	}
	hdr, body := string(raw[:nl]), raw[nl+1:]
	f := strings.Fields(hdr)
	if len(f) != 4 || f[0] != magic {
		return validate.Checked{}, fmt.Errorf("header %q is not %q followed by len, sha256 and version", truncate(hdr), magic)
	}
	n, err := strconv.Atoi(strings.TrimPrefix(f[1], "len="))
	if err != nil || !strings.HasPrefix(f[1], "len=") {
		return validate.Checked{}, fmt.Errorf("header field %q is not len=<bytes>", truncate(f[1]))
	}
	if n != len(body) {
		return validate.Checked{}, fmt.Errorf("body is %d bytes, header says %d (truncated write?)", len(body), n)
	}
	sum := sha256.Sum256(body)
	if got, want := hex.EncodeToString(sum[:]), strings.TrimPrefix(f[2], "sha256="); got != want {
		return validate.Checked{}, fmt.Errorf("body sha256 is %s, header says %s", got, truncate(want))
	}
	s, err := snapshot.Unmarshal(body)
	if err != nil {
		return validate.Checked{}, err
	}
	if s.Meta.ProxyCluster != c.proxyCluster {
		return validate.Checked{}, fmt.Errorf("snapshot is for proxy cluster %q, cache is for %q", s.Meta.ProxyCluster, c.proxyCluster)
	}
	if h := snapshot.ContentHash(s); h != s.Meta.Hash {
		return validate.Checked{}, fmt.Errorf("content hash is %s, meta.hash says %s", h, s.Meta.Hash)
	}
	checked, err := validate.Check(s)
	if err != nil {
		return validate.Checked{}, fmt.Errorf("invalid snapshot v%d: %w", s.Meta.Version, err)
	}
	return checked, nil
}

func truncate(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}

// IsNotExist reports whether err says there is no cache file yet.
func IsNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// Package filesource feeds a proxy from local files instead of etcd:
// `lbproxy --config FILE` (a Sluice snapshot, or a desired-state document
// compiled for one proxy cluster) and `lbproxy --bfe-conf DIR` (a BFE
// configuration directory, imported through api/bfe).
//
// The initial load must succeed. After that the source is reloaded on SIGHUP
// and whenever its content changes (polled), with the same rule as the etcd
// path: decode strictly, validate, then swap; a bad reload is logged and
// counted and the last good snapshot stays.
package filesource

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelb/sluice/api/bfe"
	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
)

// Kind is what Path holds.
type Kind int

const (
	// KindSnapshot: a JSON or YAML file holding a snapshot, or a desired
	// state document (recognised by its "topology" field) compiled with
	// snapshot.FromState for ProxyCluster.
	KindSnapshot Kind = iota
	// KindBFE: a BFE conf directory (server_data_conf/, cluster_conf/).
	KindBFE
)

func (k Kind) String() string {
	switch k {
	case KindSnapshot:
		return "snapshot"
	case KindBFE:
		return "bfe"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// DefaultPollInterval is how often Run checks the source for changes.
const DefaultPollInterval = 2 * time.Second

// maxBFEDirBytes bounds what change detection reads from a BFE directory.
const maxBFEDirBytes = 256 << 20

// Config configures Load and Run.
type Config struct {
	Path string
	Kind Kind
	// ProxyCluster names the proxy cluster the snapshot is for. Required for
	// desired-state documents with several proxy clusters; a snapshot file's
	// own meta.proxy_cluster must match it when both are set. BFE imports
	// default to bfe.DefaultProxyCluster.
	ProxyCluster string
	// Apply swaps in a checked snapshot; an error leaves the previous one.
	Apply func(validate.Checked) error
	// OnChange, when set, is called after each apply or reject has been
	// logged and recorded in State (as configwatch's OnChange).
	OnChange func()
	Logger   *slog.Logger
	// PollInterval between change checks. Default 2s. A check stats the
	// source (size, mode, mtime, inode, ctime) and hashes its content only
	// when those moved or were too recent to trust (poll.go).
	PollInterval time.Duration
	// Signals trigger a reload. Default SIGHUP.
	Signals []os.Signal
	// Metrics, when set, receives sluice_proxy_config_reloads_total{result}
	// and the sluice_proxy_snapshot_* series of etcd mode (applies by
	// result, apply duration, version, staleness).
	Metrics prometheus.Registerer
	// State, when set, is kept up to date with what was applied and
	// rejected (for /v1/status).
	State *State
	// Now stamps the applied and rejected records and a desired state's
	// meta.created_at; nil means time.Now. The apply duration metric is
	// timed on the real clock.
	Now func() time.Time
}

// Load reads, decodes and validates the source once.
func Load(cfg Config) (validate.Checked, error) {
	s, err := decode(cfg)
	if err != nil {
		return validate.Checked{}, err
	}
	return check(cfg, s)
}

// check validates a decoded snapshot of the source.
func check(cfg Config, s *snapshot.Snapshot) (validate.Checked, error) {
	c, err := validate.Check(s)
	if err != nil {
		if cfg.Kind == KindBFE {
			return c, fmt.Errorf("load bfe conf %s: %w", cfg.Path, err)
		}
		return c, fmt.Errorf("load config %s: invalid snapshot: %w", cfg.Path, err)
	}
	return c, nil
}

// decode reads and decodes the source once; check validates the result.
func decode(cfg Config) (*snapshot.Snapshot, error) {
	if cfg.Path == "" {
		return nil, errors.New("load config: path is empty")
	}
	switch cfg.Kind {
	case KindSnapshot:
		return loadFile(cfg)
	case KindBFE:
		s, err := bfe.Snapshot(cfg.Path, bfe.ImportOptions{ProxyCluster: cfg.ProxyCluster})
		if err != nil {
			return nil, fmt.Errorf("load bfe conf %s: %w", cfg.Path, err)
		}
		return s, nil
	}
	return nil, fmt.Errorf("load config: unknown kind %v", cfg.Kind)
}

func loadFile(cfg Config) (*snapshot.Snapshot, error) {
	raw, err := readFile(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	j, err := codec.ToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("load config %s: %w", cfg.Path, err)
	}
	var s *snapshot.Snapshot
	if codec.KindOf(j) == codec.KindState {
		s, err = fromState(cfg, j)
	} else {
		s, err = fromSnapshot(cfg, j)
	}
	if err != nil {
		return nil, fmt.Errorf("load config %s: %w", cfg.Path, err)
	}
	return s, nil
}

func fromSnapshot(cfg Config, j []byte) (*snapshot.Snapshot, error) {
	s, err := snapshot.Unmarshal(j)
	if err != nil {
		return nil, err
	}
	switch {
	case s.Meta.ProxyCluster == "":
		if cfg.ProxyCluster == "" {
			return nil, errors.New("meta.proxy_cluster is empty and no proxy cluster is configured")
		}
		s.Meta.ProxyCluster = cfg.ProxyCluster
	case cfg.ProxyCluster != "" && s.Meta.ProxyCluster != cfg.ProxyCluster:
		return nil, fmt.Errorf("meta.proxy_cluster is %q, this proxy serves %q", s.Meta.ProxyCluster, cfg.ProxyCluster)
	}
	if s.Meta.Version == 0 {
		s.Meta.Version = 1
	}
	h := snapshot.ContentHash(s)
	if s.Meta.Hash != "" && s.Meta.Hash != h {
		return nil, fmt.Errorf("meta.hash is %s but the content hashes to %s (remove meta.hash from hand-written files)", s.Meta.Hash, h)
	}
	s.Meta.Hash = h
	return s, nil
}

func fromState(cfg Config, j []byte) (*snapshot.Snapshot, error) {
	var st config.State
	if err := codec.UnmarshalJSON(j, &st); err != nil {
		return nil, fmt.Errorf("desired state: %w", err)
	}
	if err := validate.State(&st); err != nil {
		return nil, fmt.Errorf("invalid desired state: %w", err)
	}
	pc := cfg.ProxyCluster
	if pc == "" {
		if len(st.Topology.ProxyClusters) != 1 {
			return nil, fmt.Errorf("desired state has %d proxy clusters; say which one this proxy serves", len(st.Topology.ProxyClusters))
		}
		for name := range st.Topology.ProxyClusters {
			pc = name
		}
	}
	return snapshot.FromState(&st, pc, snapshot.Meta{Version: 1, Author: "file", Reason: "desired state " + cfg.Path, CreatedAt: cfg.now().UTC()})
}

// now reads cfg.Now, or time.Now when it is nil.
func (cfg Config) now() time.Time {
	if cfg.Now == nil {
		return time.Now()
	}
	return cfg.Now()
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, codec.MaxDocument+1))
	if err != nil {
		return nil, err
	}
	if len(b) > codec.MaxDocument {
		return nil, fmt.Errorf("%s is larger than the %d-byte limit", path, codec.MaxDocument)
	}
	return b, nil
}

// fingerprint hashes the content of the source (every regular file of a BFE
// directory, with its relative path), so any edit is seen whatever the
// mtime granularity. The poll asks for it only when stat cannot tell
// (poller).
func fingerprint(cfg Config) (string, error) {
	h := sha256.New()
	if cfg.Kind != KindBFE {
		b, err := readFile(cfg.Path)
		if err != nil {
			return "", err
		}
		h.Write(b)
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	var files []string
	err := filepath.WalkDir(cfg.Path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	var total int64
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			return "", err
		}
		if total += int64(len(b)); total > maxBFEDirBytes {
			return "", fmt.Errorf("%s holds more than %d bytes", cfg.Path, maxBFEDirBytes)
		}
		rel, _ := filepath.Rel(cfg.Path, p)
		fmt.Fprintf(h, "%s\x00%d\x00", rel, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Run loads and applies the source (an error there is returned), then
// reloads on the configured signals and on content changes until ctx is
// done, when it returns nil. Snapshot versions count reloads: the first
// applied snapshot keeps its version, every later one is numbered above the
// previous one, so versions only grow.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Apply == nil {
		return errors.New("file source: Apply is nil")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if len(cfg.Signals) == 0 {
		cfg.Signals = []os.Signal{syscall.SIGHUP}
	}
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_proxy_config_reloads_total",
		Help: "File configuration reloads by result (applied, unchanged, invalid, rejected).",
	}, []string{"result"})
	sm := newSnapshotMetrics()
	if cfg.Metrics != nil {
		if err := cfg.Metrics.Register(reloads); err != nil {
			return fmt.Errorf("file source: register metrics: %w", err)
		}
		defer cfg.Metrics.Unregister(reloads)
		undo, err := sm.register(cfg.Metrics)
		if err != nil {
			return err
		}
		defer undo()
	}
	state := cfg.State
	if state == nil {
		state = new(State)
	}
	// apply applies s and records the outcome in the metrics and the state.
	apply := func(c validate.Checked) error {
		s := c.Snapshot()
		start := time.Now()
		err := cfg.Apply(c)
		sm.ApplyDur.Observe(time.Since(start).Seconds())
		now := cfg.now()
		if err != nil {
			sm.Applies.WithLabelValues("rejected").Inc()
			state.rejected(s.Meta.Version, "apply: "+err.Error(), now)
			return err
		}
		sm.Applies.WithLabelValues("applied").Inc()
		sm.Version.Set(float64(s.Meta.Version))
		state.applied(s.Meta, now)
		return nil
	}
	changed := func() {
		if cfg.OnChange != nil {
			cfg.OnChange()
		}
	}
	log := cfg.Logger.With("component", "filesource", "path", cfg.Path, "kind", cfg.Kind.String())

	// Listen before the first load so a SIGHUP sent once it is applied
	// is never the default action (terminate).
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, cfg.Signals...)
	defer signal.Stop(sig)

	watch := newPoller(cfg)
	watch.reset() // before the load: a change during it is seen by the first poll
	first, err := Load(cfg)
	if err != nil {
		return err
	}
	if err := apply(first); err != nil {
		return fmt.Errorf("file source: apply %s: %w", cfg.Path, err)
	}
	applied := first.Snapshot().Meta
	reloads.WithLabelValues("applied").Inc()
	log.Info("configuration loaded", "version", applied.Version, "hash", applied.Hash)
	changed()

	invalid := func(why string, err error) {
		reloads.WithLabelValues("invalid").Inc()
		// The version it would have had: the next one.
		sm.Applies.WithLabelValues("rejected").Inc()
		state.rejected(applied.Version+1, err.Error(), cfg.now())
		log.Error("configuration reload failed; keeping the last good one", "trigger", why, "err", err)
		changed()
	}
	reload := func(why string) {
		s, err := decode(cfg)
		if err != nil {
			invalid(why, err)
			return
		}
		if s.Meta.Hash == applied.Hash && validate.Snapshot(s) == nil {
			reloads.WithLabelValues("unchanged").Inc()
			sm.Applies.WithLabelValues("unchanged").Inc()
			log.Info("configuration unchanged", "trigger", why)
			return
		}
		// Renumbered before the check, so what is applied is what was checked.
		s.Meta.Version = max(s.Meta.Version, applied.Version+1)
		s.Meta.Parent = applied.Version
		c, err := check(cfg, s)
		if err != nil {
			invalid(why, err)
			return
		}
		if err := apply(c); err != nil {
			reloads.WithLabelValues("rejected").Inc()
			log.Error("configuration rejected by apply; keeping the last good one", "trigger", why, "err", err)
			changed()
			return
		}
		applied = s.Meta
		reloads.WithLabelValues("applied").Inc()
		log.Info("configuration reloaded", "trigger", why, "version", applied.Version, "hash", applied.Hash)
		changed()
	}

	t := time.NewTicker(cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case v := <-sig:
			watch.reset()
			reload(v.String())
		case <-t.C:
			ch, err := watch.changed()
			if err != nil {
				// A file being replaced may vanish for a moment; try again next tick.
				log.Debug("change check failed", "err", err)
				continue
			}
			if ch {
				reload("change")
			}
		}
	}
}

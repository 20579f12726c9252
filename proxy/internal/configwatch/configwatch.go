// Package configwatch keeps a proxy's snapshot in step with etcd.
//
// It lists current/<proxyCluster>, fetches the manifest and parts the
// pointer names, decodes and validates the snapshot and hands it to Apply,
// then watches the pointer from the listed revision + 1. Any compaction,
// closed channel, watch error or stall (no event and no progress
// notification for StallTimeout) restarts that cycle after a jittered
// backoff; so does a store that is no longer the one listed (etcd wiped,
// replaced or restored). Those list-then-watch rules are api/etcdwatch's. Within a lineage it never applies a
// version older than the one applied (I1), also across restarts thanks to
// the disk cache, which is also what a proxy started while etcd is down
// serves (I3); a pointer of another lineage is applied whatever its version
// (lineage.go). A snapshot that fails decoding,
// validation or Apply is rejected and the last good one stays (I5).
package configwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/etcdwatch"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
	"github.com/sluicelb/sluice/proxy/internal/diskcache"
)

// Defaults of Config.
const (
	DefaultStallTimeout = etcdwatch.DefaultStallTimeout
	DefaultOpTimeout    = etcdwatch.DefaultOpTimeout
	// DefaultStoreCheckInterval is how often the watch checks that etcd is
	// still the store it listed (see api/etcdwatch).
	DefaultStoreCheckInterval = etcdwatch.DefaultStoreCheckInterval
)

// Sources of an applied snapshot (Status.Source).
const (
	SourceEtcd      = "etcd"
	SourceDiskCache = "disk-cache"
)

// Watch restart reasons (Status.WatchRestarts keys and the metric label).
const (
	ReasonCompacted  = string(etcdwatch.ReasonCompacted)  // the watch revision was compacted away
	ReasonClosed     = string(etcdwatch.ReasonClosed)     // the watch channel closed without an error
	ReasonWatchError = string(etcdwatch.ReasonWatchError) // the watch failed (no leader, canceled, ...)
	ReasonStall      = string(etcdwatch.ReasonStall)      // nothing arrived for StallTimeout
	ReasonSyncError  = string(etcdwatch.ReasonSyncError)  // listing the pointer or fetching a snapshot failed
	// ReasonStoreReplaced: etcd behind the endpoints is another store than
	// the one listed (wiped, replaced, restored from a backup).
	ReasonStoreReplaced = string(etcdwatch.ReasonStoreReplaced)
)

// Config configures a Watcher. Client, ProxyCluster and Apply are required.
type Config struct {
	Client       *clientv3.Client
	Layout       keys.Layout
	ProxyCluster string
	// ID is the proxy's id: a staged rollout's pointer selects proxies by
	// it (snapshot.Pointer.For).
	ID string
	// Apply builds and atomically swaps in a checked snapshot; an error
	// means it was rejected and nothing changed (I5). It is called from
	// Run's goroutine only, never concurrently.
	Apply func(validate.Checked) error
	// Cache persists the last good snapshot; nil means no disk cache.
	Cache *diskcache.Cache
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now defaults to time.Now.
	Now func() time.Time
	// StallTimeout: with no event and no progress notification for this
	// long, the watch is restarted. Default 30s. Progress notifications are
	// requested on the watch and also asked for every StallTimeout/3 with
	// RequestProgress, since etcd's own interval may be much longer.
	StallTimeout time.Duration
	// OpTimeout bounds each etcd request (list, manifest, part). Default 5s.
	OpTimeout time.Duration
	// StoreCheckInterval: how often the watch checks that etcd is still the
	// store it listed, so a wiped or restored etcd is noticed (default 3s;
	// one count-only read of the pointer key each time).
	StoreCheckInterval time.Duration
	// Metrics, when set, receives: watch restarts by reason, applies by
	// result, apply duration, staleness seconds and the applied version.
	Metrics prometheus.Registerer
	// Rand seeds the backoff jitter; nil means a random seed.
	Rand *rand.Rand
	// OnChange, when set, is called from Run's goroutine after every apply,
	// every rejection and every change of the etcd connection state (e.g.
	// statusreport.Reporter.Notify, so that a status key never says
	// "not connected" for a report interval after the connection came back).
	// It must not block.
	OnChange func()
}

// Watcher follows one proxy cluster's pointer. Status is safe for concurrent
// use; Run must be called once.
type Watcher struct {
	cfg        Config
	currentKey string
	lineageKey string
	log        *slog.Logger
	m          *metrics
	rnd        *rand.Rand
	running    atomic.Bool
	partsRead  atomic.Uint64
	// Status.SnapshotReads and ManifestsPushed.
	snapshotReads   atomic.Uint64
	manifestsPushed atomic.Uint64

	// held is what the watcher keeps of the applied snapshot (Run's
	// goroutine only): a fetch reads from etcd only the parts not here.
	held heldParts

	mu       sync.Mutex
	st       Status
	rejected snapshot.Pointer // identity of the last rejected snapshot
	aheadLog snapshot.Pointer // last older pointer logged (log once each)
}

// New checks cfg, fills defaults and registers the metrics.
func New(cfg Config) (*Watcher, error) {
	if cfg.Client == nil {
		return nil, errors.New("configwatch: Client is nil")
	}
	if cfg.Apply == nil {
		return nil, errors.New("configwatch: Apply is nil")
	}
	if cfg.Layout.Prefix() == "" {
		cfg.Layout = keys.MustNew(keys.DefaultPrefix)
	}
	key, err := cfg.Layout.Current(cfg.ProxyCluster)
	if err != nil {
		return nil, fmt.Errorf("configwatch: proxy cluster: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = DefaultStallTimeout
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = DefaultOpTimeout
	}
	if cfg.StoreCheckInterval <= 0 {
		cfg.StoreCheckInterval = DefaultStoreCheckInterval
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	w := &Watcher{
		cfg:        cfg,
		currentKey: key,
		lineageKey: cfg.Layout.Lineage(),
		log:        cfg.Logger.With("component", "configwatch"), // the caller's logger names the proxy
		rnd:        cfg.Rand,
		st:         Status{WatchRestarts: map[string]uint64{}},
	}
	m, err := newMetrics(cfg.Metrics, w)
	if err != nil {
		return nil, fmt.Errorf("configwatch: %w", err)
	}
	w.m = m
	return w, nil
}

// Run applies the cached snapshot (if nothing is applied yet), then lists and
// watches etcd until ctx is done; it returns nil then. It never gives up on
// etcd errors: it resyncs with a jittered exponential backoff (api/etcdwatch
// holds the list-then-watch rules; this package what a pointer means).
func (w *Watcher) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("configwatch: Run is already running")
	}
	defer w.running.Store(false)
	w.applyCache()
	return etcdwatch.Run(ctx, etcdwatch.Config{
		Client: w.cfg.Client, Key: w.currentKey, LineageKey: w.lineageKey,
		StallTimeout: w.cfg.StallTimeout, OpTimeout: w.cfg.OpTimeout, StoreCheckInterval: w.cfg.StoreCheckInterval,
		Logger: w.log, Rand: w.rnd,
		OnRestart: func(reason etcdwatch.Reason, _ bool, _ error) {
			w.setDisconnected()
			w.countRestart(string(reason))
		},
		OnBehind: w.countBehind,
		// The store's pointers carry its lineage.
		Lineage: func() string { return w.Status().PointerLineage },
	}, &pointerSink{ctx: ctx, w: w})
}

// pointerSink hands the watched pointer to the watcher.
type pointerSink struct {
	ctx context.Context // Run's: bounds the snapshot fetches
	w   *Watcher
}

func (s *pointerSink) Reset(kvs []*mvccpb.KeyValue, _ int64) error {
	s.w.setSynced()
	if len(kvs) == 0 {
		s.w.log.Info("no snapshot published yet", "key", s.w.currentKey)
		s.w.notePointerGone()
		return nil
	}
	return s.w.handlePointer(s.ctx, kvs[0].Value)
}

func (s *pointerSink) Apply(evs []*clientv3.Event, _ int64) error {
	s.w.setSynced()
	// Events of one response are in revision order: only the newest
	// pointer matters.
	ev := evs[len(evs)-1]
	if ev.Type == clientv3.EventTypeDelete {
		s.w.log.Error("snapshot pointer deleted; keeping the last good snapshot", "key", s.w.currentKey)
		s.w.notePointerGone()
		return nil
	}
	return s.w.handlePointer(s.ctx, ev.Kv.Value)
}

func (s *pointerSink) Heard(int64) { s.w.setSynced() }

func (w *Watcher) applyCache() {
	c := w.cfg.Cache
	if c == nil {
		return
	}
	if w.Status().AppliedVersion != 0 {
		return
	}
	checked, err := c.Load()
	switch {
	case diskcache.IsNotExist(err):
		w.log.Info("no cached snapshot on disk", "path", c.Path())
		return
	case err != nil:
		w.m.Applies.WithLabelValues("cache_corrupt").Inc()
		w.log.Error("cached snapshot unusable; waiting for etcd", "err", err)
		return
	}
	if err := w.apply(checked, SourceDiskCache); err != nil {
		w.log.Error("cached snapshot rejected by apply", "version", checked.Snapshot().Meta.Version, "err", err)
		return
	}
	// The cache holds a whole snapshot: its parts in the split layout are
	// what etcd holds for it, so the first fetch reads only what changed.
	if s := checked.Snapshot(); len(s.Clusters) >= snapshot.SplitMinClusters {
		w.held = heldParts{parts: snapshot.PartsOf(s)}
	}
}

// etcdError marks a failure to talk to etcd (retry later), as opposed to
// bad content (reject).
type etcdError struct{ err error }

func (e etcdError) Error() string { return e.err.Error() }
func (e etcdError) Unwrap() error { return e.err }

// errSuperseded: the pointer moved on before its snapshot could be read.
var errSuperseded = errors.New("pointer superseded")

// handlePointer applies the snapshot a pointer value names if it
// supersedes the applied one (see judge). It returns only etcd errors; bad
// content is rejected.
func (w *Watcher) handlePointer(ctx context.Context, raw []byte) error {
	var p snapshot.Pointer
	if err := codec.UnmarshalJSON(raw, &p); err != nil {
		w.reject(snapshot.Pointer{}, fmt.Sprintf("pointer %s: %v", w.currentKey, err))
		return nil
	}
	if err := snapshot.ValidLineage(p.Lineage); err != nil {
		w.reject(p.For(""), fmt.Sprintf("pointer %s: %v", w.currentKey, err))
		return nil
	}
	if err := p.CheckCandidate(); err != nil {
		w.reject(p.For(""), fmt.Sprintf("pointer %s: %v", w.currentKey, err))
		return nil
	}
	w.noteStage(p)
	push := p.Push
	p = p.For(w.cfg.ID) // the snapshot this proxy runs
	switch w.notePointer(p) {
	case verdictOlder:
		return nil
	case verdictUnchanged:
		w.m.Applies.WithLabelValues("unchanged").Inc()
		return nil
	case verdictHashConflict:
		w.reject(p, fmt.Sprintf("version %d of lineage %s is already applied with hash %s; pointer says hash %s",
			p.Version, snapshot.LineageName(p.Lineage), w.Status().AppliedHash, p.Hash))
		return nil
	case verdictRejected:
		return nil
	}
	s, held, err := w.fetch(ctx, p, push)
	var ee etcdError
	switch {
	case errors.Is(err, errSuperseded):
		w.log.Info("pointer moved on before its snapshot was read", "version", p.Version)
		return nil
	case errors.As(err, &ee):
		return ee
	case err != nil:
		w.reject(p, err.Error())
		return nil
	}
	if err := w.apply(s, SourceEtcd); err != nil {
		return nil // rejected and logged by apply
	}
	w.held = held
	return nil
}

// apply hands a decoded, checked snapshot to Apply and records the outcome.
func (w *Watcher) apply(checked validate.Checked, source string) error {
	s := checked.Snapshot()
	if s.Meta.ProxyCluster != w.cfg.ProxyCluster {
		err := fmt.Errorf("snapshot is for proxy cluster %q, not %q", s.Meta.ProxyCluster, w.cfg.ProxyCluster)
		w.reject(pointerOf(s), err.Error())
		return err
	}
	if cur := w.Status(); cur.AppliedVersion > 0 && s.Meta.Lineage == cur.AppliedLineage && s.Meta.Version < cur.AppliedVersion {
		// Cannot happen through handlePointer; kept as the last line of I1.
		return fmt.Errorf("snapshot %s is older than applied v%d", s.Meta.ID(), cur.AppliedVersion)
	}
	start := time.Now() // a duration metric: the real clock, not cfg.Now
	err := w.cfg.Apply(checked)
	w.m.ApplyDur.Observe(time.Since(start).Seconds())
	if err != nil {
		w.reject(pointerOf(s), fmt.Sprintf("apply: %v", err))
		return err
	}
	w.recordApplied(s, source)
	w.m.Applies.WithLabelValues("applied").Inc()
	w.m.Version.Set(float64(s.Meta.Version))
	w.log.Info("snapshot applied", "lineage", s.Meta.Lineage, "version", s.Meta.Version, "hash", s.Meta.Hash, "source", source)
	w.changed()
	if source == SourceEtcd && w.cfg.Cache != nil {
		if err := w.cfg.Cache.Save(s); err != nil {
			w.log.Error("saving snapshot to disk cache failed", "version", s.Meta.Version, "err", err)
		}
	}
	return nil
}

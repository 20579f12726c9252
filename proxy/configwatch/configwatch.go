// Package configwatch keeps a proxy's snapshot in step with etcd.
//
// It lists current/<proxyCluster>, fetches the manifest and parts the
// pointer names, decodes and validates the snapshot and hands it to Apply,
// then watches the pointer from the listed revision + 1. Any compaction,
// closed channel, watch error or stall (no event and no progress
// notification for StallTimeout) restarts that cycle after a jittered
// backoff. It never applies a version older than the one applied (I1), also
// across restarts thanks to the disk cache, which is also what a proxy
// started while etcd is down serves (I3). A snapshot that fails decoding,
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
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
	"github.com/sluicelb/sluice/proxy/diskcache"
)

// Defaults of Config.
const (
	DefaultStallTimeout = 30 * time.Second
	DefaultOpTimeout    = 5 * time.Second
	minBackoff          = 100 * time.Millisecond
	maxBackoff          = 5 * time.Second
)

// Sources of an applied snapshot (Status.Source).
const (
	SourceEtcd      = "etcd"
	SourceDiskCache = "disk-cache"
)

// Watch restart reasons (Status.WatchRestarts keys and the metric label).
const (
	ReasonCompacted  = "compacted"   // the watch revision was compacted away
	ReasonClosed     = "closed"      // the watch channel closed without an error
	ReasonWatchError = "watch_error" // the watch failed (no leader, canceled, ...)
	ReasonStall      = "stall"       // nothing arrived for StallTimeout
	ReasonSyncError  = "sync_error"  // listing the pointer or fetching a snapshot failed
)

// Config configures a Watcher. Client, ProxyCluster and Apply are required.
type Config struct {
	Client       *clientv3.Client
	Layout       keys.Layout
	ProxyCluster string
	// Apply builds and atomically swaps in a snapshot that already passed
	// validate.Snapshot; an error means it was rejected and nothing changed
	// (I5). It is called from Run's goroutine only, never concurrently.
	Apply func(*snapshot.Snapshot) error
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

// Status is what the watcher has done so far.
type Status struct {
	AppliedVersion uint64
	AppliedHash    string
	AppliedAt      time.Time
	Source         string // SourceEtcd or SourceDiskCache
	// RejectedVersion is the newest version refused, with the reason.
	RejectedVersion uint64
	RejectedReason  string
	// LatestVersion is the newest pointer seen.
	LatestVersion uint64
	// Connected: the last etcd operation succeeded.
	Connected bool
	// LastSync is the last successful list, watch event or progress notification.
	LastSync time.Time
	// WatchRestarts counts restarts by reason.
	WatchRestarts map[string]uint64
}

// StaleSeconds is how long the applied configuration may lag etcd: 0 while
// connected, else the time since the last successful sync (or since the
// snapshot was applied, when etcd was never reached).
func (s Status) StaleSeconds(now time.Time) float64 {
	switch {
	case s.Connected:
		return 0
	case !s.LastSync.IsZero():
		return max(0, now.Sub(s.LastSync).Seconds())
	case !s.AppliedAt.IsZero():
		return max(0, now.Sub(s.AppliedAt).Seconds())
	}
	return 0
}

// Watcher follows one proxy cluster's pointer. Status is safe for concurrent
// use; Run must be called once.
type Watcher struct {
	cfg        Config
	currentKey string
	log        *slog.Logger
	m          *metrics
	rnd        *rand.Rand
	running    atomic.Bool

	mu           sync.Mutex
	st           Status
	rejectedHash string
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
	if cfg.Rand == nil {
		cfg.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	w := &Watcher{
		cfg:        cfg,
		currentKey: key,
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

// Status returns a copy of the current status.
func (w *Watcher) Status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.st
	s.WatchRestarts = make(map[string]uint64, len(w.st.WatchRestarts))
	for k, v := range w.st.WatchRestarts {
		s.WatchRestarts[k] = v
	}
	return s
}

// Run applies the cached snapshot (if nothing is applied yet), then lists and
// watches etcd until ctx is done; it returns nil then. It never gives up on
// etcd errors: it resyncs with a jittered exponential backoff.
func (w *Watcher) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("configwatch: Run is already running")
	}
	defer w.running.Store(false)
	w.applyCache()
	attempt := 0
	for {
		reason, synced := w.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		w.countRestart(reason)
		if synced {
			attempt = 0
		}
		d := backoff(attempt, w.rnd.Float64())
		attempt++
		w.log.Info("restarting snapshot watch", "reason", reason, "backoff", d)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// backoff is the wait before the attempt-th consecutive retry: exponential
// from minBackoff to maxBackoff, jittered into [d/2, d) by u in [0,1).
func backoff(attempt int, u float64) time.Duration {
	d := minBackoff
	for i := 0; i < attempt && d < maxBackoff; i++ {
		d *= 2
	}
	d = min(d, maxBackoff)
	return d/2 + time.Duration(u*float64(d/2))
}

func (w *Watcher) applyCache() {
	c := w.cfg.Cache
	if c == nil {
		return
	}
	if w.Status().AppliedVersion != 0 {
		return
	}
	s, err := c.Load()
	switch {
	case diskcache.IsNotExist(err):
		w.log.Info("no cached snapshot on disk", "path", c.Path())
		return
	case err != nil:
		w.m.applies.WithLabelValues("cache_corrupt").Inc()
		w.log.Error("cached snapshot unusable; waiting for etcd", "err", err)
		return
	}
	if err := w.apply(s, SourceDiskCache); err != nil {
		w.log.Error("cached snapshot rejected by apply", "version", s.Meta.Version, "err", err)
	}
}

// session lists the pointer, then watches it until something goes wrong. It
// returns the restart reason and whether it got as far as a successful list.
func (w *Watcher) session(ctx context.Context) (reason string, synced bool) {
	rev, err := w.list(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.setDisconnected()
			w.log.Warn("snapshot sync failed", "err", err)
		}
		return ReasonSyncError, false
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := w.cfg.Client.Watch(wctx, w.currentKey, clientv3.WithRev(rev+1), clientv3.WithProgressNotify())
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.requestProgress(wctx)
	}()
	stall := time.NewTimer(w.cfg.StallTimeout)
	defer stall.Stop()
	for {
		select {
		case <-ctx.Done():
			return "", true
		case <-stall.C:
			if w.idleButAlive(ctx, rev+1) {
				w.setSynced()
				stall.Reset(w.cfg.StallTimeout)
				continue
			}
			w.setDisconnected()
			w.log.Warn("snapshot watch stalled", "after", w.cfg.StallTimeout)
			return ReasonStall, true
		case resp, ok := <-wch:
			if !ok {
				if ctx.Err() != nil {
					return "", true
				}
				w.setDisconnected()
				return ReasonClosed, true
			}
			if err := resp.Err(); err != nil {
				if ctx.Err() != nil {
					return "", true
				}
				w.setDisconnected()
				if errors.Is(err, rpctypes.ErrCompacted) || resp.CompactRevision != 0 {
					w.log.Warn("snapshot watch compacted; resyncing", "compact_revision", resp.CompactRevision)
					return ReasonCompacted, true
				}
				w.log.Warn("snapshot watch failed", "err", err)
				return ReasonWatchError, true
			}
			w.setSynced()
			stall.Reset(w.cfg.StallTimeout)
			if len(resp.Events) == 0 {
				continue // progress notification
			}
			// Events of one response are in revision order: only the newest
			// pointer matters.
			ev := resp.Events[len(resp.Events)-1]
			if ev.Type == clientv3.EventTypeDelete {
				w.log.Error("snapshot pointer deleted; keeping the last good snapshot", "key", w.currentKey)
				continue
			}
			if err := w.handlePointer(ctx, ev.Kv.Value); err != nil {
				if ctx.Err() != nil {
					return "", true
				}
				w.setDisconnected()
				w.log.Warn("snapshot fetch failed", "err", err)
				return ReasonSyncError, true
			}
		}
	}
}

// requestProgress asks etcd for a progress notification on the watch
// stream of wctx every StallTimeout/3 until wctx is done: a healthy but idle
// watch then proves itself alive well within StallTimeout, whatever etcd's
// own progress-notify interval is. It runs apart from the event loop because
// a request on a stalled stream blocks.
func (w *Watcher) requestProgress(wctx context.Context) {
	every := w.cfg.StallTimeout / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-wctx.Done():
			return
		case <-t.C:
			pctx, cancel := context.WithTimeout(wctx, every)
			if err := w.cfg.Client.RequestProgress(pctx); err != nil && wctx.Err() == nil {
				w.log.Debug("progress request failed", "err", err)
			}
			cancel()
		}
	}
}

// idleButAlive tells an idle etcd from a stalled watch. etcd answers a
// progress request only once the store revision has reached the watch's
// start revision, so a watch from rev+1 on a store nobody has written to
// since gets no progress notifications at all. When a fresh read shows that
// the store is still below startRev, nothing can have been missed and etcd
// is reachable: the watch is idle, not stalled.
func (w *Watcher) idleButAlive(ctx context.Context, startRev int64) bool {
	octx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
	defer cancel()
	resp, err := w.cfg.Client.Get(octx, w.currentKey, clientv3.WithCountOnly())
	return err == nil && resp.Header.Revision < startRev
}

// list reads the pointer, handles it and returns the revision to watch after.
func (w *Watcher) list(ctx context.Context) (int64, error) {
	octx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
	resp, err := w.cfg.Client.Get(octx, w.currentKey)
	cancel()
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", w.currentKey, err)
	}
	w.setSynced()
	if len(resp.Kvs) == 0 {
		w.log.Info("no snapshot published yet", "key", w.currentKey)
		return resp.Header.Revision, nil
	}
	if err := w.handlePointer(ctx, resp.Kvs[0].Value); err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// etcdError marks a failure to talk to etcd (retry later), as opposed to
// bad content (reject).
type etcdError struct{ err error }

func (e etcdError) Error() string { return e.err.Error() }
func (e etcdError) Unwrap() error { return e.err }

// errSuperseded: the pointer moved on before its snapshot could be read.
var errSuperseded = errors.New("pointer superseded")

// handlePointer applies the snapshot a pointer value names, if it is newer
// than the applied one. It returns only etcd errors; bad content is rejected.
func (w *Watcher) handlePointer(ctx context.Context, raw []byte) error {
	var p snapshot.Pointer
	if err := codec.UnmarshalJSON(raw, &p); err != nil {
		w.reject(0, "", fmt.Sprintf("pointer %s: %v", w.currentKey, err))
		return nil
	}
	w.mu.Lock()
	w.st.LatestVersion = max(w.st.LatestVersion, p.Version)
	applied, appliedHash := w.st.AppliedVersion, w.st.AppliedHash
	alreadyRejected := p.Version == w.st.RejectedVersion && p.Hash == w.rejectedHash
	w.mu.Unlock()
	switch {
	case p.Version < applied:
		w.m.applies.WithLabelValues("older").Inc()
		w.log.Warn("pointer names an older snapshot than the applied one; ignored",
			"pointer_version", p.Version, "applied_version", applied)
		return nil
	case p.Version == applied && p.Hash == appliedHash:
		w.m.applies.WithLabelValues("unchanged").Inc()
		return nil
	case p.Version == applied:
		w.reject(p.Version, p.Hash, fmt.Sprintf("version %d is already applied with hash %s; pointer says hash %s", p.Version, appliedHash, p.Hash))
		return nil
	case alreadyRejected:
		return nil
	}
	s, err := w.fetch(ctx, p)
	var ee etcdError
	switch {
	case errors.Is(err, errSuperseded):
		w.log.Info("pointer moved on before its snapshot was read", "version", p.Version)
		return nil
	case errors.As(err, &ee):
		return ee
	case err != nil:
		w.reject(p.Version, p.Hash, err.Error())
		return nil
	}
	if err := w.apply(s, SourceEtcd); err != nil {
		return nil // rejected and logged by apply
	}
	return nil
}

// fetch reads, decodes and validates the snapshot p points to.
func (w *Watcher) fetch(ctx context.Context, p snapshot.Pointer) (*snapshot.Snapshot, error) {
	mkey, err := w.cfg.Layout.Snapshot(w.cfg.ProxyCluster, p.Version)
	if err != nil {
		return nil, err
	}
	raw, found, err := w.get(ctx, mkey)
	if err != nil {
		return nil, err
	}
	if !found {
		// History trimming may remove the manifest of a pointer we only see
		// late (watch replay); skip it if the pointer has moved on.
		if cur, found, err := w.get(ctx, w.currentKey); err != nil {
			return nil, err
		} else if found {
			var now snapshot.Pointer
			if codec.UnmarshalJSON(cur, &now) == nil && now != p {
				return nil, errSuperseded
			}
		}
		return nil, fmt.Errorf("manifest %s is missing", mkey)
	}
	var m snapshot.Manifest
	if err := codec.UnmarshalJSON(raw, &m); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", mkey, err)
	}
	if m.Meta.ProxyCluster != w.cfg.ProxyCluster || m.Meta.Version != p.Version || m.Meta.Hash != p.Hash {
		return nil, fmt.Errorf("manifest %s is %s v%d hash %s; pointer says %s v%d hash %s", mkey,
			m.Meta.ProxyCluster, m.Meta.Version, m.Meta.Hash, w.cfg.ProxyCluster, p.Version, p.Hash)
	}
	s, err := snapshot.Decode(m, func(digest string) ([]byte, error) {
		pkey, err := w.cfg.Layout.Part(digest)
		if err != nil {
			return nil, err
		}
		b, found, err := w.get(ctx, pkey)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("%s: %w", pkey, snapshot.ErrMissingPart)
		}
		return b, nil
	})
	var ee etcdError
	if errors.As(err, &ee) {
		return nil, ee
	}
	if err != nil {
		return nil, err
	}
	if err := validate.Snapshot(s); err != nil {
		return nil, fmt.Errorf("invalid snapshot: %w", err)
	}
	return s, nil
}

func (w *Watcher) get(ctx context.Context, key string) ([]byte, bool, error) {
	octx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
	defer cancel()
	resp, err := w.cfg.Client.Get(octx, key)
	if err != nil {
		return nil, false, etcdError{fmt.Errorf("get %s: %w", key, err)}
	}
	if len(resp.Kvs) == 0 {
		return nil, false, nil
	}
	return resp.Kvs[0].Value, true, nil
}

// apply hands a decoded, validated snapshot to Apply and records the outcome.
func (w *Watcher) apply(s *snapshot.Snapshot, source string) error {
	if s.Meta.ProxyCluster != w.cfg.ProxyCluster {
		err := fmt.Errorf("snapshot is for proxy cluster %q, not %q", s.Meta.ProxyCluster, w.cfg.ProxyCluster)
		w.reject(s.Meta.Version, s.Meta.Hash, err.Error())
		return err
	}
	if cur := w.Status().AppliedVersion; s.Meta.Version < cur {
		// Cannot happen through handlePointer; kept as the last line of I1.
		return fmt.Errorf("snapshot v%d is older than applied v%d", s.Meta.Version, cur)
	}
	start := w.cfg.Now()
	err := w.cfg.Apply(s)
	w.m.applyDur.Observe(w.cfg.Now().Sub(start).Seconds())
	if err != nil {
		w.reject(s.Meta.Version, s.Meta.Hash, fmt.Sprintf("apply: %v", err))
		return err
	}
	w.mu.Lock()
	w.st.AppliedVersion, w.st.AppliedHash = s.Meta.Version, s.Meta.Hash
	w.st.AppliedAt, w.st.Source = w.cfg.Now(), source
	w.st.LatestVersion = max(w.st.LatestVersion, s.Meta.Version)
	if w.st.RejectedVersion <= s.Meta.Version {
		w.st.RejectedVersion, w.st.RejectedReason, w.rejectedHash = 0, "", ""
	}
	w.mu.Unlock()
	w.m.applies.WithLabelValues("applied").Inc()
	w.m.version.Set(float64(s.Meta.Version))
	w.log.Info("snapshot applied", "version", s.Meta.Version, "hash", s.Meta.Hash, "source", source)
	w.changed()
	if source == SourceEtcd && w.cfg.Cache != nil {
		if err := w.cfg.Cache.Save(s); err != nil {
			w.log.Error("saving snapshot to disk cache failed", "version", s.Meta.Version, "err", err)
		}
	}
	return nil
}

func (w *Watcher) reject(version uint64, hash, reason string) {
	w.mu.Lock()
	w.st.RejectedVersion, w.st.RejectedReason, w.rejectedHash = version, reason, hash
	w.mu.Unlock()
	w.m.applies.WithLabelValues("rejected").Inc()
	w.log.Error("snapshot rejected; keeping the last good one", "version", version, "reason", reason)
	w.changed()
}

func (w *Watcher) changed() {
	if w.cfg.OnChange != nil {
		w.cfg.OnChange()
	}
}

func (w *Watcher) setSynced() {
	w.mu.Lock()
	flipped := !w.st.Connected
	w.st.Connected, w.st.LastSync = true, w.cfg.Now()
	w.mu.Unlock()
	if flipped {
		w.changed()
	}
}

func (w *Watcher) setDisconnected() {
	w.mu.Lock()
	flipped := w.st.Connected
	w.st.Connected = false
	w.mu.Unlock()
	if flipped {
		w.changed()
	}
}

func (w *Watcher) countRestart(reason string) {
	w.mu.Lock()
	w.st.WatchRestarts[reason]++
	w.mu.Unlock()
	w.m.restarts.WithLabelValues(reason).Inc()
}

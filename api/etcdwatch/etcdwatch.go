// Package etcdwatch is Sluice's one list-then-watch loop over an etcd key or
// prefix, with its resync rules:
//
//   - list (one read at revision R), hand the listing to the sink, then
//     watch from R+1: never from a later revision, so nothing is skipped;
//   - list again after a compaction, a closed channel, a watch error, a
//     stall, or a store that is no longer the one listed — with a jittered
//     exponential backoff (api/backoff) between rounds;
//   - a stall is no response (event or progress notification) for
//     StallTimeout. Progress notifications are requested every
//     StallTimeout/3 from a goroutine of their own: a request on a stalled
//     stream blocks, and must not block the loop that detects the stall;
//   - a watch that is silent because nothing was written since the listing
//     (etcd does not answer progress requests for a start revision still in
//     the future) is told from a stuck one by a fresh read: a store revision
//     not above the last one heard means nothing was missed;
//   - a wiped, replaced or restored etcd behind the same endpoints is
//     noticed by another cluster id, a revision going backwards, or (with
//     LineageKey) the lineage record gone or changed: checked on every
//     response and every StoreCheckInterval by a read of its own, since a
//     watch resumed on a fresh store may wait quietly forever. A revision
//     going backwards is only a suspicion until a linearizable read
//     confirms it (judge.go): a member catching up answers with an older
//     revision than the quorum, and that is not another store.
//
// Used by the proxy's snapshot watch (proxy/internal/configwatch), the scheduler's
// inventory and its dashboard.
package etcdwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/backoff"
	"github.com/sluicelb/sluice/api/etcdclient"
)

// Reason is why a round ended and the key or prefix is listed again.
type Reason string

// Restart reasons (also metric label values in configwatch and inventory).
const (
	ReasonCompacted  Reason = "compacted"   // the watch revision was compacted away
	ReasonClosed     Reason = "closed"      // the watch channel closed without an error
	ReasonWatchError Reason = "watch_error" // the watch failed (no leader, canceled, ...)
	ReasonStall      Reason = "stall"       // nothing arrived for StallTimeout
	ReasonSyncError  Reason = "sync_error"  // the listing or the sink's work on it failed
	// ReasonStoreReplaced: etcd behind the endpoints is another store than
	// the one listed (wiped, replaced, restored from a backup).
	ReasonStoreReplaced Reason = "store_replaced"
	// ReasonLaggingMember is not a restart: a response's revision went back,
	// and a quorum read showed the same store (a member catching up, or a
	// response queued before a newer read). The watch goes on; Config.OnBehind
	// counts it.
	ReasonLaggingMember Reason = "lagging_member"
)

// Defaults of Config.
const (
	DefaultStallTimeout       = 30 * time.Second
	DefaultOpTimeout          = 5 * time.Second
	DefaultStoreCheckInterval = 3 * time.Second
)

// Sink receives the watched content, always from Run's goroutine and in
// revision order. An error from Reset or Apply means etcd could not be used
// (the sink's own follow-up reads failed): the round ends with
// ReasonSyncError and everything is listed again. Bad content is the sink's
// business, not an error here.
type Sink interface {
	// Reset is a full listing at rev: whatever it lacks was deleted.
	Reset(kvs []*mvccpb.KeyValue, rev int64) error
	// Apply is one watch response's events, at rev.
	Apply(evs []*clientv3.Event, rev int64) error
	// Heard: the watch is confirmed alive at rev (progress notification,
	// or an idle store checked by a read).
	Heard(rev int64)
}

// Config configures Run. Client and Key are required.
type Config struct {
	Client *clientv3.Client
	// Key is the watched key, or the prefix with Prefix.
	Key    string
	Prefix bool
	// LineageKey, when set, is the store's lineage record (api/keys
	// Layout.Lineage): listed with Key in one read and checked every
	// StoreCheckInterval, so a store wiped and refilled past the listed
	// revision is still noticed.
	LineageKey string
	// StallTimeout: no response for this long ends the round. Default 30s.
	StallTimeout time.Duration
	// OpTimeout bounds each read (listing, checks). Default 5s.
	OpTimeout time.Duration
	// StoreCheckInterval: how often the store identity is read. Default 3s.
	StoreCheckInterval time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Rand seeds the backoff jitter; nil means a random seed.
	Rand *rand.Rand
	// OnRestart, when set, is called from Run's goroutine after a round
	// ended (not when ctx is done), before the backoff, with whether the
	// round got as far as a listing the sink accepted.
	OnRestart func(reason Reason, listed bool, err error)
	// OnBehind, when set, is called from Run's goroutine for every watch
	// response whose revision went back while a quorum read showed the same
	// store (ReasonLaggingMember): the watch goes on.
	OnBehind func()
	// Lineage, when set, is asked after every Apply for the lineage the
	// watched content names ("" none): a store listed before its lineage
	// was minted learns it that way too, not only from the next check.
	Lineage func() string
}

func (c *Config) fill() error {
	if c.Client == nil {
		return errors.New("etcdwatch: Client is nil")
	}
	if c.Key == "" {
		return errors.New("etcdwatch: Key is empty")
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = DefaultStallTimeout
	}
	if c.OpTimeout <= 0 {
		c.OpTimeout = DefaultOpTimeout
	}
	if c.StoreCheckInterval <= 0 {
		c.StoreCheckInterval = DefaultStoreCheckInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Run lists and watches until ctx is done, then returns nil. It never gives
// up on etcd errors; it returns an error only for an unusable Config.
func Run(ctx context.Context, cfg Config, s Sink) error {
	if err := cfg.fill(); err != nil {
		return err
	}
	bo := backoff.Policy{Rand: cfg.Rand}
	for ctx.Err() == nil {
		reason, listed, err := round(ctx, &cfg, s)
		if ctx.Err() != nil {
			return nil
		}
		if listed {
			bo.Reset() // the round worked for a while: back off from scratch
		}
		if cfg.OnRestart != nil {
			cfg.OnRestart(reason, listed, err)
		}
		d := bo.Next()
		cfg.Logger.Warn("watch resync", "key", cfg.Key, "reason", string(reason), "err", err, "backoff", d)
		if !backoff.Sleep(ctx, d) {
			return nil
		}
	}
	return nil
}

func (c *Config) opts() []clientv3.OpOption {
	if c.Prefix {
		return []clientv3.OpOption{clientv3.WithPrefix()}
	}
	return nil
}

// list reads Key (and LineageKey) at one revision.
func list(ctx context.Context, c *Config) (kvs []*mvccpb.KeyValue, id *store, err error) {
	octx, cancel := context.WithTimeout(ctx, c.OpTimeout)
	defer cancel()
	if c.LineageKey == "" {
		r, err := c.Client.Get(octx, c.Key, c.opts()...)
		if err != nil {
			return nil, nil, fmt.Errorf("list %s: %w", c.Key, err)
		}
		return r.Kvs, newStore(r.Header.ClusterId, r.Header.Revision, ""), nil
	}
	r, err := c.Client.Txn(octx).Then(clientv3.OpGet(c.Key, c.opts()...), clientv3.OpGet(c.LineageKey)).Commit()
	if err != nil {
		return nil, nil, fmt.Errorf("list %s: %w", c.Key, err)
	}
	return r.Responses[0].GetResponseRange().Kvs,
		newStore(r.Header.ClusterId, r.Header.Revision, LineageOf(r.Responses[1].GetResponseRange().Kvs)), nil
}

// round is one list-then-watch: why it ended, and whether the listing got
// to the sink and was accepted.
func round(ctx context.Context, c *Config, s Sink) (Reason, bool, error) {
	kvs, id, err := list(ctx, c)
	if err != nil {
		return ReasonSyncError, false, err
	}
	rev := id.seen.Load()
	if err := s.Reset(kvs, rev); err != nil {
		return ReasonSyncError, false, err
	}
	heard := rev // the newest revision the watch is known to be complete up to

	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wch := c.Client.Watch(wctx, c.Key, append(c.opts(), clientv3.WithRev(rev+1), clientv3.WithProgressNotify())...)
	gone := make(chan error, 1)
	wg.Add(2)
	go func() {
		defer wg.Done()
		requestProgress(wctx, c)
	}()
	go func() {
		defer wg.Done()
		if err := checkStore(wctx, c, id, c.readIdentity); err != nil {
			gone <- err
		}
	}()
	stall := time.NewTimer(c.StallTimeout)
	defer stall.Stop()
	for {
		select {
		case <-ctx.Done():
			return "", true, ctx.Err()
		case err := <-gone:
			if errors.Is(err, errAccessLost) {
				return ReasonSyncError, true, err
			}
			return ReasonStoreReplaced, true, err
		case <-stall.C:
			if idle(ctx, c, heard) {
				s.Heard(heard)
				stall.Reset(c.StallTimeout)
				continue
			}
			return ReasonStall, true, fmt.Errorf("watch %s: no event or progress notification for %v", c.Key, c.StallTimeout)
		case wr, ok := <-wch:
			if !ok {
				return ReasonClosed, true, fmt.Errorf("watch %s: channel closed", c.Key)
			}
			if wr.CompactRevision != 0 {
				return ReasonCompacted, true, fmt.Errorf("watch %s: compacted at %d", c.Key, wr.CompactRevision)
			}
			if err := wr.Err(); err != nil {
				if errors.Is(err, rpctypes.ErrCompacted) {
					return ReasonCompacted, true, fmt.Errorf("watch %s: %w", c.Key, err)
				}
				return ReasonWatchError, true, fmt.Errorf("watch %s: %w", c.Key, err)
			}
			switch j, err := id.judge(ctx, wr.Header.ClusterId, wr.Header.Revision, time.Now(), c.StoreCheckInterval, c.LineageKey != "", c.readIdentity); j {
			case replaced:
				return ReasonStoreReplaced, true, err
			case unconfirmed: // the response may be another store's: apply nothing, list again
				return ReasonSyncError, true, err
			case behind, stillBehind:
				if j == behind {
					c.Logger.Info("etcd answered from behind the revision seen; the watch goes on", "key", c.Key, "err", err)
				}
				if c.OnBehind != nil {
					c.OnBehind()
				}
			}
			id.raise(wr.Header.Revision)
			heard = max(heard, wr.Header.Revision)
			stall.Reset(c.StallTimeout)
			if len(wr.Events) == 0 {
				s.Heard(wr.Header.Revision)
				continue
			}
			if err := s.Apply(wr.Events, wr.Header.Revision); err != nil {
				return ReasonSyncError, true, err
			}
			if c.Lineage != nil {
				id.learnLineage(c.Lineage())
			}
		}
	}
}

// requestProgress asks etcd for a progress notification on the watch
// stream of wctx every StallTimeout/3 until wctx is done: a healthy but idle
// watch then proves itself alive well within StallTimeout, whatever etcd's
// own progress-notify interval is. It runs apart from the event loop because
// a request on a stalled stream blocks.
func requestProgress(wctx context.Context, c *Config) {
	every := c.StallTimeout / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-wctx.Done():
			return
		case <-t.C:
			pctx, cancel := context.WithTimeout(wctx, every)
			if err := c.Client.RequestProgress(pctx); err != nil && wctx.Err() == nil {
				c.Logger.Debug("progress request failed", "key", c.Key, "err", err)
			}
			cancel()
		}
	}
}

// idle tells an idle store from a stalled watch. etcd answers a progress
// request only once the store revision has reached the watch's start
// revision, so a watch on a store nobody has written to since gets no
// progress notifications at all. When a fresh read shows the store revision
// is not above the last revision heard, nothing can have been missed and etcd
// is reachable: the watch is idle, not stalled.
func idle(ctx context.Context, c *Config, heard int64) bool {
	octx, cancel := context.WithTimeout(ctx, c.OpTimeout)
	defer cancel()
	r, err := c.Client.Get(octx, c.Key, clientv3.WithCountOnly())
	return err == nil && r.Header.Revision <= heard
}

// errAccessLost marks a store check that etcd refused for permission: the
// watch is listed again (ReasonSyncError), not judged another store.
var errAccessLost = errors.New("read permission lost")

// checkStore reads the store identity with read (Config.readIdentity)
// every StoreCheckInterval until ctx is done; it returns the reason when
// etcd is no longer the store listed. Its read is linearizable, so it is
// its own confirmation — against the revision seen before it began
// (quorumSays): the watch loop raises the revision seen meanwhile.
func checkStore(ctx context.Context, c *Config, id *store, read confirmer) error {
	t := time.NewTicker(c.StoreCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		seen := id.seen.Load()
		r, err := read(ctx)
		if etcdclient.ClassOf(err) == etcdclient.ClassPermission {
			// etcd checks a watch's permission only when the watch is
			// made: an open one goes on delivering after the user's read
			// was revoked. The watch is made again, which etcd refuses.
			return fmt.Errorf("store check %s: %w: %w", c.Key, errAccessLost, err)
		}
		if err != nil {
			continue // unreachable: the watch's own error handling applies
		}
		if back, err := id.quorumSays(r, seen, c.LineageKey != ""); back {
			return fmt.Errorf("etcd revision %d was seen, and a quorum read begun after it answered %d: another store (wiped, replaced or restored)", seen, r.rev)
		} else if err != nil {
			return err
		}
	}
}

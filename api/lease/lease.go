// Package lease keeps a process's presence keys bound to an etcd lease for
// as long as the process lives: one concurrency.Session at a time, a new one
// (and a new lease) when the session's Done fires or a write finds the lease
// gone, the holder's keys written again under each new lease, and the lease
// revoked when the keeper stops, so the keys vanish at once — unless the
// keeper was told to abandon it, as a crashed process would.
//
// It is the one lease keeper of Sluice: agent registrations
// (agent/internal/register) and the proxy's status and demand reports
// (proxy/internal/statusreport) both hold their keys through it.
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/sluicelb/sluice/api/backoff"
)

// ErrLost is what a Hold returns (wrapped or not) when it finds its lease
// gone, for example a put answered "lease not found": the keeper drops the
// session and grants a new lease.
var ErrLost = errors.New("lease lost")

// IsLost reports whether err says the lease is gone: ErrLost, or etcd's
// "requested lease not found".
func IsLost(err error) bool {
	return errors.Is(err, ErrLost) || errors.Is(err, rpctypes.ErrLeaseNotFound)
}

// Hold is what a holder does with one lease: write its keys under id and
// keep them current until ctx is done — the session ended (lease expired,
// revoked, etcd unreachable past the TTL) or the keeper is stopping. It
// returns nil then, or an error IsLost recognises as soon as a write finds
// the lease gone. Any other error is logged and also ends the session.
type Hold func(ctx context.Context, id clientv3.LeaseID) error

// Hooks observe the keeper (for metrics); nil fields are skipped. They are
// called from Run's goroutine and must not block.
type Hooks struct {
	// Granted is called with each new lease, before Hold.
	Granted func(id clientv3.LeaseID)
	// Error is called for each failed lease operation: op is "grant",
	// "keepalive" or "revoke".
	Error func(op string, err error)
}

// Config configures a Keeper. Client is required.
type Config struct {
	Client *clientv3.Client
	// TTL of each lease, rounded up to whole seconds; at least 1s.
	TTL time.Duration
	// OpTimeout bounds one grant (default 5s); RevokeTimeout one revoke
	// (default the smaller of OpTimeout and 2s), which may hold up a stop
	// while etcd is away.
	OpTimeout, RevokeTimeout time.Duration
	// Backoff paces grant attempts after failures (zero value: the
	// api/backoff defaults). It is reset after each granted lease.
	Backoff backoff.Policy
	// Logger (default slog.Default()); Name tells this keeper's leases
	// apart in its logs ("registration", "status").
	Logger *slog.Logger
	Name   string
	Hooks  Hooks
}

// Keeper holds one lease at a time. Lease and Abandon are safe for
// concurrent use; Run is called once.
type Keeper struct {
	cfg     Config
	ttlSec  int
	log     *slog.Logger
	lease   atomic.Int64
	abandon atomic.Bool
	running atomic.Bool
}

// New checks cfg and fills its defaults.
func New(cfg Config) (*Keeper, error) {
	if cfg.Client == nil {
		return nil, errors.New("lease: etcd client is nil")
	}
	if cfg.TTL < time.Second {
		return nil, fmt.Errorf("lease: TTL %v is below etcd's 1s granularity", cfg.TTL)
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = 5 * time.Second
	}
	if cfg.RevokeTimeout <= 0 {
		// Short: a stop (SIGTERM) is honoured whatever etcd does.
		cfg.RevokeTimeout = min(cfg.OpTimeout, 2*time.Second)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Name == "" {
		cfg.Name = "lease"
	}
	return &Keeper{
		cfg:    cfg,
		ttlSec: int(math.Ceil(cfg.TTL.Seconds())),
		log:    cfg.Logger.With("lease_of", cfg.Name),
	}, nil
}

// Lease is the lease held now (0 while none).
func (k *Keeper) Lease() clientv3.LeaseID { return clientv3.LeaseID(k.lease.Load()) }

// Abandon makes Run return without revoking the lease: the keys stay until
// the TTL expires, as after a crash. For tests and chaos drills.
func (k *Keeper) Abandon() { k.abandon.Store(true) }

// Run holds a lease until ctx is done: it opens a session, calls hold with
// it, and when the session ends or hold reports the lease lost, revokes
// what may be left of the old lease and opens a new one (the first retry at
// once, then with backoff while grants fail). When ctx is done it revokes
// the lease (bounded by RevokeTimeout; skipped after Abandon) and returns nil.
func (k *Keeper) Run(ctx context.Context, hold Hold) error {
	if !k.running.CompareAndSwap(false, true) {
		return fmt.Errorf("lease: %s keeper is already running", k.cfg.Name)
	}
	defer k.running.Store(false)
	bo := k.cfg.Backoff
	for ctx.Err() == nil {
		s, err := k.open(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			backoff.Sleep(ctx, bo.Next())
			continue
		}
		bo.Reset()
		lost := k.hold(ctx, s, hold)
		k.close(ctx, s)
		if !lost && ctx.Err() == nil {
			// The holder failed or gave up with the lease alive: do not
			// spin on grants.
			backoff.Sleep(ctx, bo.Next())
		}
	}
	return nil
}

// open grants a lease (bounded by OpTimeout) and starts a session keeping
// it alive. Each session gets a lessor of its own: a lessor's keep-alive
// stream stays on the member it opened on, and a frozen member never fails
// it, so a lost lease's successor must not reuse it (a new lessor opens a
// new stream, on another member by the client's round robin).
func (k *Keeper) open(ctx context.Context) (*concurrency.Session, error) {
	lessor := clientv3.NewLease(k.cfg.Client)
	gctx, cancel := context.WithTimeout(ctx, k.cfg.OpTimeout)
	g, err := lessor.Grant(gctx, int64(k.ttlSec))
	cancel()
	if err != nil {
		lessor.Close()
		if ctx.Err() == nil {
			k.hookErr("grant", err)
			k.log.Warn("lease grant failed", "err", err)
		}
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	// The session's client carries only this lessor; closing it closes both.
	sc := clientv3.NewCtxClient(ctx)
	sc.Lease = lessor
	s, err := concurrency.NewSession(sc, concurrency.WithTTL(k.ttlSec), concurrency.WithLease(g.ID), concurrency.WithContext(ctx))
	if err != nil || s == nil {
		if err == nil {
			err = errors.New("keep-alive not started")
		}
		k.hookErr("keepalive", err)
		k.log.Warn("lease keepalive failed", "lease", int64(g.ID), "err", err)
		k.revoke(ctx, lessor, g.ID)
		sc.Close()
		return nil, fmt.Errorf("keep lease alive: %w", err)
	}
	k.lease.Store(int64(g.ID))
	if k.cfg.Hooks.Granted != nil {
		k.cfg.Hooks.Granted(g.ID)
	}
	k.log.Info("lease granted", "lease", int64(g.ID), "ttl_seconds", g.TTL)
	return s, nil
}

// hold runs the holder until the session ends, the holder reports the lease
// lost, or ctx is done. It reports whether the lease was lost (a new one is
// taken at once).
func (k *Keeper) hold(ctx context.Context, s *concurrency.Session, hold Hold) bool {
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.Done():
			cancel()
		case <-hctx.Done():
		}
	}()
	err := hold(hctx, s.Lease())
	switch {
	case ctx.Err() != nil:
		return false
	case err != nil && !IsLost(err):
		k.log.Warn("lease holder failed; taking a new lease", "lease", int64(s.Lease()), "err", err)
		return false
	case err != nil:
		k.log.Warn("lease lost; taking a new one", "lease", int64(s.Lease()), "err", err)
		return true
	}
	select {
	case <-s.Done():
		k.hookErr("keepalive", errors.New("keepalive channel closed"))
		k.log.Warn("lease keepalive ended (lease expired, revoked, or etcd unreachable past the TTL); taking a new one", "lease", int64(s.Lease()))
		return true
	default:
		k.log.Warn("lease holder returned with the lease alive; taking a new lease", "lease", int64(s.Lease()))
		return false
	}
}

// close ends a session: the keep-alive stops, and the lease is revoked — at
// a stop so the keys vanish now, after a loss because etcd may still hold
// the lease (a restarted etcd renews it) and no key may outlive the session.
func (k *Keeper) close(ctx context.Context, s *concurrency.Session) {
	s.Orphan()
	k.lease.Store(0)
	if ctx.Err() == nil || !k.abandon.Load() {
		k.revoke(ctx, s.Client().Lease, s.Lease())
	}
	s.Client().Close()
}

// revoke drops id, with its own deadline (ctx may be done already).
func (k *Keeper) revoke(ctx context.Context, lessor clientv3.Lease, id clientv3.LeaseID) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.cfg.RevokeTimeout)
	defer cancel()
	if _, err := lessor.Revoke(rctx, id); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return // gone already
		}
		k.hookErr("revoke", err)
		k.log.Warn("lease revoke failed; its keys expire after the TTL", "lease", int64(id), "err", err)
		return
	}
	if ctx.Err() != nil {
		k.log.Info("lease revoked", "lease", int64(id))
	}
}

func (k *Keeper) hookErr(op string, err error) {
	if k.cfg.Hooks.Error != nil {
		k.cfg.Hooks.Error(op, err)
	}
}

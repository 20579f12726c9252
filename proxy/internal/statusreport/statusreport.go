// Package statusreport writes a proxy's status and demand reports into etcd
// under a lease, so the scheduler and lbctl see what every live proxy applied
// and how much it sends to each cluster, and a dead proxy's keys vanish by
// themselves when its lease expires. A lease-less copy of the status (the
// last-seen record) outlives the lease, so lbctl shows a proxy that died as
// GONE instead of forgetting it; a proxy that stops cleanly deletes it.
package statusreport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/lease"
	"github.com/sluicelb/sluice/api/report"
)

// Defaults of Config.
const (
	DefaultInterval = 5 * time.Second
	DefaultTTL      = 15 * time.Second
	// revokeTimeout bounds a lease revoke, and the last-seen delete at
	// shutdown: one after the other, they bound a stop to 2 s whatever etcd
	// does (integration/shutdowntest). opTimeout bounds a grant or a write.
	revokeTimeout = 1 * time.Second
	opTimeout     = 5 * time.Second
)

// Config configures a Reporter. Client, ProxyCluster, ID, Status and Demand
// are required.
type Config struct {
	Client       *clientv3.Client
	Layout       keys.Layout
	ProxyCluster string
	ID           string
	// Status is called on each write; ProxyCluster and ID are filled in and
	// a zero UpdatedAt is set to Now(). It must be safe to call from Run's
	// goroutine while the proxy serves.
	Status func() report.ProxyStatus
	// Demand is called on each write, like Status.
	Demand func() report.Demand
	// Interval between writes. Default 5s. Notify writes sooner.
	Interval time.Duration
	// TTL of the lease the keys are bound to, in whole seconds. Default 15s.
	TTL time.Duration
	// Logger defaults to slog.Default(); Now to time.Now.
	Logger *slog.Logger
	Now    func() time.Time
}

// Reporter keeps the two keys alive. Notify is safe for concurrent use; Run
// is called once.
type Reporter struct {
	cfg                           Config
	statusKey, demandKey, seenKey string
	log                           *slog.Logger
	notify                        chan struct{}
	running                       atomic.Bool
	keeper                        atomic.Pointer[lease.Keeper] // set by Run
	writes                        atomic.Uint64
}

// New checks cfg and fills defaults.
func New(cfg Config) (*Reporter, error) {
	if cfg.Client == nil {
		return nil, errors.New("statusreport: Client is nil")
	}
	if cfg.Status == nil || cfg.Demand == nil {
		return nil, errors.New("statusreport: Status and Demand funcs are required")
	}
	if cfg.Layout.Prefix() == "" {
		cfg.Layout = keys.MustNew(keys.DefaultPrefix)
	}
	sk, err := cfg.Layout.Status(cfg.ProxyCluster, cfg.ID)
	if err != nil {
		return nil, fmt.Errorf("statusreport: %w", err)
	}
	dk, err := cfg.Layout.Demand(cfg.ProxyCluster, cfg.ID)
	if err != nil {
		return nil, fmt.Errorf("statusreport: %w", err)
	}
	lk, err := cfg.Layout.LastSeen(cfg.ProxyCluster, cfg.ID)
	if err != nil {
		return nil, fmt.Errorf("statusreport: %w", err)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < time.Second {
		return nil, fmt.Errorf("statusreport: TTL %v is below etcd's 1s granularity", cfg.TTL)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Reporter{
		cfg: cfg, statusKey: sk, demandKey: dk, seenKey: lk,
		log:    cfg.Logger.With("component", "statusreport"), // the caller's logger names the proxy
		notify: make(chan struct{}, 1),
	}, nil
}

// Notify asks for a write soon (after an apply or a reject). It never blocks.
func (r *Reporter) Notify() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// Lease is the lease the keys are bound to now (0: none).
func (r *Reporter) Lease() clientv3.LeaseID {
	if k := r.keeper.Load(); k != nil {
		return k.Lease()
	}
	return 0
}

// Writes counts successful writes.
func (r *Reporter) Writes() uint64 { return r.writes.Load() }

// Run keeps a lease (api/lease), writes both keys under it, and rewrites
// them every Interval and on Notify; after losing the lease (etcd down past
// the TTL, lease revoked) it writes them again under a new one. When ctx is
// done it deletes the last-seen record and revokes the lease, so the keys
// vanish at once, and returns nil.
func (r *Reporter) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("statusreport: Run is already running")
	}
	defer r.running.Store(false)
	k, err := lease.New(lease.Config{Client: r.cfg.Client, TTL: r.cfg.TTL, OpTimeout: opTimeout, RevokeTimeout: revokeTimeout, Logger: r.log, Name: "status"})
	if err != nil {
		return fmt.Errorf("statusreport: %w", err)
	}
	r.keeper.Store(k)
	return k.Run(ctx, func(hctx context.Context, id clientv3.LeaseID) error {
		err := r.hold(hctx, id)
		if ctx.Err() != nil {
			r.forget(ctx) // stopping on purpose: not GONE
		}
		return err
	})
}

// hold keeps the keys written under one lease until hctx is done or a
// write finds the lease gone.
func (r *Reporter) hold(ctx context.Context, id clientv3.LeaseID) error {
	tick := time.NewTicker(r.cfg.Interval)
	defer tick.Stop()
	for {
		switch err := r.write(ctx, id); {
		case err == nil, ctx.Err() != nil:
		case lease.IsLost(err):
			return err
		default:
			r.log.Warn("status write failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-r.notify:
		}
	}
}

func (r *Reporter) write(ctx context.Context, id clientv3.LeaseID) error {
	now := r.cfg.Now()
	st := r.cfg.Status()
	st.ProxyCluster, st.ID = r.cfg.ProxyCluster, r.cfg.ID
	st.ReportIntervalSeconds = r.cfg.Interval.Seconds()
	if st.UpdatedAt.IsZero() {
		st.UpdatedAt = now
	}
	dm := r.cfg.Demand()
	dm.ProxyCluster, dm.ID = r.cfg.ProxyCluster, r.cfg.ID
	if dm.UpdatedAt.IsZero() {
		dm.UpdatedAt = now
	}
	sb, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode status: %w", err)
	}
	db, err := json.Marshal(dm)
	if err != nil {
		return fmt.Errorf("encode demand: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	_, err = r.cfg.Client.Txn(wctx).Then(
		clientv3.OpPut(r.statusKey, string(sb), clientv3.WithLease(id)),
		clientv3.OpPut(r.demandKey, string(db), clientv3.WithLease(id)),
		clientv3.OpPut(r.seenKey, string(sb)), // no lease: outlives a dead proxy
	).Commit()
	if err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	r.writes.Add(1)
	return nil
}

// forget deletes the last-seen record when the proxy stops: a proxy stopped
// on purpose is not GONE. ctx is done already: the delete gets its own short
// deadline.
func (r *Reporter) forget(ctx context.Context) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
	defer cancel()
	if _, err := r.cfg.Client.Delete(dctx, r.seenKey); err != nil {
		r.log.Warn("last-seen record delete failed; the proxy is listed GONE for a while", "key", r.seenKey, "err", err)
	}
}

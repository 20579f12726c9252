// Package register keeps one instance registration in etcd under a lease:
// it grants the lease, keeps it alive, writes the latest record with write
// throttling, re-registers after lease loss or an etcd outage (exponential
// backoff with jitter, last known record kept), and revokes the lease when
// stopped — unless told to abandon it, as a crashed agent would.
package register

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/backoff"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
)

// Hooks observe the registrar (for metrics); nil fields are skipped. They
// are called from the registrar's goroutine and must not block.
type Hooks struct {
	// Write is called after each successful write of the record.
	Write func()
	// Error is called for each failed etcd operation: op is "grant",
	// "keepalive", "put" or "revoke".
	Error func(op string, err error)
	// Granted is called with each new lease.
	Granted func(id clientv3.LeaseID)
}

// Options configure New. Zero durations take the defaults.
type Options struct {
	Client *clientv3.Client
	// Key is the instance key (keys.Layout.Instance).
	Key string
	// TTL of the lease, rounded up to whole seconds (default 10s).
	TTL time.Duration
	// ReportInterval is the least time between two writes that only carry
	// load changes (default 10s).
	ReportInterval time.Duration
	// MinGap is the least time between two writes for health-state changes
	// (default 1s): a flapping backend costs at most one write per MinGap.
	// A change to draining is written at once regardless.
	MinGap time.Duration
	// OpTimeout bounds one etcd operation (default 5s).
	OpTimeout time.Duration
	// BackoffMin and BackoffMax bound the wait after a failed attempt
	// (defaults 200ms and 5s); each wait is doubled, then jittered into [d/2, d).
	BackoffMin, BackoffMax time.Duration
	// Meaningful decides whether a load-only change is worth a write
	// (default Meaningful).
	Meaningful func(written, next report.Instance) bool
	// Now and Rand are injected for exact tests (defaults time.Now and a
	// randomly seeded source).
	Now  func() time.Time
	Rand func() float64
	// Logger (default slog.Default()).
	Logger *slog.Logger
	Hooks  Hooks
}

// Registrar keeps one registration. Set may be called from any goroutine;
// Run is called once.
type Registrar struct {
	o       Options
	ttlSec  int64
	mu      sync.Mutex
	desired *report.Instance
	notify  chan struct{}
	abandon atomic.Bool
	writes  atomic.Int64
	written atomic.Pointer[report.Instance]
	lease   atomic.Int64
}

// New checks o and returns a registrar.
func New(o Options) (*Registrar, error) {
	if o.Client == nil {
		return nil, errors.New("register: etcd client is nil")
	}
	if o.Key == "" {
		return nil, errors.New("register: key is empty")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.TTL, 10*time.Second)
	def(&o.ReportInterval, 10*time.Second)
	def(&o.MinGap, time.Second)
	def(&o.OpTimeout, 5*time.Second)
	def(&o.BackoffMin, 200*time.Millisecond)
	def(&o.BackoffMax, 5*time.Second)
	if o.BackoffMax < o.BackoffMin {
		o.BackoffMax = o.BackoffMin
	}
	if o.Meaningful == nil {
		o.Meaningful = Meaningful
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Registrar{
		o:      o,
		ttlSec: int64(math.Ceil(o.TTL.Seconds())),
		notify: make(chan struct{}, 1),
	}, nil
}

// Set hands over the latest record; it never blocks. The registrar writes
// it according to the throttling rules (UpdatedAt is set at write time).
func (r *Registrar) Set(rec report.Instance) {
	r.mu.Lock()
	r.desired = &rec
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// Abandon makes Run return without revoking the lease: the registration
// stays until the TTL expires, as after a crash. For tests and chaos drills.
func (r *Registrar) Abandon() { r.abandon.Store(true) }

// Writes returns the number of successful record writes so far.
func (r *Registrar) Writes() int64 { return r.writes.Load() }

// Written returns the last record written under the current lease.
func (r *Registrar) Written() (report.Instance, bool) {
	p := r.written.Load()
	if p == nil {
		return report.Instance{}, false
	}
	return *p, true
}

// Lease returns the current lease (0 while unregistered).
func (r *Registrar) Lease() clientv3.LeaseID { return clientv3.LeaseID(r.lease.Load()) }

func (r *Registrar) latest() (report.Instance, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.desired == nil {
		return report.Instance{}, false
	}
	return *r.desired, true
}

// session is the lease currently held, kept alive by a lessor of its own:
// the keep-alive stream of a lessor stays on the member it opened on, and
// a frozen member never fails it, so a lost lease's successor must not
// reuse it (a new lessor opens a new stream, on another member by the
// client's round robin).
type session struct {
	id     clientv3.LeaseID
	ka     <-chan *clientv3.LeaseKeepAliveResponse
	cancel context.CancelFunc
	lessor clientv3.Lease
}

// revokeTimeout bounds the revoke on the way out.
const revokeTimeout = 2 * time.Second

func (s *session) stop() {
	if s == nil {
		return
	}
	if s.cancel != nil {
		s.cancel()
	}
	if s.lessor != nil {
		s.lessor.Close()
	}
}

// Run keeps the registration until ctx is done, then revokes the lease
// (bounded by OpTimeout) unless Abandon was called. It returns nil on a
// normal stop.
func (r *Registrar) Run(ctx context.Context) error {
	var (
		sess      *session
		written   *report.Instance // under the current lease
		lastWrite time.Time
		failures  int
		retryAt   time.Time
	)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	defer func() {
		sess.stop()
		if sess == nil || r.abandon.Load() {
			return
		}
		// Bounded short: a stop (SIGTERM) is honoured whatever etcd does.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(r.o.OpTimeout, revokeTimeout))
		defer cancel()
		if _, err := r.o.Client.Revoke(rctx, sess.id); err != nil {
			r.hookErr("revoke", err)
			r.o.Logger.Warn("revoke lease", "lease", int64(sess.id), "err", err)
		}
		r.lease.Store(0)
	}()
	dropLease := func(why string, err error) {
		if sess != nil {
			r.o.Logger.Warn("lease lost; re-registering", "why", why, "lease", int64(sess.id), "err", err)
		}
		sess.stop()
		sess, written = nil, nil
		r.written.Store(nil)
		r.lease.Store(0)
	}
	fail := func(now time.Time) {
		failures++
		retryAt = now.Add(r.backoff(failures))
	}
	for {
		desired, have := r.latest()
		now := r.o.Now()
		due, pending := r.due(desired, have, sess != nil, written, lastWrite, retryAt)
		if pending && !due.After(now) {
			if sess == nil {
				s, err := r.grant(ctx)
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					fail(r.o.Now())
					continue
				}
				sess, written = s, nil
			}
			desired.UpdatedAt = r.o.Now().UTC()
			if err := r.put(ctx, sess.id, desired); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if errors.Is(err, rpctypes.ErrLeaseNotFound) {
					dropLease("lease not found", err)
				}
				fail(r.o.Now())
				continue
			}
			failures, retryAt = 0, time.Time{}
			d := desired
			written, lastWrite = &d, r.o.Now()
			r.written.Store(&d)
			continue
		}
		var timerC <-chan time.Time
		if pending {
			timer.Reset(due.Sub(now))
			timerC = timer.C
		}
		var kaC <-chan *clientv3.LeaseKeepAliveResponse
		if sess != nil {
			kaC = sess.ka
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.notify:
		case <-timerC:
		case _, ok := <-kaC:
			if !ok {
				r.hookErr("keepalive", errors.New("keepalive channel closed"))
				dropLease("keepalive ended (lease expired or etcd unreachable past the TTL)", nil)
				// Re-register at once the first time; backoff if it fails.
				retryAt = time.Time{}
			}
		}
		timer.Stop()
	}
}

// due says whether the desired record needs a write and from when.
func (r *Registrar) due(desired report.Instance, have, leased bool, written *report.Instance, lastWrite, retryAt time.Time) (time.Time, bool) {
	if !have {
		return time.Time{}, false
	}
	if !leased || written == nil {
		return retryAt, true
	}
	at := func(gap time.Duration) time.Time {
		t := lastWrite.Add(gap)
		if retryAt.After(t) {
			return retryAt
		}
		return t
	}
	switch {
	case desired.State != written.State && desired.State == config.StateDraining:
		return retryAt, true
	case desired.State != written.State:
		return at(r.o.MinGap), true
	case r.o.Meaningful(*written, desired):
		return at(r.o.ReportInterval), true
	}
	return time.Time{}, false
}

func (r *Registrar) grant(ctx context.Context) (*session, error) {
	lessor := clientv3.NewLease(r.o.Client)
	gctx, cancel := context.WithTimeout(ctx, r.o.OpTimeout)
	g, err := lessor.Grant(gctx, r.ttlSec)
	cancel()
	if err != nil {
		lessor.Close()
		r.hookErr("grant", err)
		r.o.Logger.Warn("grant lease", "err", err)
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	kctx, kcancel := context.WithCancel(ctx)
	ka, err := lessor.KeepAlive(kctx, g.ID)
	if err != nil {
		kcancel()
		lessor.Close()
		r.hookErr("keepalive", err)
		return nil, fmt.Errorf("keep lease alive: %w", err)
	}
	r.lease.Store(int64(g.ID))
	if r.o.Hooks.Granted != nil {
		r.o.Hooks.Granted(g.ID)
	}
	r.o.Logger.Info("lease granted", "lease", int64(g.ID), "ttl_seconds", g.TTL)
	return &session{id: g.ID, ka: ka, cancel: kcancel, lessor: lessor}, nil
}

func (r *Registrar) put(ctx context.Context, lease clientv3.LeaseID, rec report.Instance) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode instance: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, r.o.OpTimeout)
	defer cancel()
	if _, err := r.o.Client.Put(pctx, r.o.Key, string(b), clientv3.WithLease(lease)); err != nil {
		r.hookErr("put", err)
		r.o.Logger.Warn("write instance", "key", r.o.Key, "err", err)
		return fmt.Errorf("put %s: %w", r.o.Key, err)
	}
	r.writes.Add(1)
	if r.o.Hooks.Write != nil {
		r.o.Hooks.Write()
	}
	return nil
}

func (r *Registrar) hookErr(op string, err error) {
	if r.o.Hooks.Error != nil {
		r.o.Hooks.Error(op, err)
	}
}

// backoff returns the wait after the n-th consecutive failure (n ≥ 1):
// BackoffMin·2^(n-1) capped at BackoffMax, jittered into [d/2, d)
// (api/backoff).
func (r *Registrar) backoff(n int) time.Duration {
	return backoff.Delay(max(n, 1)-1, r.o.Rand(), r.o.BackoffMin, r.o.BackoffMax)
}

// Meaningful reports whether next differs enough from written to be worth a
// write when the health state is the same: any identity, weight, capacity,
// label or reason change; in-flight by more than max(1, 10 %); rate by more
// than 10 % and 1 req/s; CPU or memory by 5 points or more.
func Meaningful(written, next report.Instance) bool {
	if written.Cluster != next.Cluster || written.SubCluster != next.SubCluster || written.IDC != next.IDC ||
		written.Addr != next.Addr || written.Port != next.Port || written.Weight != next.Weight ||
		written.CapacityRPS != next.CapacityRPS || written.AgentVersion != next.AgentVersion ||
		written.State != next.State || written.Reason != next.Reason || !sameLabels(written.Labels, next.Labels) {
		return true
	}
	if d := abs(float64(next.InFlight - written.InFlight)); d > math.Max(1, 0.1*math.Max(float64(next.InFlight), float64(written.InFlight))) {
		return true
	}
	if d := abs(next.RPS - written.RPS); d > 1 && d > 0.1*math.Max(next.RPS, written.RPS) {
		return true
	}
	return abs(next.CPUPercent-written.CPUPercent) >= 5 || abs(next.MemPercent-written.MemPercent) >= 5
}

func abs(x float64) float64 { return math.Abs(x) }

func sameLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

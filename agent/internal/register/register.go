// Package register keeps one instance registration in etcd under a lease
// held by api/lease: it writes the latest record with write throttling,
// writes it again under a new lease after lease loss or an etcd outage
// (exponential backoff with jitter, last known record kept), and the lease
// is revoked when stopped — unless told to abandon it, as a crashed agent
// would.
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

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/backoff"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/lease"
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
	mu      sync.Mutex
	desired *report.Instance
	notify  chan struct{}
	keeper  *lease.Keeper
	writes  atomic.Int64
	written atomic.Pointer[report.Instance]
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
	k, err := lease.New(lease.Config{
		Client: o.Client, TTL: time.Duration(math.Ceil(o.TTL.Seconds())) * time.Second,
		OpTimeout: o.OpTimeout, Backoff: backoff.Policy{Min: o.BackoffMin, Max: o.BackoffMax},
		Logger: o.Logger, Name: "registration",
		Hooks: lease.Hooks{Granted: o.Hooks.Granted, Error: o.Hooks.Error},
	})
	if err != nil {
		return nil, fmt.Errorf("register: %w", err)
	}
	return &Registrar{o: o, keeper: k, notify: make(chan struct{}, 1)}, nil
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
func (r *Registrar) Abandon() { r.keeper.Abandon() }

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
func (r *Registrar) Lease() clientv3.LeaseID { return r.keeper.Lease() }

func (r *Registrar) latest() (report.Instance, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.desired == nil {
		return report.Instance{}, false
	}
	return *r.desired, true
}

// Run keeps the registration until ctx is done, then revokes the lease
// (bounded by OpTimeout) unless Abandon was called. It returns nil on a
// normal stop. No lease is taken before the first record is Set.
func (r *Registrar) Run(ctx context.Context) error {
	for {
		if _, have := r.latest(); have {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.notify:
		}
	}
	return r.keeper.Run(ctx, func(hctx context.Context, id clientv3.LeaseID) error {
		err := r.hold(hctx, id)
		if ctx.Err() == nil {
			r.written.Store(nil) // lost with its lease
		}
		return err
	})
}

// hold writes the record under one lease, throttled, until hctx is done or a
// write finds the lease gone.
func (r *Registrar) hold(ctx context.Context, id clientv3.LeaseID) error {
	var (
		written   *report.Instance // under this lease
		lastWrite time.Time
		failures  int
		retryAt   time.Time
	)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		desired, have := r.latest()
		now := r.o.Now()
		due, pending := r.due(desired, have, written, lastWrite, retryAt)
		if pending && !due.After(now) {
			desired.UpdatedAt = r.o.Now().UTC()
			if err := r.put(ctx, id, desired); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if lease.IsLost(err) {
					return err
				}
				failures++
				retryAt = r.o.Now().Add(r.backoff(failures))
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
		select {
		case <-ctx.Done():
			return nil
		case <-r.notify:
		case <-timerC:
		}
		timer.Stop()
	}
}

// due says whether the desired record needs a write and from when.
func (r *Registrar) due(desired report.Instance, have bool, written *report.Instance, lastWrite, retryAt time.Time) (time.Time, bool) {
	if !have {
		return time.Time{}, false
	}
	if written == nil {
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

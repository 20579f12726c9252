// Package lbscheduler runs the scheduler: inventory (list+watch of the
// inputs), leader election, the control loop (inputs → plan.Compute →
// fenced publish of every changed snapshot, shift ramps, history and part
// collection) and the HTTP API. The binary and in-process integration tests
// both start it through Run or Start.
//
// The control loop is level-based: on every change of the inputs (debounced)
// it recomputes from the full current inputs and the live snapshots, so a
// new leader, a lost answer or a retry all converge to the same result.
// Every scheduler computes (the API shows the plan on followers too); only
// the leader publishes.
package lbscheduler

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/backoff"
	"github.com/sluicelb/sluice/api/etcdclient"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/scheduler/internal/api"
	"github.com/sluicelb/sluice/scheduler/internal/dashboard"
	"github.com/sluicelb/sluice/scheduler/internal/publish"
	"github.com/sluicelb/sluice/scheduler/internal/rollout"
	"github.com/sluicelb/sluice/scheduler/internal/shift"
	"github.com/sluicelb/sluice/scheduler/inventory"
	"github.com/sluicelb/sluice/scheduler/plan"
)

// Config configures a scheduler. Zero values take the documented defaults.
type Config struct {
	// ID names this scheduler (Meta.Author is "lbscheduler/<ID>"). Required.
	ID string
	// Client is an etcd client to use (not closed by the scheduler). When
	// nil, one is built from Endpoints, TLS, Username, Password and
	// DialTimeout (default etcdclient.DefaultDialTimeout).
	Client      *clientv3.Client
	Endpoints   []string
	TLS         *tls.Config
	Username    string
	Password    string
	DialTimeout time.Duration
	// Prefix of every key (default keys.DefaultPrefix).
	Prefix string
	// APIAddr is the HTTP API address (default 127.0.0.1:9400; port 0 picks
	// one). A non-loopback address requires APIToken.
	APIAddr  string
	APIToken string
	// SessionTTL is the leader lease TTL (default 5s, whole seconds).
	SessionTTL time.Duration
	// Debounce coalesces bursts of input changes (default 50ms).
	Debounce time.Duration
	// GCInterval is how often the leader collects orphaned parts (default
	// 1m); PartGrace is how long a part must stay unreferenced first
	// (default 5m).
	GCInterval time.Duration
	PartGrace  time.Duration
	// StallTimeout for the inventory's watches (default 30s).
	StallTimeout time.Duration
	// NoPointerPush writes pointers without a snapshot.Push (publish.Options.NoPush):
	// for fleets where proxies of a release before the push still watch.
	NoPointerPush bool
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registry receives the metrics and serves /metrics (default: a new one).
	Registry *prometheus.Registry
}

func (c *Config) defaults() error {
	if err := keys.ValidName(c.ID); err != nil {
		return fmt.Errorf("scheduler id: %w", err)
	}
	if c.Client == nil && len(c.Endpoints) == 0 {
		return errors.New("etcd: no client and no endpoints")
	}
	if c.APIAddr == "" {
		c.APIAddr = "127.0.0.1:9400"
	}
	if c.SessionTTL <= 0 {
		c.SessionTTL = 5 * time.Second
	}
	if c.Debounce <= 0 {
		c.Debounce = 50 * time.Millisecond
	}
	if c.GCInterval <= 0 {
		c.GCInterval = time.Minute
	}
	if c.PartGrace <= 0 {
		c.PartGrace = 5 * time.Minute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
		c.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return nil
}

// Scheduler is a running scheduler (see Start).
type Scheduler struct {
	cfg     Config
	cli     *clientv3.Client
	etcd    *etcdclient.Client // nil with Config.Client
	ownCli  bool
	layout  keys.Layout
	log     *slog.Logger
	inv     *inventory.Inventory
	pub     *publish.Publisher
	staged  *rollout.Controller
	elector *publish.Elector
	ln      net.Listener
	m       *metrics
	dash    *dashboard.Dashboard

	lead     atomic.Pointer[publish.Leadership]
	stepDown chan *publish.Leadership
	kick     chan struct{}
	doc      atomic.Pointer[PlanDoc]

	// Owned by the control loop.
	planner  *plan.Planner
	exec     *shift.Executor
	execTerm *publish.Leadership
	prev     map[string]*snapshot.Snapshot
	book     statusBook // what the leader last did (schedstatus.go)

	whatIfMu sync.Mutex
	whatIf   *plan.Planner

	cancel context.CancelFunc
	wg     sync.WaitGroup
	errMu  sync.Mutex
	err    error
}

// Run starts a scheduler and blocks until ctx is done and it has stopped
// (leadership resigned, session revoked, API closed).
func Run(ctx context.Context, cfg Config) error {
	s, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	return s.Wait()
}

// Start starts a scheduler in the background; Stop or cancelling ctx stops it.
func Start(ctx context.Context, cfg Config) (*Scheduler, error) {
	if err := cfg.defaults(); err != nil {
		return nil, fmt.Errorf("lbscheduler: %w", err)
	}
	layout, err := keys.New(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("lbscheduler: %w", err)
	}
	s := &Scheduler{
		cfg: cfg, layout: layout, log: cfg.Logger.With("scheduler", cfg.ID),
		stepDown: make(chan *publish.Leadership, 1), kick: make(chan struct{}, 1),
		planner: plan.NewPlanner(), whatIf: plan.NewPlanner(),
	}
	s.cli = cfg.Client
	if s.cli == nil {
		// Never waits for etcd: the scheduler starts and waits, not ready.
		s.etcd, err = etcdclient.New(etcdclient.Config{
			Endpoints: cfg.Endpoints, TLS: cfg.TLS, Username: cfg.Username, Password: cfg.Password,
			DialTimeout: cfg.DialTimeout, Logger: s.log,
		})
		if err != nil {
			return nil, fmt.Errorf("lbscheduler: %w", err)
		}
		s.cli, s.ownCli = s.etcd.Client, true
		cfg.Registry.MustRegister(s.etcd.Collector())
	}
	s.ln, err = api.Listen(cfg.APIAddr, cfg.APIToken)
	if err != nil {
		if s.ownCli {
			s.cli.Close()
		}
		return nil, fmt.Errorf("lbscheduler: %w", err)
	}
	s.m = newMetrics(cfg.Registry)
	s.inv = inventory.New(s.cli, layout, inventory.Options{Now: cfg.Now, StallTimeout: cfg.StallTimeout, Logger: s.log, Registerer: cfg.Registry})
	s.pub = publish.New(s.cli, layout, publish.Options{Author: "lbscheduler/" + cfg.ID, Now: cfg.Now, Logger: s.log, Registerer: cfg.Registry, NoPush: cfg.NoPointerPush})
	s.staged = rollout.New(s.cli, layout, s.pub, rollout.Options{Logger: s.log, Now: cfg.Now})
	s.elector = publish.NewElector(s.cli, layout, cfg.ID, cfg.SessionTTL)
	cfg.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_scheduler_input_staleness_seconds",
		Help: "Time since the least recently confirmed input (desired, shifts, instances, demand) was heard from etcd; a quiet healthy watch is reconfirmed every stall timeout (30s by default).",
	}, func() float64 { return s.inv.Staleness().Seconds() }))

	s.dash = dashboard.New(dashboard.Options{Client: s.cli, Layout: layout, Inputs: s.dashboardInputs, Snapshots: s.pub, Token: cfg.APIToken,
		StallTimeout: cfg.StallTimeout, Now: cfg.Now, Logger: s.log})

	ctx, s.cancel = context.WithCancel(ctx)
	s.goRun(func() { _ = s.inv.Run(ctx) })
	s.goRun(func() { s.dash.Run(ctx) })
	s.goRun(func() {
		h := api.Handler(api.Options{Source: source{s}, Token: cfg.APIToken, Gatherer: cfg.Registry, Logger: s.log, UI: s.dash.Handler()})
		if err := api.Serve(ctx, s.ln, h); err != nil {
			s.fail(err)
		}
	})
	s.goRun(func() { s.campaignLoop(ctx) })
	s.goRun(func() { s.controlLoop(ctx) })
	s.log.Info("lbscheduler started", "api", s.ln.Addr().String(), "prefix", layout.Prefix())
	return s, nil
}

func (s *Scheduler) goRun(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

func (s *Scheduler) fail(err error) {
	s.errMu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.errMu.Unlock()
	s.log.Error("lbscheduler failed", "err", err)
	s.cancel()
}

// Stop stops the scheduler and waits for it.
func (s *Scheduler) Stop() error {
	s.cancel()
	return s.Wait()
}

// Wait blocks until the scheduler stopped; it returns the error that
// stopped it, nil after a normal shutdown.
func (s *Scheduler) Wait() error {
	s.wg.Wait()
	if s.ownCli {
		s.cli.Close()
	}
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

// APIAddr is the address the HTTP API listens on.
func (s *Scheduler) APIAddr() string { return s.ln.Addr().String() }

// IsLeader reports whether this scheduler currently holds leadership.
func (s *Scheduler) IsLeader() bool { return s.lead.Load() != nil }

// Publisher exposes the publisher (history, counters) to tests and tools.
func (s *Scheduler) Publisher() *publish.Publisher { return s.pub }

// campaignLoop campaigns, holds leadership until the session ends, the
// control loop reports being fenced, or ctx is done; then campaigns again.
func (s *Scheduler) campaignLoop(ctx context.Context) {
	bo := backoff.Policy{Min: 200 * time.Millisecond, Max: 5 * time.Second}
	for ctx.Err() == nil {
		l, err := s.elector.Campaign(ctx, s.APIAddr())
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d := bo.Next()
			s.log.Warn("campaign failed", "err", err, "backoff", d)
			if !backoff.Sleep(ctx, d) {
				return
			}
			continue
		}
		bo.Reset()
		s.lead.Store(l)
		s.m.leader.Set(1)
		s.log.Info("became leader", "election_key", l.Key, "rev", l.Rev)
		s.poke()
		reason := ""
	hold:
		for {
			select {
			case <-ctx.Done():
				reason = "shutdown"
				break hold
			case <-l.Done():
				reason = "session lost"
				break hold
			case fenced := <-s.stepDown:
				if fenced == l {
					reason = "fenced"
					break hold
				}
			}
		}
		s.lead.Store(nil)
		s.m.leader.Set(0)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publish.ShutdownTimeout)
		err = l.Resign(rctx)
		cancel()
		s.log.Info("stepped down", "reason", reason, "resign_err", err)
	}
}

func (s *Scheduler) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

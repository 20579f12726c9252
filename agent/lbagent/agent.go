package lbagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/agent/internal/load"
	"github.com/sluicelb/sluice/agent/internal/register"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/etcdclient"
	"github.com/sluicelb/sluice/api/httpauth"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/probe"
)

// Agent is one running lbagent. Create it with New, start it with Run;
// Drain, AdminAddr, Current and Writes are safe from any goroutine.
type Agent struct {
	cfg     Config
	target  probe.Target
	key     string
	m       *metrics
	drainCh chan string
	admin   atomic.Pointer[string]
	current atomic.Pointer[report.Instance]
	reg     atomic.Pointer[register.Registrar]
	etcd    atomic.Pointer[etcdclient.Client] // nil with Config.Client
	ran     atomic.Bool
}

// reregisterBackoffMax caps the registrar's wait between failed attempts
// (jittered up to 1.5×).
const reregisterBackoffMax = 2 * time.Second

// New checks cfg (after applying defaults) and returns an agent ready to Run.
func New(cfg Config) (*Agent, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("lbagent config: %w", err)
	}
	t, err := cfg.Target()
	if err != nil {
		return nil, fmt.Errorf("lbagent config: %w", err)
	}
	l, _ := keys.New(cfg.Prefix) // checked by validate
	key, err := l.Instance(cfg.Cluster, cfg.SubCluster, cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("lbagent config: %w", err)
	}
	return &Agent{cfg: cfg, target: t, key: key, m: newMetrics(), drainCh: make(chan string, 1)}, nil
}

// Run starts an agent for cfg and blocks until it stops: after a drain
// (see Agent.Run) or when ctx is cancelled.
func Run(ctx context.Context, cfg Config) error {
	a, err := New(cfg)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// Key returns the instance's etcd key.
func (a *Agent) Key() string { return a.key }

// AdminAddr returns the address the admin server listens on ("" before it
// listens or when disabled).
func (a *Agent) AdminAddr() string {
	if p := a.admin.Load(); p != nil {
		return *p
	}
	return ""
}

// Current returns the record the agent last handed to the registrar.
func (a *Agent) Current() (report.Instance, bool) {
	p := a.current.Load()
	if p == nil {
		return report.Instance{}, false
	}
	return *p, true
}

// Writes returns the number of records written to etcd so far.
func (a *Agent) Writes() int64 {
	if r := a.reg.Load(); r != nil {
		return r.Writes()
	}
	return 0
}

// Drain starts the drain sequence (once; later calls do nothing): the
// instance is written as draining at once, then the agent waits at least
// DrainMin and until the backend's in-flight count reads 0 (or DrainTimeout
// passes), revokes its lease, and Run returns nil.
func (a *Agent) Drain(reason string) {
	select {
	case a.drainCh <- reason:
	default:
	}
}

// probeState is the probe goroutine's latest conclusion.
type probeState struct {
	state probe.State
	err   error
}

// loadSample is the load goroutine's latest reading.
type loadSample struct {
	backend    load.BackendSample
	backendErr error
	haveHost   bool
	host       load.HostSample
}

// Run runs the agent until ctx is cancelled (the lease is revoked, or kept
// when Config.KeepLeaseOnExit) or a drain completes (lease revoked). Both
// return nil; errors are returned only when the agent cannot start.
func (a *Agent) Run(ctx context.Context) error {
	if !a.ran.CompareAndSwap(false, true) {
		return errors.New("lbagent: Run called twice")
	}
	log := a.cfg.Logger.With("cluster", a.cfg.Cluster, "subcluster", a.cfg.SubCluster, "addr", a.cfg.Addr.String())
	cli := a.cfg.Client
	if cli == nil {
		// Never waits for etcd: the agent starts, probes, and registers as
		// soon as etcd can be used (/readyz says why until then).
		c, err := etcdclient.New(etcdclient.Config{
			Endpoints: a.cfg.Endpoints, TLS: a.cfg.EtcdTLS,
			Username: a.cfg.EtcdUsername, Password: a.cfg.EtcdPassword,
			DialTimeout: a.cfg.EtcdDialTimeout, Logger: log,
		})
		if err != nil {
			return fmt.Errorf("lbagent: %w", err)
		}
		defer c.Close()
		cli = c.Client
		a.etcd.Store(c)
		a.m.reg.MustRegister(c.Collector())
	}
	reg, err := register.New(register.Options{
		Client: cli, Key: a.key, TTL: a.cfg.LeaseTTL,
		ReportInterval: a.cfg.ReportInterval, MinGap: a.cfg.MinWriteGap,
		// An operation slower than the lease TTL is not worth waiting for.
		OpTimeout: min(5*time.Second, a.cfg.LeaseTTL),
		// Re-register within a few seconds of etcd being back (with the
		// client's ≤2s reconnect backoff: within 10s).
		BackoffMax: reregisterBackoffMax,
		Logger:     log,
		Hooks: register.Hooks{
			Write:   a.m.writes.Inc,
			Error:   func(op string, _ error) { a.m.etcdErrors.WithLabelValues(op).Inc() },
			Granted: func(clientv3.LeaseID) { a.m.leases.Inc() },
		},
	})
	if err != nil {
		return err
	}
	a.reg.Store(reg)

	var adminSrv *http.Server
	var wg sync.WaitGroup
	if a.cfg.Admin != "" {
		ln, err := net.Listen("tcp", a.cfg.Admin)
		if err != nil {
			return fmt.Errorf("admin listen %s: %w", a.cfg.Admin, err)
		}
		addr := ln.Addr().String()
		a.admin.Store(&addr)
		adminSrv = &http.Server{Handler: a.adminHandler(), ReadHeaderTimeout: 5 * time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := adminSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("admin server", "err", err)
			}
		}()
		log.Info("admin listening", "admin_addr", addr)
	}

	workCtx, stopWork := context.WithCancel(ctx)
	// The registrar stops only when told (after Abandon when the lease is
	// to be kept), never on its own when ctx ends, so it cannot revoke first.
	regCtx, stopReg := context.WithCancel(context.WithoutCancel(ctx))
	regDone := make(chan struct{})
	go func() {
		defer close(regDone)
		_ = reg.Run(regCtx)
	}()
	probeCh := make(chan probeState, 1)
	loadCh := make(chan loadSample, 1)
	fast := make(chan struct{})
	wg.Add(2)
	go func() { defer wg.Done(); a.probeLoop(workCtx, log, probeCh) }()
	go func() { defer wg.Done(); a.loadLoop(workCtx, log, loadCh, fast) }()

	shutdown := func() {
		stopReg()
		<-regDone
		stopWork()
		if adminSrv != nil {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = adminSrv.Shutdown(sctx)
			cancel()
		}
		wg.Wait()
	}

	var (
		ps          probeState
		ls          loadSample
		draining    bool
		drainWhy    string
		drainStart  time.Time
		drainTicker *time.Ticker
		drainC      <-chan time.Time
	)
	publish := func() {
		if ps.state == probe.Unknown && !draining {
			return // the first write waits for the first probe
		}
		rec := a.record(ps, ls, draining, drainWhy)
		a.current.Store(&rec)
		a.m.setState(rec.State)
		reg.Set(rec)
	}
	for {
		select {
		case <-ctx.Done():
			if a.cfg.KeepLeaseOnExit {
				reg.Abandon()
				log.Warn("stopping without revoking the lease (KeepLeaseOnExit)")
			}
			if drainTicker != nil {
				drainTicker.Stop()
			}
			shutdown()
			log.Info("stopped")
			return nil
		case ps = <-probeCh:
			publish()
		case ls = <-loadCh:
			publish()
		case why := <-a.drainCh:
			if draining {
				continue
			}
			draining, drainWhy, drainStart = true, why, time.Now()
			log.Info("draining", "reason", why, "drain_min", a.cfg.DrainMin, "drain_timeout", a.cfg.DrainTimeout)
			publish()
			close(fast)
			drainTicker = time.NewTicker(a.cfg.DrainPoll)
			drainC = drainTicker.C
		case now := <-drainC:
			done, why := a.drainDone(now.Sub(drainStart), drainStart, ls)
			if !done {
				continue
			}
			drainTicker.Stop()
			if why == drainTimedOut {
				// Not drained: the backend's in-flight count never read 0
				// (or could not be read) within --drain-timeout.
				log.Warn("drain timed out before the backend's in-flight count read 0; revoking lease", "why", why,
					"in_flight", ls.backend.InFlight, "drain_timeout", a.cfg.DrainTimeout)
			} else {
				log.Info("drain complete; revoking lease", "why", why, "in_flight", ls.backend.InFlight)
			}
			shutdown()
			return nil
		}
	}
}

// drainTimedOut is drainDone's why when DrainTimeout ended the drain.
const drainTimedOut = "drain timeout"

// drainDone decides whether a drain that started at start and has lasted
// elapsed may end, given the latest load reading.
func (a *Agent) drainDone(elapsed time.Duration, start time.Time, ls loadSample) (bool, string) {
	if elapsed >= a.cfg.DrainTimeout {
		return true, drainTimedOut
	}
	if elapsed < a.cfg.DrainMin {
		return false, ""
	}
	if a.cfg.MetricsURL == "" {
		return true, "drain-min elapsed (no metrics endpoint)"
	}
	if ls.backendErr == nil && !ls.backend.At.Before(start) && ls.backend.InFlight == 0 {
		return true, "backend in-flight reached 0"
	}
	return false, ""
}

func (a *Agent) record(ps probeState, ls loadSample, draining bool, drainWhy string) report.Instance {
	rec := report.Instance{
		Cluster: a.cfg.Cluster, SubCluster: a.cfg.SubCluster, IDC: a.cfg.IDC,
		Addr: a.cfg.Addr.Addr().String(), Port: int(a.cfg.Addr.Port()),
		Weight: a.cfg.Weight, CapacityRPS: a.cfg.capacity(), Labels: a.cfg.Labels,
		AgentVersion: Version,
	}
	switch {
	case draining:
		rec.State, rec.Reason = config.StateDraining, drainWhy
	case ps.state == probe.Up:
		rec.State = config.StateHealthy
	default:
		rec.State = config.StateUnhealthy
		if ps.err != nil {
			rec.Reason = ps.err.Error()
		}
	}
	if ls.backendErr == nil {
		rec.InFlight = ls.backend.InFlight
		rec.RPS = ls.backend.RPS
	}
	if ls.haveHost {
		rec.CPUPercent = round1(ls.host.CPUPercent)
		rec.MemPercent = round1(ls.host.MemPercent)
	}
	return rec
}

func round1(x float64) float64 { return float64(int64(x*10+0.5)) / 10 }

// probeLoop probes the backend every ProbeInterval (the first at once),
// tracks rise/fall, and hands the latest state over without ever blocking.
func (a *Agent) probeLoop(ctx context.Context, log *slog.Logger, out chan probeState) {
	tr, err := probe.NewTracker(a.cfg.Rise, a.cfg.Fall)
	if err != nil { // validated in New
		log.Error("probe tracker", "err", err)
		return
	}
	tick := time.NewTicker(a.cfg.ProbeInterval)
	defer tick.Stop()
	for {
		start := time.Now()
		err := a.checkOnce(ctx, log)
		if ctx.Err() != nil {
			return
		}
		a.m.probeDuration.Observe(time.Since(start).Seconds())
		if err != nil {
			a.m.probes.WithLabelValues("failure").Inc()
		} else {
			a.m.probes.WithLabelValues("success").Inc()
		}
		if tr.Observe(err) {
			log.Info("backend state", "state", tr.State().String(), "err", err)
		}
		latest(out, probeState{state: tr.State(), err: tr.LastErr()})
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// checkOnce runs one probe; a panic counts as a failed probe.
func (a *Agent) checkOnce(ctx context.Context, log *slog.Logger) (err error) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("probe panicked", "panic", p)
			err = fmt.Errorf("probe panicked: %v", p)
		}
	}()
	return probe.Check(ctx, a.target)
}

// loadLoop reads the backend metrics endpoint and /proc every
// ReportInterval/2 (every DrainPoll once fast is closed) and hands the
// latest reading over without blocking.
func (a *Agent) loadLoop(ctx context.Context, log *slog.Logger, out chan loadSample, fast <-chan struct{}) {
	host := load.NewHost(a.cfg.ProcRoot)
	var backend *load.Backend
	if a.cfg.MetricsURL != "" {
		b, err := load.NewBackend(a.cfg.MetricsURL, load.BackendOptions{
			InFlightMetric: a.cfg.InFlightMetric, RequestsMetric: a.cfg.RequestsMetric,
			Timeout: a.cfg.ProbeTimeout * 2, Logger: log,
		})
		if err != nil {
			log.Error("metrics endpoint disabled", "err", err)
		} else {
			backend = b
			defer b.Close()
		}
	}
	period := a.cfg.ReportInterval / 2
	if period < 100*time.Millisecond {
		period = 100 * time.Millisecond
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	var s loadSample
	hostWarned := false
	for {
		if backend != nil {
			b, err := backend.Fetch(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				a.m.loadErrors.WithLabelValues("backend").Inc()
				log.Debug("backend metrics", "err", err)
			} else {
				a.m.inFlight.Set(float64(b.InFlight))
				if b.HaveRPS {
					a.m.rps.Set(b.RPS)
				} else {
					b.RPS = s.backend.RPS // keep the last rate until a new one is known
				}
			}
			s.backend, s.backendErr = b, err
		}
		if h, err := host.Sample(); err != nil {
			a.m.loadErrors.WithLabelValues("host").Inc()
			if !hostWarned {
				log.Warn("host load unavailable", "err", err)
				hostWarned = true
			}
		} else {
			if !h.HaveCPU {
				h.CPUPercent = s.host.CPUPercent
			}
			s.host, s.haveHost = h, true
			a.m.cpu.Set(h.CPUPercent)
			a.m.mem.Set(h.MemPercent)
		}
		latest(out, s)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-fast:
			fast = nil
			tick.Reset(a.cfg.DrainPoll)
		}
	}
}

// latest replaces whatever is waiting in ch (capacity 1, one producer) with v.
func latest[T any](ch chan T, v T) {
	select {
	case <-ch:
	default:
	}
	ch <- v
}

func (a *Agent) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET /metrics", a.authorized(promhttp.HandlerFor(a.m.reg, promhttp.HandlerOpts{})))
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if ok, reason := a.ready(); !ok {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": reason})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"ready": true, "key": a.key})
	})
	mux.Handle("GET /status", a.authorized(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec, ok := a.Current()
		doc := map[string]any{"key": a.key, "registered": ok, "record": rec, "writes": a.Writes()}
		if e := a.etcd.Load(); e != nil {
			doc["etcd"] = e.State()
		}
		writeJSON(w, http.StatusOK, doc)
	})))
	mux.Handle("POST /drain", a.authorized(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.Drain("drain requested on the admin API")
		writeJSON(w, http.StatusAccepted, map[string]string{"state": config.StateDraining})
	})))
	return mux
}

// authorized requires "Authorization: Bearer <AdminToken>" when a token is set.
func (a *Agent) authorized(h http.Handler) http.Handler {
	return httpauth.Require(a.cfg.AdminToken, "", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong bearer token"})
	}, h)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

package lbproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/proxy/internal/admin"
	"github.com/sluicelb/sluice/proxy/internal/balance"
	"github.com/sluicelb/sluice/proxy/internal/configwatch"
	"github.com/sluicelb/sluice/proxy/internal/connlimit"
	"github.com/sluicelb/sluice/proxy/internal/diskcache"
	"github.com/sluicelb/sluice/proxy/internal/filesource"
	"github.com/sluicelb/sluice/proxy/internal/forward"
	"github.com/sluicelb/sluice/proxy/internal/logbuf"
	"github.com/sluicelb/sluice/proxy/internal/sockio"
	"github.com/sluicelb/sluice/proxy/internal/statusreport"
	"github.com/sluicelb/sluice/proxy/internal/telemetry"
	"github.com/sluicelb/sluice/proxy/server"
)

// Run serves until ctx is done, then shuts down gracefully: stops accepting,
// lets in-flight requests finish within ShutdownTimeout, revokes its etcd
// leases and returns nil. It returns an error only when it cannot start.
//
// A proxy goes through three phases: build (everything that can fail at
// start-up: telemetry, the request path, the listeners, the config source
// and its first snapshot, the admin API), serve (the listeners' servers),
// and shut down (drain the servers, then stop the background work). Every
// goroutine is started by the proxy's supervisor (goBG, serve) and waited
// for before Run returns.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.check(); err != nil {
		return err
	}
	p := newProxy(ctx, cfg)
	defer p.close()
	if err := p.build(ctx); err != nil {
		p.closeListeners()
		return err
	}
	if err := p.serveAll(); err != nil {
		p.closeListeners()
		return err
	}
	<-ctx.Done()
	p.shutdown()
	return nil
}

// proxy is one running lbproxy: what build made, and its supervisor.
type proxy struct {
	cfg     Config
	log     *slog.Logger
	started time.Time

	// cleanups run in reverse order when Run returns (close).
	cleanups []func()
	// listeners Run opened itself; closed if the start-up fails.
	listeners []io.Closer

	promReg   *prometheus.Registry
	reg       *balance.Registry
	srv       *server.Server
	accessBuf *logbuf.Writer
	src       *source
	rep       *statusreport.Reporter
	adminH    http.Handler
	certs     []tls.Certificate

	httpL, tlsL, adminL net.Listener

	// The supervisor: background work is owned by bgCtx, cancelled only
	// after the listeners drained; wg counts it and the servers.
	bgCtx   context.Context
	stopBG  context.CancelFunc
	wg      sync.WaitGroup
	servers []server.Front
	conns   *connlimit.Limiter // the client listeners' (connlimits.go)
}

func newProxy(ctx context.Context, cfg Config) *proxy {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	p := &proxy{cfg: cfg, log: log.With("proxy_cluster", cfg.ProxyCluster, "id", cfg.ID), started: cfg.Now()}
	p.bgCtx, p.stopBG = context.WithCancel(context.WithoutCancel(ctx))
	return p
}

// defers registers f to run when Run returns.
func (p *proxy) defers(f func()) { p.cleanups = append(p.cleanups, f) }

func (p *proxy) close() {
	p.stopBG()  // already done by shutdown unless the start-up failed
	p.wg.Wait() // a failed start-up's background work, before its clients close
	for i := len(p.cleanups) - 1; i >= 0; i-- {
		p.cleanups[i]()
	}
}

func (p *proxy) closeListeners() {
	for _, c := range p.listeners {
		c.Close()
	}
}

// goBG runs f under the supervisor until the background context ends.
func (p *proxy) goBG(name string, f func(context.Context) error) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := f(p.bgCtx); err != nil && p.bgCtx.Err() == nil {
			p.log.Error(name+" stopped", "err", err)
		}
	}()
}

// build is the first phase: everything that can fail at start-up.
func (p *proxy) build(ctx context.Context) error {
	if err := p.buildTelemetryAndServer(ctx); err != nil {
		return err
	}
	if err := p.listen(); err != nil {
		return err
	}
	p.limitConns()
	p.goBG("health checks", func(ctx context.Context) error { p.reg.Run(ctx); return nil })
	if p.accessBuf != nil {
		every := p.cfg.AccessLogFlush
		if every <= 0 {
			every = time.Second
		}
		// Flushes once more when bgCtx ends: after the listeners drained.
		p.goBG("access log flush", func(ctx context.Context) error { p.accessBuf.Run(ctx, every); return nil })
	}
	if err := p.startSource(); err != nil {
		return err
	}
	adminH, err := admin.New(admin.Config{
		Server: p.srv, Registry: p.reg, Gatherer: p.promReg, Token: p.cfg.AdminToken, Logger: p.log,
		Pprof:  p.cfg.Pprof,
		Status: func() any { return p.src.adminStatus() },
	})
	if err != nil {
		return fmt.Errorf("lbproxy: %w", err)
	}
	p.adminH = adminH
	return nil
}

// buildTelemetryAndServer sets up tracing, metrics, the access log, the
// balancer registry, the connection pools and the request path.
func (p *proxy) buildTelemetryAndServer(ctx context.Context) error {
	cfg, log := p.cfg, p.log
	tel, err := telemetry.Setup(ctx, telemetry.Options{
		ServiceName: "lbproxy", ServiceInstance: cfg.ID, Version: cfg.Version,
		Exporter: cfg.TraceExporter, SampleRatio: cfg.TraceSample, SpanProcessor: cfg.SpanProcessor, Stdout: cfg.TraceOutput,
	})
	if err != nil {
		return fmt.Errorf("lbproxy: %w", err)
	}
	p.defers(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if e := tel.Shutdown(sctx); e != nil {
			log.Warn("telemetry shutdown", "err", e)
		}
	})
	p.promReg = prometheus.NewRegistry()
	p.promReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	trusted, err := server.ParseTrusted(cfg.TrustedProxies)
	if err != nil {
		return fmt.Errorf("lbproxy: %w", err)
	}
	if p.certs, err = loadCerts(cfg.Certs); err != nil {
		return err
	}
	var accessLog io.Writer // the JSON lines of slog.NewJSONHandler, written by server (accessline.go)
	if cfg.AccessLog != nil {
		accessLog = cfg.AccessLog
		if cfg.AccessLogBuffer > 0 {
			p.accessBuf = logbuf.New(cfg.AccessLog, cfg.AccessLogBuffer)
			p.defers(func() { p.accessBuf.Flush() }) // when Run fails before its flusher starts
			accessLog = p.accessBuf
		}
	}
	p.reg = balance.NewRegistry(balance.RegistryOptions{Now: cfg.Now, Probe: cfg.Probe, MaxProbes: cfg.MaxProbes, Logger: log, StickySecret: cfg.StickySecret})
	pools := forward.NewPools(forward.Options{})
	p.defers(pools.Close)
	var head server.Head // a nil *telemetry.Head is no head
	if tel.Head != nil {
		head = tel.Head
	}
	p.srv, err = server.New(server.Options{
		Registry: p.reg, Pools: pools, TrustedProxies: trusted, MaxBodyBytes: cfg.MaxBodyBytes,
		UpstreamClient:  cfg.UpstreamClient,
		AccessLogWriter: accessLog, Logger: log, TracerProvider: tel.TracerProvider, Propagator: tel.Propagator, Head: head,
		Metrics: p.promReg,
	})
	if err != nil {
		return fmt.Errorf("lbproxy: %w", err)
	}
	reg := p.reg
	p.promReg.MustRegister(newTableCollector(p.srv), prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sluice_proxy_ejections_total",
		Help: "Instances ejected by passive health checks (fail_num consecutive failures: NORMAL → CHECKING).",
	}, func() float64 { return float64(reg.Ejections()) }), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_proxy_probes_in_flight",
		Help: "Active health probes running now; at most sluice_proxy_probes_max (the rest wait for a slot, their timeout not yet started).",
	}, func() float64 { return float64(reg.ProbesInFlight()) }), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_proxy_probes_max",
		Help: "Bound on active health probes in flight.",
	}, func() float64 { return float64(reg.MaxProbes()) }))
	if p.accessBuf != nil {
		buf := p.accessBuf
		p.promReg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_proxy_access_log_dropped_bytes_total",
			Help: "Bytes of buffered access-log lines lost to failed writes (--access-log-buffer).",
		}, func() float64 { return float64(buf.Dropped()) }))
	}
	return nil
}

// listen binds the listeners first: a port clash is a start-up error, not
// a late surprise.
func (p *proxy) listen() error {
	listen := func(l net.Listener, addr string) (net.Listener, error) {
		if l != nil || addr == "" {
			return l, nil
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("lbproxy: listen %s: %w", addr, err)
		}
		p.listeners = append(p.listeners, l)
		return l, nil
	}
	var err error
	if p.httpL, err = listen(p.cfg.Listener, p.cfg.Listen); err != nil {
		return err
	}
	if p.tlsL, err = listen(p.cfg.TLSListener, p.cfg.ListenTLS); err != nil {
		return err
	}
	p.adminL, err = listen(p.cfg.AdminListener, p.cfg.Admin)
	return err
}

// notifyReporter tells the status reporter that the status changed. It is
// the only path to rep.Notify: the config source calls it once per apply,
// reject or sync change.
func (p *proxy) notifyReporter() {
	if p.cfg.onReport != nil {
		p.cfg.onReport()
	}
	if p.rep != nil {
		p.rep.Notify()
	}
}

// startSource starts the config source (the etcd watch and the status
// reporter, or the file source, which applies its first snapshot before
// it returns). Apply → log → notify is wired once: the source logs each
// apply or reject and calls OnChange; srv.Apply only swaps.
func (p *proxy) startSource() error {
	cfg, log := p.cfg, p.log
	p.src = &source{srv: p.srv, log: log, now: cfg.Now}
	if len(cfg.Etcd.Endpoints) == 0 {
		p.src.fileState = new(filesource.State)
		path, err := startFileSource(cfg, log, p.srv.Apply, p.goBG, p.promReg, p.src.fileState)
		if err != nil {
			return err
		}
		p.src.file = path
		return nil
	}
	etcd, err := newEtcdClient(cfg.Etcd, log)
	if err != nil {
		return err
	}
	p.defers(func() { etcd.Close() })
	p.src.etcd = etcd
	p.promReg.MustRegister(etcd.Collector())
	layout, err := keys.New(cfg.Prefix)
	if err != nil {
		return fmt.Errorf("lbproxy: prefix: %w", err)
	}
	dir := cfg.CacheDir
	if dir == "" {
		dir = DefaultCacheDir()
	}
	cache, err := diskcache.Open(dir, cfg.ProxyCluster)
	if err != nil {
		return fmt.Errorf("lbproxy: disk cache: %w", err)
	}
	w, err := configwatch.New(configwatch.Config{
		Client: etcd.Client, Layout: layout, ProxyCluster: cfg.ProxyCluster, ID: cfg.ID, Apply: limitInstances(cfg.MaxInstances, p.srv.Apply), Cache: cache,
		Logger: log, StallTimeout: cfg.StallTimeout, Metrics: p.promReg, Now: cfg.Now,
		OnChange: p.notifyReporter,
	})
	if err != nil {
		return fmt.Errorf("lbproxy: %w", err)
	}
	p.src.watcher = w
	dm := &demandMeter{window: 10 * time.Second, now: cfg.Now, counts: p.srv.Counts}
	p.rep, err = statusreport.New(statusreport.Config{
		Client: etcd.Client, Layout: layout, ProxyCluster: cfg.ProxyCluster, ID: cfg.ID,
		Interval: cfg.ReportInterval, Logger: log, Now: cfg.Now,
		Status: func() report.ProxyStatus {
			st := p.src.proxyStatus(cfg, p.started)
			st.AdminAddr, st.ListenAddr = addrOf(p.adminL), addrOf(p.httpL)
			return st
		},
		Demand: func() report.Demand {
			rates, secs := dm.rates()
			inst, cut := proxyInstances(p.srv.Table())
			return report.Demand{ProxyCluster: cfg.ProxyCluster, ID: cfg.ID, Clusters: rates,
				WindowSeconds: secs, UpdatedAt: cfg.Now(), Instances: inst, InstancesTruncated: cut}
		},
	})
	if err != nil {
		return fmt.Errorf("lbproxy: %w", err)
	}
	p.goBG("config watch", w.Run)
	p.goBG("status report", p.rep.Run)
	return nil
}

// serveAll is the second phase: one server per listener, under the
// supervisor. Every front is made before any serves: a front refused
// (FrontOptions the TLS front rejects, say) fails the start-up with no
// server started, none left serving a listener Run does not close.
func (p *proxy) serveAll() error {
	cfg := p.cfg
	front := cfg.Front
	front.ErrorLog = slog.NewLogLogger(p.log.Handler(), slog.LevelDebug)
	var httpHS, tlsHS server.Front
	if p.httpL != nil {
		hs, err := p.srv.NewFront(cfg.FrontKind, front)
		if err != nil {
			return err
		}
		httpHS = hs
	}
	if p.tlsL != nil {
		f := front
		f.Certificates = p.certs
		hs, err := p.srv.TLSFront(cfg.TLSFrontKind, f) // ALPN h2 to --h2-server, HTTP/1.1 to --tls-front
		if err != nil {
			return err
		}
		tlsHS = hs
	}
	if httpHS != nil {
		p.serve("http", p.conns.Listener(sockio.Listener{Listener: p.httpL}), httpHS)
	}
	if tlsHS != nil {
		p.serve("https", p.conns.Listener(sockio.Listener{Listener: p.tlsL}), tlsHS)
	}
	adminHS := &http.Server{Handler: p.adminH, ReadHeaderTimeout: 5 * time.Second, ErrorLog: front.ErrorLog}
	p.serve("admin", sockio.Listener{Listener: p.adminL}, adminHS)
	addrs := Addrs{HTTP: addrOf(p.httpL), HTTPS: addrOf(p.tlsL), Admin: addrOf(p.adminL)}
	p.log.Info("lbproxy started", "http", addrs.HTTP, "https", addrs.HTTPS, "admin", addrs.Admin, "version", cfg.Version)
	if cfg.Started != nil {
		cfg.Started(addrs)
	}
	return nil
}

func (p *proxy) serve(name string, l net.Listener, hs server.Front) {
	p.servers = append(p.servers, hs) // l: every listener's connections make raw system calls (sockio)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.log.Error(name+" server stopped", "err", err)
		}
	}()
}

// shutdown is the last phase: drain every server within ShutdownTimeout,
// then stop the background work (the status reporter revokes its lease on
// the way out) and wait for all of it.
func (p *proxy) shutdown() {
	p.log.Info("shutting down", "timeout", p.cfg.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), p.cfg.ShutdownTimeout)
	defer cancel()
	var swg sync.WaitGroup
	for _, hs := range p.servers {
		swg.Add(1)
		go func() {
			defer swg.Done()
			if err := hs.Shutdown(sctx); err != nil {
				p.log.Warn("in-flight requests cut at the shutdown deadline", "err", err)
				hs.Close()
			}
		}()
	}
	swg.Wait()
	p.stopBG()
	p.wg.Wait()
	p.log.Info("stopped")
}

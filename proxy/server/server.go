// Package server is lbproxy's request path: it takes a client request,
// routes it to a cluster (api/route), lets the balancer pick a sub-cluster and
// an instance (proxy/internal/balance), forwards it through the backend's connection
// pool (proxy/internal/forward) — forward's HTTP/1.1 client by default, or
// httputil.ReverseProxy (Options.UpstreamClient; upgrades always) — and
// retries failed attempts when that is safe. It also answers what the proxy generates itself
// (404 no route, 502/503/504 with an X-Sluice-Reason header), writes the
// access log, the traces and the request metrics.
//
// Configuration arrives as whole snapshots through Apply, which compiles the
// router and the balancing table into one immutable runtime value and swaps
// it with one atomic pointer store. A request loads that pointer exactly once
// (I2), so it never mixes two versions, and a swap never touches a connection
// or an in-flight request (D8).
//
// Server is safe for concurrent use: ServeHTTP on any number of goroutines,
// Apply from one goroutine at a time (it serialises itself).
package server

import (
	"fmt"
	"io"
	"log/slog"
	"net/http/httputil"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/route"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
	"github.com/sluicelb/sluice/proxy/internal/balance"
	"github.com/sluicelb/sluice/proxy/internal/forward"
)

// Options configure a Server. Zero values are documented per field.
type Options struct {
	// Registry holds per-address balancer state; required.
	Registry *balance.Registry
	// Pools are the backend connection pools; nil means forward.NewPools({}).
	Pools *forward.Pools
	// TrustedProxies are added to the snapshot's settings.trusted_proxies.
	TrustedProxies []netip.Prefix
	// MaxBodyBytes caps request bodies (413 above); 0 means no cap.
	MaxBodyBytes int64
	// AccessLog receives one JSON line per request; nil disables it.
	AccessLog *slog.Logger
	// AccessLogWriter, instead of AccessLog, receives the same JSON lines,
	// byte for byte what slog.NewJSONHandler(AccessLogWriter, nil) would
	// write, formatted by the server itself (accessline.go: a tenth of the
	// CPU, no allocation). One Write per line, serialised. Setting both is
	// an error.
	AccessLogWriter io.Writer
	// Logger is for everything else; nil means slog.Default().
	Logger *slog.Logger
	// TracerProvider creates the spans; nil means no tracing.
	TracerProvider trace.TracerProvider
	// Propagator injects trace context to backends; nil means W3C trace context.
	Propagator propagation.TextMapPropagator
	// Head, when set, decides the sampling of a request without trace
	// context (no traceparent, no baggage header) before any span starts:
	// those it leaves unsampled get no span (tracehead.go). It is to be
	// the TracerProvider's own sampler and ID generator (telemetry.Head),
	// with the W3C propagator.
	Head Head
	// Metrics registers the request metrics; nil means none are exported.
	Metrics prometheus.Registerer
	// UpstreamClient is UpstreamFast (forward's HTTP/1.1 client for plain
	// requests, the default) or UpstreamStd (httputil.ReverseProxy over
	// http.Transport for everything). Upgrades always take the std path.
	UpstreamClient string
	// Now is the clock of the access log and latencies; nil means time.Now.
	Now func() time.Time
}

// Server is the request path. Create it with New.
type Server struct {
	reg     *balance.Registry
	holder  balance.Holder
	pools   *forward.Pools
	trusted []netip.Prefix
	maxBody int64
	access  *slog.Logger
	accessW *accessWriter // Options.AccessLogWriter
	log     *slog.Logger
	tracer  trace.Tracer
	tracing bool
	prop    propagation.TextMapPropagator
	head    Head
	metrics *metrics
	now     func() time.Time
	rp      *httputil.ReverseProxy
	fast    bool // UpstreamFast
	rt      atomic.Pointer[runtime]
	applyMu sync.Mutex
	stats   sync.Map // cluster name → *clusterStats, survives swaps
	reqPool sync.Pool
}

// runtime is everything one snapshot compiles to. Immutable once stored.
type runtime struct {
	snap     *snapshot.Snapshot
	version  uint64
	table    *balance.Table
	router   *route.Router
	trusted  []netip.Prefix
	clusters map[string]*clusterRT
}

// clusterRT is one backend cluster as the request path needs it.
type clusterRT struct {
	name     string
	bc       *balance.Cluster
	policy   config.Policy
	onStatus [10]uint64 // bitset over 0..639
	subs     map[string]*subMetrics
	stats    *clusterStats
	retryIn  prometheus.Counter
	retryX   prometheus.Counter
	budget   prometheus.Counter
	bhDrops  prometheus.Counter
}

func (c *clusterRT) retryOnStatus(code int) bool {
	return code >= 0 && code < 640 && c.onStatus[code/64]&(1<<(code%64)) != 0
}

// clusterStats count requests for the demand report; they survive swaps.
type clusterStats struct {
	requests, errors, blackhole atomic.Uint64
	traffic                     trafficStats
}

// New returns a Server with no configuration: it answers 503 until the first
// Apply.
func New(o Options) (*Server, error) {
	if o.Registry == nil {
		return nil, fmt.Errorf("server: Options.Registry is required")
	}
	if o.AccessLog != nil && o.AccessLogWriter != nil {
		return nil, fmt.Errorf("server: Options.AccessLog and Options.AccessLogWriter are both set: want one access log")
	}
	s := &Server{
		reg: o.Registry, pools: o.Pools, trusted: o.TrustedProxies, maxBody: o.MaxBodyBytes,
		access: o.AccessLog, log: o.Logger, prop: o.Propagator, now: o.Now,
	}
	switch o.UpstreamClient {
	case "", UpstreamFast:
		s.fast = true
	case UpstreamStd:
	default:
		return nil, fmt.Errorf("server: Options.UpstreamClient %q: want %q or %q", o.UpstreamClient, UpstreamFast, UpstreamStd)
	}
	if s.pools == nil {
		s.pools = forward.NewPools(forward.Options{})
	}
	if o.AccessLogWriter != nil {
		s.accessW = newAccessWriter(o.AccessLogWriter)
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.prop == nil {
		s.prop = propagation.TraceContext{}
	}
	if s.now == nil {
		s.now = time.Now
	}
	tp := o.TracerProvider
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	_, s.tracing = tp.(noop.TracerProvider)
	s.tracing = !s.tracing
	s.tracer = tp.Tracer("github.com/sluicelb/sluice/proxy/server")
	if s.tracing {
		s.head = o.Head
	}
	s.metrics = newMetrics(o.Metrics)
	s.rp = s.newReverseProxy()
	return s, nil
}

// Apply compiles a snapshot that passed validation (validate.Check) and
// swaps it in. On error nothing changed (I5). Requests in flight keep the
// runtime they loaded; new requests see the new one.
func (s *Server) Apply(checked validate.Checked) error {
	snap := checked.Snapshot()
	if snap == nil {
		return fmt.Errorf("apply: no snapshot (the zero validate.Checked)")
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	start := time.Now()
	router, err := route.Compile(snap.Products, snap.DefaultProduct)
	if err != nil {
		return fmt.Errorf("apply version %d: routes: %w", snap.Meta.Version, err)
	}
	tr, err := ParseTrusted(snap.Settings.TrustedProxies)
	if err != nil {
		return fmt.Errorf("apply version %d: settings.trusted_proxies: %w", snap.Meta.Version, err)
	}
	table, err := balance.Build(checked, s.reg)
	if err != nil {
		return fmt.Errorf("apply version %d: %w", snap.Meta.Version, err)
	}
	rt := &runtime{
		snap: snap, version: snap.Meta.Version, table: table, router: router,
		trusted:  append(append([]netip.Prefix(nil), s.trusted...), tr...),
		clusters: make(map[string]*clusterRT, len(snap.Clusters)),
	}
	for name, c := range snap.Clusters {
		crt := &clusterRT{
			name: name, bc: table.Cluster(name), policy: c.Policy,
			subs:    make(map[string]*subMetrics, len(c.Row.Weights)+1),
			stats:   s.clusterStats(name),
			retryIn: s.metrics.retries.WithLabelValues(name, "in"),
			retryX:  s.metrics.retries.WithLabelValues(name, "cross"),
			budget:  s.metrics.budget.WithLabelValues(name),
			bhDrops: s.metrics.blackhole.WithLabelValues(name),
		}
		if crt.bc == nil {
			return fmt.Errorf("apply version %d: cluster %q missing from the built table", snap.Meta.Version, name)
		}
		for _, code := range c.Policy.Retry.OnStatus {
			if code >= 0 && code < 640 {
				crt.onStatus[code/64] |= 1 << (code % 64)
			}
		}
		for sub := range c.SubClusters {
			crt.subs[sub] = s.metrics.sub(name, sub)
		}
		crt.subs[config.Blackhole] = s.metrics.sub(name, config.Blackhole)
		for sub, m := range crt.subs {
			m.answers = crt.stats.traffic.sub(sub)
		}
		rt.clusters[name] = crt
	}
	// Past this point nothing can fail: publish.
	old := s.rt.Load()
	s.holder.Store(table)
	s.rt.Store(rt)
	s.metrics.applied.Set(float64(snap.Meta.Version))
	for name, c := range snap.Clusters {
		s.metrics.weight.DeletePartialMatch(prometheus.Labels{"cluster": name})
		for sub, w := range c.Row.Weights {
			s.metrics.weight.WithLabelValues(name, sub).Set(float64(w))
		}
	}
	if old != nil {
		for name := range old.clusters {
			if _, ok := rt.clusters[name]; !ok {
				s.metrics.forget(name)
				s.stats.Delete(name)
			}
		}
	}
	// Close the idle connections of addresses no cluster uses any more.
	addrs := make(map[netip.AddrPort]struct{})
	for _, c := range snap.Clusters {
		for _, sc := range c.SubClusters {
			for _, in := range sc.Instances {
				if a, err := netip.ParseAddr(in.Addr); err == nil {
					addrs[netip.AddrPortFrom(a.Unmap(), uint16(in.Port))] = struct{}{}
				}
			}
		}
	}
	s.pools.Retain(func(a netip.AddrPort) bool { _, ok := addrs[a]; return ok })
	s.metrics.applyDuration.Observe(time.Since(start).Seconds())
	return nil
}

func (s *Server) clusterStats(name string) *clusterStats {
	if v, ok := s.stats.Load(name); ok {
		return v.(*clusterStats)
	}
	v, _ := s.stats.LoadOrStore(name, &clusterStats{})
	return v.(*clusterStats)
}

// Ready reports whether a snapshot has been applied.
func (s *Server) Ready() bool { return s.rt.Load() != nil }

// Version is the applied snapshot version (0 before the first Apply).
func (s *Server) Version() uint64 {
	if rt := s.rt.Load(); rt != nil {
		return rt.version
	}
	return 0
}

// Snapshot is the applied snapshot (nil before the first Apply).
func (s *Server) Snapshot() *snapshot.Snapshot {
	if rt := s.rt.Load(); rt != nil {
		return rt.snap
	}
	return nil
}

// Table is the applied balancing table (nil before the first Apply).
func (s *Server) Table() *balance.Table { return s.holder.Load() }

// Counts are cumulative request counters of one cluster. Traffic details
// the answers (sub-clusters of the applied table only).
type Counts struct {
	Requests, Errors, Blackhole uint64
	Traffic                     report.TrafficCounts
}

// Counts returns the cumulative counters of every cluster of the applied
// table, for the demand report. Errors are generated 5xx answers and backend
// 5xx responses.
func (s *Server) Counts() map[string]Counts {
	rt := s.rt.Load()
	if rt == nil {
		return nil
	}
	out := make(map[string]Counts, len(rt.clusters))
	for name, c := range rt.clusters {
		out[name] = Counts{c.stats.requests.Load(), c.stats.errors.Load(), c.stats.blackhole.Load(),
			c.stats.traffic.snapshot(c.subs)}
	}
	return out
}

// Clusters lists the applied clusters, sorted.
func (s *Server) Clusters() []string {
	rt := s.rt.Load()
	if rt == nil {
		return nil
	}
	out := make([]string, 0, len(rt.clusters))
	for n := range rt.clusters {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Package lbproxy assembles a whole Sluice proxy: the request path
// (proxy/server) on the client listeners, the admin API, the config source
// (an etcd watch with a disk cache, or a snapshot / BFE configuration file),
// status and demand reports, telemetry and graceful shutdown. The lbproxy
// binary is a thin flag layer over Run; integration tests call Run in-process.
package lbproxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluicelb/sluice/api/etcdclient"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/proxy/internal/admin"
	"github.com/sluicelb/sluice/proxy/internal/balance"
	"github.com/sluicelb/sluice/proxy/internal/configwatch"
	"github.com/sluicelb/sluice/proxy/internal/filesource"
	"github.com/sluicelb/sluice/proxy/server"
)

// Etcd says how to reach etcd.
type Etcd struct {
	Endpoints []string
	// CACert, Cert and Key are PEM files for TLS / mTLS; empty means plain.
	CACert, Cert, Key string
	// Username and Password authenticate; empty means none.
	Username, Password string
	// DialTimeout bounds one connection attempt; default 3s (Run does not
	// wait for etcd: a proxy starts from its disk cache whenever etcd
	// cannot be used, and keeps trying in the background).
	DialTimeout time.Duration
}

// CertPair is one TLS certificate and key file pair.
type CertPair struct{ Cert, Key string }

// Config is one proxy's configuration. Exactly one of Etcd.Endpoints,
// ConfigFile and BFEConfDir selects the config source.
type Config struct {
	// ProxyCluster is the proxy cluster whose snapshot is served (e.g.
	// BFE1). Required with etcd; with a file, empty means the file's own
	// (a desired state with one proxy cluster, a snapshot's meta, BFE's
	// default for a BFE directory).
	ProxyCluster string
	// ID is this proxy's unique id within its proxy cluster.
	ID string
	// Etcd, Prefix: the etcd source (Prefix default /sluice).
	Etcd   Etcd
	Prefix string
	// ConfigFile is a snapshot or desired-state file (--config).
	ConfigFile string
	// BFEConfDir is a BFE configuration directory (--bfe-conf).
	BFEConfDir string

	// Listen is the plain HTTP address; Listener, when set, is used instead.
	Listen   string
	Listener net.Listener
	// ListenTLS is the HTTPS address (HTTP/2 and HTTP/1.1), served with Certs.
	ListenTLS   string
	TLSListener net.Listener
	Certs       []CertPair
	// Admin is the admin API address (default 127.0.0.1:9090);
	// AdminListener, when set, is used instead.
	Admin         string
	AdminListener net.Listener
	// AdminToken is required when the admin API is not on loopback.
	AdminToken string

	// CacheDir holds the last good snapshot (etcd source only). Default:
	// <user cache dir>/sluice, or /var/lib/sluice.
	CacheDir string
	// TrustedProxies are CIDRs whose X-Forwarded-For is believed, in
	// addition to the snapshot's settings.
	TrustedProxies []string
	// StickySecret keys sticky-cookie HMACs; empty means a random key per
	// process (cookies then do not survive a restart).
	StickySecret []byte
	// MaxBodyBytes caps request bodies (413); default 64 MiB, -1 no cap.
	MaxBodyBytes int64
	// UpstreamClient is server.UpstreamFast (default) or server.UpstreamStd.
	UpstreamClient string
	// Front limits (see server.FrontOptions).
	Front server.FrontOptions
	// FrontKind is the server of the plain HTTP listener: server.FrontFastHTTP
	// or server.FrontStd (net/http). Empty: fasthttp, or std with the std
	// upstream client (the fasthttp front needs the fast one).
	FrontKind string
	// TLSFrontKind serves HTTP/1.1 on TLS listeners (HTTP/2, ALPN h2, is
	// always net/http's): server.FrontFastHTTP or server.FrontStd. Empty:
	// fasthttp, or std with the std upstream client. fasthttp is the default
	// because, measured against nginx under wrk, it costs less CPU per
	// request than net/http over TLS, and with idle connections parked it
	// holds less memory per idle connection too (docs/BENCHMARKS.md, "TLS
	// side by side with nginx" and "Idle keep-alive connections").
	TLSFrontKind string
	// Pprof serves net/http/pprof on the admin API (/debug/pprof/, behind
	// the admin token). Off by default.
	Pprof bool
	// MaxProbes bounds the active health probes in flight (≤ 0: 64).
	MaxProbes int
	// ShutdownTimeout bounds finishing in-flight requests; default 15s.
	ShutdownTimeout time.Duration
	// StallTimeout of the etcd watch (default configwatch's).
	StallTimeout time.Duration
	// ReportInterval of status and demand reports (default 5s).
	ReportInterval time.Duration
	// Now is the clock of everything the proxy judges or stamps by time:
	// health transitions, slow start, ejection and override TTLs, the
	// config watch's and file source's records, status and demand reports
	// and their staleness. nil means time.Now. Request latencies, access-log
	// times and socket deadlines stay on the real clock.
	Now func() time.Time
	// MaxInstances, when positive, refuses a snapshot with more backend
	// instances than this (this proxy's memory budget): it keeps the last
	// good one and reports the rejection (limit.go).
	MaxInstances int
	// MaxClientConns bounds the open client connections of the HTTP and
	// HTTPS listeners together (--max-client-conns): at the bound the one
	// idle the longest is closed to admit a new one, or, none idle, the new
	// one is refused (internal/connlimit). 0: derived from the open-file
	// limit (connlimit.DefaultMax); -1: no bound.
	MaxClientConns int
	// MaxClientConnsPerIP bounds the open client connections of one peer IP
	// (--max-client-conns-per-ip); over it a new one is refused. 0: no bound.
	MaxClientConnsPerIP int

	// AccessLog receives JSON access-log lines; nil turns it off.
	AccessLog io.Writer
	// AccessLogBuffer, when positive, collects access-log lines in a buffer
	// of that many bytes, written when full, every AccessLogFlush (default
	// 1s) and at shutdown (nginx's access_log buffer= and flush=). Zero
	// writes every line at once.
	AccessLogBuffer int
	AccessLogFlush  time.Duration
	// Logger for everything else; nil means JSON on stderr.
	Logger *slog.Logger
	// TraceExporter is telemetry's exporter name ("" = from OTEL_* env).
	TraceExporter string
	// TraceSample is the root sampling ratio 0..1.
	TraceSample float64
	// TraceOutput receives the stdout trace exporter's spans; nil: stdout.
	TraceOutput io.Writer
	// SpanProcessor is added to the tracer provider (tests).
	SpanProcessor sdktrace.SpanProcessor
	// Probe is the active health probe of the balancer (nil: the balancer's
	// default, probe.CheckPolicy — the same checks lbagent runs).
	Probe balance.ProbeFunc
	// Version is reported in status and traces.
	Version string
	// Started, when set, is called once every listener is bound.
	Started func(Addrs)

	// onReport, when set (tests), is called on every notification of the
	// status reporter.
	onReport func()
}

// Addrs are the bound addresses.
type Addrs struct {
	HTTP, HTTPS, Admin string
}

// DefaultCacheDir is where the last good snapshot is kept by default.
func DefaultCacheDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "sluice")
	}
	return "/var/lib/sluice"
}

// frontKind checks a front kind (what names the flag in errors) against the
// upstream client; empty is fasthttp, or std with the std upstream client
// (the fasthttp front needs the fast one).
func frontKind(what, kind, upstream string) (string, error) {
	switch kind {
	case "":
		if upstream == server.UpstreamStd {
			return server.FrontStd, nil
		}
		return server.FrontFastHTTP, nil
	case server.FrontStd:
	case server.FrontFastHTTP:
		if upstream == server.UpstreamStd {
			return "", fmt.Errorf("lbproxy: %s %q needs the %q upstream client", what, kind, server.UpstreamFast)
		}
	default:
		return "", fmt.Errorf("lbproxy: %s %q: want %q or %q", what, kind, server.FrontStd, server.FrontFastHTTP)
	}
	return kind, nil
}

func (c *Config) check() error {
	sources := 0
	for _, set := range []bool{len(c.Etcd.Endpoints) > 0, c.ConfigFile != "", c.BFEConfDir != ""} {
		if set {
			sources++
		}
	}
	if sources != 1 {
		return errors.New("lbproxy: give exactly one config source: etcd endpoints, a config file or a BFE conf dir")
	}
	// A file names its own proxy cluster (a BFE directory gets BFE's
	// default name): --proxy-cluster is only required with etcd.
	if c.ProxyCluster != "" || len(c.Etcd.Endpoints) > 0 {
		if err := keys.ValidName(c.ProxyCluster); err != nil {
			return fmt.Errorf("lbproxy: proxy cluster: %w", err)
		}
	}
	if len(c.Etcd.Endpoints) > 0 {
		if err := keys.ValidName(c.ID); err != nil {
			return fmt.Errorf("lbproxy: id: %w", err)
		}
	}
	if c.Listen == "" && c.Listener == nil && c.ListenTLS == "" && c.TLSListener == nil {
		return errors.New("lbproxy: no client listener: set a listen address")
	}
	front, err := frontKind("front", c.FrontKind, c.UpstreamClient)
	if err != nil {
		return err
	}
	tlsFront, err := frontKind("TLS front", c.TLSFrontKind, c.UpstreamClient)
	if err != nil {
		return err
	}
	c.FrontKind, c.TLSFrontKind = front, tlsFront
	if (c.ListenTLS != "" || c.TLSListener != nil) && len(c.Certs) == 0 {
		return errors.New("lbproxy: a TLS listener needs at least one certificate and key pair")
	}
	if c.Admin == "" {
		c.Admin = "127.0.0.1:9090"
	}
	if c.AdminListener == nil {
		if err := admin.CheckBind(c.Admin, c.AdminToken); err != nil {
			return err
		}
	} else if err := admin.CheckBind(c.AdminListener.Addr().String(), c.AdminToken); err != nil {
		return err
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 15 * time.Second
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 64 << 20
	} else if c.MaxBodyBytes < 0 {
		c.MaxBodyBytes = 0
	}
	if c.ReportInterval <= 0 {
		c.ReportInterval = 5 * time.Second
	}
	return c.checkConnLimits()
}

func addrOf(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

func loadCerts(pairs []CertPair) ([]tls.Certificate, error) {
	var out []tls.Certificate
	for _, p := range pairs {
		c, err := tls.LoadX509KeyPair(p.Cert, p.Key)
		if err != nil {
			return nil, fmt.Errorf("lbproxy: certificate %s / key %s: %w", p.Cert, p.Key, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// source reports where the configuration comes from.
type source struct {
	srv     *server.Server
	log     *slog.Logger
	watcher *configwatch.Watcher
	etcd    *etcdclient.Client
	file    string
	now     func() time.Time
	// fileState is the file source's status (file and BFE modes).
	fileState *filesource.State
}

// Status is the document of GET /v1/status.
type Status struct {
	AppliedVersion  uint64            `json:"applied_version"`
	AppliedHash     string            `json:"applied_hash,omitempty"`
	AppliedAt       time.Time         `json:"applied_at,omitzero"`
	Source          string            `json:"source"`
	File            string            `json:"file,omitempty"`
	RejectedVersion uint64            `json:"rejected_version,omitempty"`
	RejectedReason  string            `json:"rejected_reason,omitempty"`
	LatestVersion   uint64            `json:"latest_version,omitempty"`
	AppliedLineage  string            `json:"applied_lineage,omitempty"`
	PointerVersion  uint64            `json:"pointer_version,omitempty"`
	Ahead           bool              `json:"ahead,omitempty"`
	LineageChanges  uint64            `json:"lineage_changes,omitempty"`
	EtcdConnected   *bool             `json:"etcd_connected,omitempty"`
	StaleSeconds    float64           `json:"stale_seconds"`
	LastSync        time.Time         `json:"last_sync,omitzero"`
	WatchRestarts   map[string]uint64 `json:"watch_restarts,omitempty"`
	// Etcd is the etcd connection state and last error (etcd source only).
	Etcd *etcdclient.State `json:"etcd,omitempty"`
}

func (s *source) adminStatus() Status {
	st := Status{AppliedVersion: s.srv.Version()}
	if snap := s.srv.Snapshot(); snap != nil {
		st.AppliedHash = snap.Meta.Hash
	}
	if s.watcher == nil {
		st.Source, st.File = filesource.SourceFile, s.file
		if s.fileState != nil {
			// One consistent copy: the server's version moves inside Apply,
			// before the file state clears an older rejection.
			fs := s.fileState.Status()
			if fs.AppliedVersion != 0 {
				st.AppliedVersion, st.AppliedHash = fs.AppliedVersion, fs.AppliedHash
			}
			st.AppliedAt, st.RejectedVersion, st.RejectedReason = fs.AppliedAt, fs.RejectedVersion, fs.RejectedReason
			st.LatestVersion, st.LastSync = fs.LatestVersion, fs.LastSync
		}
		return st
	}
	ws := s.watcher.Status()
	connected := ws.Connected
	st.AppliedHash, st.AppliedAt, st.Source = ws.AppliedHash, ws.AppliedAt, ws.Source
	st.RejectedVersion, st.RejectedReason, st.LatestVersion = ws.RejectedVersion, ws.RejectedReason, ws.LatestVersion
	st.AppliedLineage, st.PointerVersion, st.Ahead, st.LineageChanges = ws.AppliedLineage, ws.PointerVersion, ws.Ahead, ws.LineageChanges
	st.EtcdConnected, st.LastSync, st.WatchRestarts = &connected, ws.LastSync, ws.WatchRestarts
	st.StaleSeconds = ws.StaleSeconds(s.now())
	es := s.etcd.State()
	st.Etcd = &es
	return st
}

func (s *source) proxyStatus(cfg Config, started time.Time) report.ProxyStatus {
	ws := s.watcher.Status()
	now := s.now()
	return report.ProxyStatus{
		ProxyCluster: cfg.ProxyCluster, ID: cfg.ID,
		AppliedVersion: ws.AppliedVersion, AppliedHash: ws.AppliedHash, AppliedAt: ws.AppliedAt,
		RejectedVersion: ws.RejectedVersion, RejectedReason: ws.RejectedReason, LatestVersion: ws.LatestVersion,
		AppliedLineage: ws.AppliedLineage, PointerLineage: ws.PointerLineage, PointerVersion: ws.PointerVersion,
		Rollout: ws.Rollout, RolloutStage: ws.Stage, InStage: ws.InStage,
		Ahead: ws.Ahead, LineageChanges: ws.LineageChanges, PreviousLineage: ws.PreviousLineage,
		WatchLagSeconds: ws.StaleSeconds(now), EtcdConnected: ws.Connected, Source: ws.Source,
		BinaryVersion: cfg.Version, StartedAt: started, UpdatedAt: now,
	}
}

// Command lbproxy is Sluice's proxy: it serves client traffic with the
// configuration of its proxy cluster, read from etcd (--etcd) or from files
// (--config, --bfe-conf). Every flag also reads a SLUICE_* environment
// variable. Run "lbproxy --help".
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sluicelb/sluice/api/bfe"
	"github.com/sluicelb/sluice/api/etcdclient"
	"github.com/sluicelb/sluice/api/logrepeat"
	"github.com/sluicelb/sluice/proxy/internal/connlimit"
	"github.com/sluicelb/sluice/proxy/internal/memrelease"
	"github.com/sluicelb/sluice/proxy/internal/telemetry"
	"github.com/sluicelb/sluice/proxy/lbproxy"
	"github.com/sluicelb/sluice/proxy/server"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if err := newApp().Run(os.Args); err != nil {
		// Errors from lbproxy.Run already start with "lbproxy:".
		msg := err.Error()
		if !strings.HasPrefix(msg, "lbproxy:") {
			msg = "lbproxy: " + msg
		}
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(1)
	}
}

func env(name string) []string { return []string{"SLUICE_" + name} }

func newApp() *cli.App {
	return &cli.App{
		Name:    "lbproxy",
		Usage:   "Sluice's L7 traffic balancer (data plane)",
		Version: version,
		Flags: append(etcdclient.Flags(""), []cli.Flag{
			&cli.StringFlag{Name: "proxy-cluster", Usage: "proxy cluster whose snapshot is served (e.g. BFE1); required with --etcd-endpoints, with --config/--bfe-conf the file's own by default", EnvVars: env("PROXY_CLUSTER")},
			&cli.StringFlag{Name: "id", Usage: "this proxy's unique id in its proxy cluster (default: host name)", EnvVars: env("ID")},
			&cli.StringFlag{Name: "config", Usage: "snapshot or desired-state file instead of etcd (reloaded on change and SIGHUP)", EnvVars: env("CONFIG")},
			&cli.StringFlag{Name: "bfe-conf", Usage: "BFE configuration directory instead of etcd (reloaded on change and SIGHUP)", EnvVars: env("BFE_CONF")},
			&cli.StringFlag{Name: "listen", Usage: "plain HTTP address (default 127.0.0.1:8080; BFE mode: bfe.conf HttpPort)", EnvVars: env("LISTEN")},
			&cli.StringFlag{Name: "listen-tls", Usage: "HTTPS address (HTTP/2 + HTTP/1.1)", EnvVars: env("LISTEN_TLS")},
			&cli.StringSliceFlag{Name: "tls-cert", Usage: "certificate file (repeat with --tls-key for SNI)", EnvVars: env("TLS_CERT")},
			&cli.StringSliceFlag{Name: "tls-key", Usage: "key file, paired in order with --tls-cert", EnvVars: env("TLS_KEY")},
			&cli.StringFlag{Name: "admin", Usage: "admin API address (default 127.0.0.1:9090; BFE mode: bfe.conf MonitorPort)", EnvVars: env("ADMIN")},
			&cli.StringFlag{Name: "admin-token", Usage: "bearer token of the admin API (required off loopback)", EnvVars: env("ADMIN_TOKEN")},
			&cli.StringFlag{Name: "cache-dir", Usage: "directory of the last good snapshot (default " + lbproxy.DefaultCacheDir() + ")", EnvVars: env("CACHE_DIR")},
			&cli.StringSliceFlag{Name: "trusted-proxy", Usage: "CIDR whose X-Forwarded-For is believed (repeatable)", EnvVars: env("TRUSTED_PROXY")},
			&cli.StringFlag{Name: "sticky-secret-file", Usage: "file holding the HMAC key of sticky cookies (default: random per process)", EnvVars: env("STICKY_SECRET_FILE")},
			&cli.StringFlag{Name: "access-log", Value: "stdout", Usage: "access log: stdout, off or a file path", EnvVars: env("ACCESS_LOG")},
			&cli.IntFlag{Name: "access-log-buffer", Usage: "bytes of access-log lines collected before one write (nginx's buffer=; 0 writes each line at once)", EnvVars: env("ACCESS_LOG_BUFFER")},
			&cli.DurationFlag{Name: "access-log-flush", Value: time.Second, Usage: "longest time a line waits in the access-log buffer (nginx's flush=)", EnvVars: env("ACCESS_LOG_FLUSH")},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", EnvVars: env("LOG_LEVEL")},
			&cli.StringFlag{Name: "trace-exporter", Usage: "none, stdout or otlp (default: otlp when OTEL_EXPORTER_OTLP_ENDPOINT is set)", EnvVars: env("TRACE_EXPORTER")},
			&cli.StringFlag{Name: "trace-file", Usage: "with --trace-exporter stdout: append the spans to this file, not to stdout (keeps them out of the log)", EnvVars: env("TRACE_FILE")},
			&cli.Float64Flag{Name: "trace-sample", Value: 0.01, Usage: "share of root requests traced, 0..1 (parent-based)", EnvVars: env("TRACE_SAMPLE")},
			&cli.StringFlag{Name: "upstream-client", Value: "fast", Usage: "fast (purpose-built HTTP/1.1 client) or std (httputil.ReverseProxy + http.Transport)", EnvVars: env("UPSTREAM_CLIENT")},
			&cli.StringFlag{Name: "front", Usage: "server of the plain HTTP listener: fasthttp (default; one system call and one goroutine wake-up less per request) or std (net/http; the default with --upstream-client std). (--tls-front chooses for --listen-tls)", EnvVars: env("FRONT")},
			&cli.StringFlag{Name: "tls-front", Usage: "server of HTTP/1.1 on --listen-tls (HTTP/2, ALPN h2: --h2-server): fasthttp (default; less CPU per request, idle connections parked: 5 KiB of heap and 2 KiB of stack each) or std (net/http; 14 KiB of heap and 8 KiB of stack per idle connection; the default with --upstream-client std); docs/BENCHMARKS.md", EnvVars: env("TLS_FRONT")},
			&cli.BoolFlag{Name: "pprof", Usage: "serve net/http/pprof on the admin API under /debug/pprof/ (behind --admin-token)", EnvVars: env("PPROF")},
			&cli.DurationFlag{Name: "report-interval", Value: 5e9, Usage: "how often the status and demand reports are rewritten in etcd (staged rollouts judge traffic from them)", EnvVars: env("REPORT_INTERVAL")},
			&cli.IntFlag{Name: "max-instances", Usage: "refuse a snapshot with more backend instances than this (the proxy's memory budget; it keeps the last good one and reports the rejection); 0: no limit", EnvVars: env("MAX_INSTANCES")},
			&cli.IntFlag{Name: "max-client-conns", Value: defaultMaxClientConns(), Usage: "open client connections at most (HTTP and HTTPS listeners together): at the limit the connection idle the longest is closed to admit a new one, and with none idle the new one is refused; 0: no limit. Default: (open-file limit − 256) / 2, two descriptors per proxied connection", EnvVars: env("MAX_CLIENT_CONNS")},
			&cli.IntFlag{Name: "max-client-conns-per-ip", Usage: "open client connections of one peer IP (the socket's, not X-Forwarded-For) at most: a new one over it is refused; 0: no limit", EnvVars: env("MAX_CLIENT_CONNS_PER_IP")},
			&cli.DurationFlag{Name: "watch-stall-timeout", Value: 30e9, Usage: "restart the etcd snapshot watch when no event and no progress notification arrived for this long", EnvVars: env("WATCH_STALL_TIMEOUT")},
			&cli.DurationFlag{Name: "shutdown-timeout", Value: 15e9, Usage: "time given to in-flight requests on SIGTERM", EnvVars: env("SHUTDOWN_TIMEOUT")},
			&cli.DurationFlag{Name: "read-header-timeout", Value: 10e9, Usage: "time to read request headers (slowloris guard)", EnvVars: env("READ_HEADER_TIMEOUT")},
			&cli.DurationFlag{Name: "idle-timeout", Value: 90e9, Usage: "idle client keep-alive timeout", EnvVars: env("IDLE_TIMEOUT")},
			&cli.IntFlag{Name: "max-header-bytes", Value: 64 << 10, Usage: "request header limit (431 above)", EnvVars: env("MAX_HEADER_BYTES")},
			&cli.StringFlag{Name: "h2-server", Value: server.H2ServerSluice, Usage: "server of HTTP/2 (ALPN h2) on --listen-tls: sluice (the default; our own: one goroutine per connection, no frame buffer held by an idle connection, 17 KiB per idle connection; docs/ARCHITECTURE.md) or xnet (net/http's: 37 KiB)", EnvVars: env("H2_SERVER")},
			&cli.IntFlag{Name: "h2-max-premature-resets", Value: 100, Usage: "close an HTTP/2 connection (GOAWAY) whose client reset more streams than this before their answers, and more than half its streams, within 10 s (rapid reset); 0: no limit", EnvVars: env("H2_MAX_PREMATURE_RESETS")},
			&cli.Int64Flag{Name: "max-body-bytes", Value: 64 << 20, Usage: "request body limit (413 above); -1 for none", EnvVars: env("MAX_BODY_BYTES")},
			&cli.IntFlag{Name: "max-probes", Value: 64, Usage: "active health probes in flight at most; the others wait for a slot (their timeout not started)", EnvVars: env("MAX_PROBES")},
			&cli.DurationFlag{Name: "memory-release-interval", Value: 10e9, Usage: "how often the proxy checks whether it is quiet (allocating under 1/16 of its free heap per interval) with at least 16 MiB of free Go heap, and then returns that heap to the OS (debug.FreeOSMemory: after a burst of connections, idle ones cost their live memory only); 0: never", EnvVars: env("MEMORY_RELEASE_INTERVAL")},
			&cli.IntFlag{Name: "gc-percent", Value: 400, Usage: "Go GC target (debug.SetGCPercent): the proxy's live heap is small, so collecting at 5x it instead of 2x saves CPU per request; 0 keeps GOGC", EnvVars: env("GC_PERCENT")},
		}...),
		Commands: []*cli.Command{{
			Name:  "version",
			Usage: "print the version",
			Flags: []cli.Flag{},
			Action: func(c *cli.Context) error {
				fmt.Fprintln(c.App.Writer, "lbproxy", version)
				return nil
			},
		}},
		Action: run,
	}
}

func run(c *cli.Context) error {
	if len(etcdclient.FromFlags(c).Endpoints) > 0 && c.String("proxy-cluster") == "" {
		return fmt.Errorf("--proxy-cluster (or SLUICE_PROXY_CLUSTER) is required with --etcd-endpoints: the proxy cluster whose snapshot is served, e.g. BFE1")
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", c.String("log-level"))
	}
	logger := slog.New(logrepeat.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}), 0)) // identical warnings/errors: once a minute, with a count
	switch p := c.Int("gc-percent"); {
	case p < 0:
		return fmt.Errorf("--gc-percent %d: want 0 (keep GOGC) or a percentage above 0", p)
	case p > 0:
		debug.SetGCPercent(p)
	}
	if d := c.Duration("memory-release-interval"); d < 0 {
		return fmt.Errorf("--memory-release-interval %s: want 0 (never) or a positive duration", d)
	}
	if b := c.Int("access-log-buffer"); b < 0 {
		return fmt.Errorf("--access-log-buffer %d: want 0 (write each line at once) or a size in bytes", b)
	}
	if f := c.Duration("access-log-flush"); f <= 0 {
		return fmt.Errorf("--access-log-flush %s: want a positive duration", f)
	}
	if d := c.Duration("report-interval"); d < 100*time.Millisecond {
		return fmt.Errorf("--report-interval %s: want at least 100ms", d)
	}
	if n := c.Int("max-instances"); n < 0 {
		return fmt.Errorf("--max-instances %d: want 0 (no limit) or a positive count", n)
	}
	if v := c.String("h2-server"); v != server.H2ServerXNet && v != server.H2ServerSluice {
		return fmt.Errorf("--h2-server %q: want %q or %q", v, server.H2ServerSluice, server.H2ServerXNet)
	}
	if n := c.Int("h2-max-premature-resets"); n < 0 {
		return fmt.Errorf("--h2-max-premature-resets %d: want 0 (no limit) or a positive count", n)
	}
	maxConns, err := clientConnLimits(c)
	if err != nil {
		return err
	}
	if d := c.Duration("watch-stall-timeout"); d <= 0 {
		return fmt.Errorf("--watch-stall-timeout %s: want a positive duration", d)
	}
	cfg := lbproxy.Config{
		ProxyCluster: c.String("proxy-cluster"), ID: c.String("id"),
		Prefix: c.String("prefix"), ConfigFile: c.String("config"), BFEConfDir: c.String("bfe-conf"),
		Listen: c.String("listen"), ListenTLS: c.String("listen-tls"), Admin: c.String("admin"),
		AdminToken: c.String("admin-token"), CacheDir: c.String("cache-dir"),
		TrustedProxies: c.StringSlice("trusted-proxy"), Logger: logger,
		TraceExporter: c.String("trace-exporter"), TraceSample: c.Float64("trace-sample"),
		ShutdownTimeout: c.Duration("shutdown-timeout"), MaxBodyBytes: c.Int64("max-body-bytes"), MaxProbes: c.Int("max-probes"),
		UpstreamClient: c.String("upstream-client"), Pprof: c.Bool("pprof"), FrontKind: c.String("front"), TLSFrontKind: c.String("tls-front"),
		Front: server.FrontOptions{
			ReadHeaderTimeout: c.Duration("read-header-timeout"), IdleTimeout: c.Duration("idle-timeout"),
			MaxHeaderBytes: c.Int("max-header-bytes"), H2MaxPrematureResets: c.Int("h2-max-premature-resets"),
			H2Server: c.String("h2-server"),
		},
		AccessLogBuffer: c.Int("access-log-buffer"), AccessLogFlush: c.Duration("access-log-flush"),
		StallTimeout:   c.Duration("watch-stall-timeout"),
		ReportInterval: c.Duration("report-interval"),
		MaxInstances:   c.Int("max-instances"),
		MaxClientConns: maxConns, MaxClientConnsPerIP: c.Int("max-client-conns-per-ip"),
		Version: version,
	}
	if e := etcdclient.FromFlags(c); len(e.Endpoints) > 0 {
		cfg.Etcd.Endpoints = e.Endpoints
		cfg.Etcd.CACert, cfg.Etcd.Cert, cfg.Etcd.Key = e.CACert, e.Cert, e.Key
		cfg.Etcd.Username, cfg.Etcd.Password = e.Username, e.Password
		cfg.Etcd.DialTimeout = e.DialTimeout
	}
	if cfg.ID == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--id not given and no host name: %w", err)
		}
		cfg.ID = sanitizeID(h)
	}
	certs, keys := c.StringSlice("tls-cert"), c.StringSlice("tls-key")
	if len(certs) != len(keys) {
		return fmt.Errorf("--tls-cert given %d times and --tls-key %d times: give them in pairs", len(certs), len(keys))
	}
	for i := range certs {
		cfg.Certs = append(cfg.Certs, lbproxy.CertPair{Cert: certs[i], Key: keys[i]})
	}
	if f := c.String("sticky-secret-file"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("--sticky-secret-file: %w", err)
		}
		if len(strings.TrimSpace(string(b))) < 16 {
			return fmt.Errorf("--sticky-secret-file %s: want at least 16 bytes of secret", f)
		}
		cfg.StickySecret = []byte(strings.TrimSpace(string(b)))
	}
	if f := c.String("trace-file"); f != "" {
		if cfg.TraceExporter != telemetry.ExporterStdout {
			return fmt.Errorf("--trace-file %s needs --trace-exporter stdout (it is %q)", f, cfg.TraceExporter)
		}
		tf, err := os.OpenFile(f, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("--trace-file: %w", err)
		}
		defer tf.Close()
		cfg.TraceOutput = tf
	}
	switch a := c.String("access-log"); a {
	case "off", "":
	case "stdout", "-":
		cfg.AccessLog = os.Stdout
	default:
		f, err := os.OpenFile(a, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("--access-log: %w", err)
		}
		defer f.Close()
		cfg.AccessLog = f
	}
	if cfg.BFEConfDir != "" && (cfg.Listen == "" || cfg.Admin == "") {
		sc, err := bfe.ReadServerConf(cfg.BFEConfDir)
		if err != nil {
			return fmt.Errorf("--bfe-conf: %w", err)
		}
		if cfg.Listen == "" && sc.HTTPPort > 0 {
			cfg.Listen = ":" + strconv.Itoa(sc.HTTPPort)
		}
		if cfg.Admin == "" && sc.MonitorPort > 0 {
			cfg.Admin = "127.0.0.1:" + strconv.Itoa(sc.MonitorPort)
		}
	}
	if cfg.Listen == "" && cfg.ListenTLS == "" {
		cfg.Listen = "127.0.0.1:8080"
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if d := c.Duration("memory-release-interval"); d > 0 {
		r := memrelease.New(16 << 20)
		release := r.Release
		r.Release = func() {
			free := memrelease.ReadRuntime().Free
			release()
			logger.Info("quiet: free Go heap returned to the OS", "bytes", free, "left_free", memrelease.ReadRuntime().Free)
		}
		go r.Run(ctx, d) // ends with ctx (stop)
	}
	if err := lbproxy.Run(ctx, cfg); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// sanitizeID turns a host name into a valid key name.
func sanitizeID(h string) string {
	var b strings.Builder
	for _, r := range h {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-._")
}

// defaultMaxClientConns is --max-client-conns's default: derived from the
// open-file limit, none when it cannot be read.
func defaultMaxClientConns() int {
	if fds, ok := connlimit.FDLimit(); ok {
		return connlimit.DefaultMax(fds)
	}
	return 0
}

// clientConnLimits checks the connection limit flags and answers
// --max-client-conns as lbproxy.Config.MaxClientConns (-1: no limit).
func clientConnLimits(c *cli.Context) (int, error) {
	n, perIP := c.Int("max-client-conns"), c.Int("max-client-conns-per-ip")
	if n < 0 {
		return 0, fmt.Errorf("--max-client-conns %d: want 0 (no limit) or a positive count", n)
	}
	if perIP < 0 {
		return 0, fmt.Errorf("--max-client-conns-per-ip %d: want 0 (no limit) or a positive count", perIP)
	}
	if n == 0 {
		return -1, nil
	}
	return n, nil
}

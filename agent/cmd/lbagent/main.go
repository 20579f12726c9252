// Command lbagent runs beside one backend instance: it registers the
// instance in etcd under a lease, probes it, reports health and load, and
// drains on SIGTERM.
//
//	lbagent --etcd http://127.0.0.1:2379 --cluster demo-main --subcluster SC1 \
//	        --idc IDC1 --addr 10.0.0.5:8080 --weight 10 [--config agent.yaml]
//	lbagent check --addr 10.0.0.5:8080 --probe-path /healthz   # exit 0 healthy, 1 unhealthy
//	lbagent drain [--admin 127.0.0.1:9102] [--wait]            # POST /drain to the running agent
//	lbagent version
//
// Every flag can also come from a SLUICE_* environment variable (--probe-path
// → SLUICE_PROBE_PATH) or from --config FILE (YAML or JSON, keys are the flag
// names, strict: unknown keys and wrong types are errors). Precedence:
// flag > environment > file > default.
//
// Drain: the first SIGTERM (or SIGINT, or `lbagent drain`) writes state
// "draining" at once, keeps the registration for at least --drain-min, then
// until the backend's in-flight count (from --metrics-url) reads 0 or
// --drain-timeout passes; then the lease is revoked and lbagent exits 0.
// Without --metrics-url the drain ends after --drain-min. A second SIGTERM
// during a drain stops at once (lease revoked, bounded by a 2s deadline)
// and exits 1, so a supervisor can tell an interrupted drain.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sluicelb/sluice/agent/lbagent"
	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/etcdclient"
	"github.com/sluicelb/sluice/api/logrepeat"
	"github.com/sluicelb/sluice/api/tlsfiles"
	"github.com/sluicelb/sluice/probe"
)

func main() {
	os.Exit(run(context.Background(), os.Args, os.Stdout, os.Stderr))
}

// run executes the command line and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	err := app.RunContext(ctx, args)
	if err == nil {
		return 0
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		if msg := ec.Error(); msg != "" {
			fmt.Fprintln(stderr, msg)
		}
		return ec.ExitCode()
	}
	fmt.Fprintln(stderr, "lbagent:", err)
	return 2
}

func env(name string) []string {
	return []string{"SLUICE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))}
}

func probeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "config", Usage: "YAML or JSON file with flag values (keys are flag names)", EnvVars: env("config")},
		&cli.StringFlag{Name: "addr", Usage: "ip:port of the backend (probed and registered)", EnvVars: env("addr")},
		&cli.StringFlag{Name: "probe-scheme", Value: "http", Usage: "http, https, tcp or tls", EnvVars: env("probe-scheme")},
		&cli.StringFlag{Name: "probe-path", Value: probe.DefaultPath, Usage: "path of http(s) probes", EnvVars: env("probe-path")},
		&cli.StringFlag{Name: "probe-host", Usage: "Host header and TLS server name (default: the address)", EnvVars: env("probe-host")},
		&cli.StringFlag{Name: "probe-status", Value: "2xx", Usage: `expected status: 200, 2xx, "2xx|30x", 200-299`, EnvVars: env("probe-status")},
		&cli.StringFlag{Name: "probe-body", Usage: "substring the response body must contain", EnvVars: env("probe-body")},
		&cli.StringFlag{Name: "probe-cacert", Usage: "CA bundle (PEM) for https/tls probes", EnvVars: env("probe-cacert")},
		&cli.StringFlag{Name: "probe-cert", Usage: "client certificate (PEM) for https/tls probes", EnvVars: env("probe-cert")},
		&cli.StringFlag{Name: "probe-key", Usage: "client key (PEM) for https/tls probes", EnvVars: env("probe-key")},
		&cli.BoolFlag{Name: "probe-insecure", Usage: "skip certificate verification of https/tls probes", EnvVars: env("probe-insecure")},
		&cli.DurationFlag{Name: "probe-timeout", Value: lbagent.DefaultProbeTimeout, Usage: "timeout of one probe", EnvVars: env("probe-timeout")},
	}
}

func agentFlags() []cli.Flag {
	return append(append(probeFlags(), etcdclient.Flags("")...),
		&cli.StringFlag{Name: "cluster", Usage: "backend cluster", EnvVars: env("cluster")},
		&cli.StringFlag{Name: "subcluster", Usage: "sub-cluster", EnvVars: env("subcluster")},
		&cli.StringFlag{Name: "idc", Usage: "IDC (datacenter) of the instance", EnvVars: env("idc")},
		&cli.IntFlag{Name: "weight", Value: 1, Usage: "instance weight", EnvVars: env("weight")},
		&cli.IntFlag{Name: "capacity-rps", Usage: "declared capacity in requests/s", EnvVars: env("capacity-rps")},
		&cli.IntFlag{Name: "capacity-per-weight", Usage: "derive capacity as weight × this (requests/s) when --capacity-rps is 0", EnvVars: env("capacity-per-weight")},
		&cli.StringSliceFlag{Name: "label", Usage: "label k=v (repeatable)", EnvVars: env("label")},
		&cli.DurationFlag{Name: "probe-interval", Value: lbagent.DefaultProbeInterval, Usage: "time between probes", EnvVars: env("probe-interval")},
		&cli.IntFlag{Name: "rise", Value: lbagent.DefaultRise, Usage: "consecutive successes to become healthy", EnvVars: env("rise")},
		&cli.IntFlag{Name: "fall", Value: lbagent.DefaultFall, Usage: "consecutive failures to become unhealthy", EnvVars: env("fall")},
		&cli.StringFlag{Name: "metrics-url", Usage: `backend metrics endpoint (Prometheus text or JSON {"in_flight":N,"requests_total":N})`, EnvVars: env("metrics-url")},
		&cli.StringFlag{Name: "metrics-in-flight", Value: "http_requests_in_flight", Usage: "Prometheus in-flight gauge name", EnvVars: env("metrics-in-flight")},
		&cli.StringFlag{Name: "metrics-requests", Value: "http_requests_total", Usage: "Prometheus request counter name", EnvVars: env("metrics-requests")},
		&cli.DurationFlag{Name: "report-interval", Value: lbagent.DefaultReportInterval, Usage: "least time between load-only writes", EnvVars: env("report-interval")},
		&cli.DurationFlag{Name: "min-write-gap", Value: lbagent.DefaultMinWriteGap, Usage: "least time between health-state writes", EnvVars: env("min-write-gap")},
		&cli.DurationFlag{Name: "lease-ttl", Value: lbagent.DefaultLeaseTTL, Usage: "registration lease TTL", EnvVars: env("lease-ttl")},
		&cli.DurationFlag{Name: "drain-timeout", Value: lbagent.DefaultDrainTimeout, Usage: "longest drain", EnvVars: env("drain-timeout")},
		&cli.DurationFlag{Name: "drain-min", Value: lbagent.DefaultDrainMin, Usage: "least time registered as draining", EnvVars: env("drain-min")},
		&cli.StringFlag{Name: "admin", Value: lbagent.DefaultAdmin, Usage: `admin HTTP address ("" disables)`, EnvVars: env("admin")},
		&cli.StringFlag{Name: "admin-token", Usage: "bearer token for the admin API (required off loopback)", EnvVars: env("admin-token")},
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", EnvVars: env("log-level")},
	)
}

func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:           "lbagent",
		Usage:          "register a backend in Sluice, probe it, report health and load, drain on SIGTERM",
		Version:        lbagent.Version, // --version, as lbproxy and lbctl have
		Writer:         stdout,
		ErrWriter:      stderr,
		Flags:          agentFlags(),
		Action:         runAgent,
		ExitErrHandler: func(*cli.Context, error) {}, // run() maps errors to exit codes
		Commands: []*cli.Command{
			{
				Name:   "check",
				Usage:  "run one probe and exit 0 (healthy) or 1 (unhealthy, reason on stderr)",
				Flags:  probeFlags(),
				Action: runCheck,
			},
			{
				Name:  "drain",
				Usage: "ask the running agent to drain (POST /drain on its admin API)",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "admin", Value: lbagent.DefaultAdmin, Usage: "admin address of the running agent", EnvVars: env("admin")},
					&cli.StringFlag{Name: "admin-token", EnvVars: env("admin-token")},
					&cli.BoolFlag{Name: "wait", Usage: "wait until the agent has exited (its admin API refuses connections: it closes after the lease is revoked)"},
					&cli.DurationFlag{Name: "timeout", Value: 2 * time.Minute, Usage: "longest --wait"},
				},
				Action: runDrain,
			},
			{
				Name:  "version",
				Usage: "print the version",
				Action: func(c *cli.Context) error {
					fmt.Fprintln(c.App.Writer, "lbagent", lbagent.Version)
					return nil
				},
			},
		},
	}
}

// applyConfigFile sets every flag that was not given on the command line or
// in the environment from the --config file.
func applyConfigFile(c *cli.Context) error {
	path := c.String("config")
	if path == "" {
		return nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return cli.Exit(fmt.Sprintf("config: %v", err), 2)
	}
	var f fileConfig
	if err := codec.Unmarshal(raw, &f); err != nil {
		return cli.Exit(fmt.Sprintf("config %s: %v", path, err), 2)
	}
	for name, vals := range f.values() {
		if c.IsSet(name) || !hasFlag(c, name) {
			continue
		}
		for _, v := range vals {
			if err := c.Set(name, v); err != nil {
				return cli.Exit(fmt.Sprintf("config %s: %s: %v", path, name, err), 2)
			}
		}
	}
	return nil
}

func hasFlag(c *cli.Context, name string) bool {
	flags := c.App.Flags
	if c.Command != nil && len(c.Command.Flags) > 0 {
		flags = c.Command.Flags
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return true
			}
		}
	}
	return false
}

func probeTarget(c *cli.Context) (probe.Target, error) {
	addr, err := netip.ParseAddrPort(c.String("addr"))
	if err != nil {
		return probe.Target{}, fmt.Errorf("addr: %q is not ip:port", c.String("addr"))
	}
	cfg := lbagent.Config{Addr: addr, Probe: probePolicy(c), ProbeTimeout: c.Duration("probe-timeout")}
	if cfg.ProbeTLS, err = tlsConfig(c.String("probe-cacert"), c.String("probe-cert"), c.String("probe-key")); err != nil {
		return probe.Target{}, fmt.Errorf("probe tls: %w", err)
	}
	return cfg.Target()
}

func probePolicy(c *cli.Context) config.Probe {
	return config.Probe{
		Scheme: c.String("probe-scheme"), Path: c.String("probe-path"), Host: c.String("probe-host"),
		Status: c.String("probe-status"), Body: c.String("probe-body"), InsecureSkipVerify: c.Bool("probe-insecure"),
	}
}

func runCheck(c *cli.Context) error {
	if err := applyConfigFile(c); err != nil {
		return err
	}
	t, err := probeTarget(c)
	if err != nil {
		return cli.Exit("lbagent check: "+err.Error(), 2)
	}
	if err := probe.Check(c.Context, t); err != nil {
		return cli.Exit("unhealthy: "+err.Error(), 1)
	}
	fmt.Fprintln(c.App.Writer, "healthy")
	return nil
}

func runDrain(c *cli.Context) error {
	url := "http://" + c.String("admin")
	req, err := http.NewRequestWithContext(c.Context, http.MethodPost, url+"/drain", nil)
	if err != nil {
		return cli.Exit("lbagent drain: "+err.Error(), 2)
	}
	if tok := c.String("admin-token"); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return cli.Exit("lbagent drain: "+err.Error(), 1)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return cli.Exit(fmt.Sprintf("lbagent drain: %s answered %d", url, resp.StatusCode), 1)
	}
	fmt.Fprintln(c.App.Writer, "draining")
	if !c.Bool("wait") {
		return nil
	}
	deadline := time.Now().Add(c.Duration("timeout"))
	var last error // the last failed look, when it did not show the agent gone
	for time.Now().Before(deadline) {
		r, err := client.Get(url + "/healthz")
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			// The admin API closes after the lease is revoked: the agent
			// exited. Any other failure (a timeout, a reset) says nothing.
			fmt.Fprintln(c.App.Writer, "drained")
			return nil
		case err != nil:
			last = err
		default:
			last = nil
			r.Body.Close()
		}
		select {
		case <-c.Context.Done():
			return cli.Exit("lbagent drain: interrupted", 1)
		case <-time.After(200 * time.Millisecond):
		}
	}
	if last != nil {
		return cli.Exit("lbagent drain: agent not known to have exited after --timeout: its admin API neither answers nor refuses: "+last.Error(), 1)
	}
	return cli.Exit("lbagent drain: agent still running after --timeout", 1)
}

func runAgent(c *cli.Context) error {
	if c.Args().Present() {
		return cli.Exit(fmt.Sprintf("lbagent: unknown command %q", c.Args().First()), 2)
	}
	if err := applyConfigFile(c); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return cli.Exit(fmt.Sprintf("log-level: %q is not debug, info, warn or error", c.String("log-level")), 2)
	}
	log := slog.New(logrepeat.New(slog.NewJSONHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: level}), 0))
	cfg, err := agentConfig(c, log)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	a, err := lbagent.New(cfg)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	interrupted := make(chan struct{})
	done := make(chan struct{})
	go func() {
		n := 0
		for {
			select {
			case <-done:
				return
			case s := <-sigs:
				n++
				if n == 1 {
					log.Info("signal: draining", "signal", s.String())
					a.Drain(s.String())
					continue
				}
				log.Warn("second signal: stopping without waiting for the drain", "signal", s.String())
				close(interrupted)
				cancel()
				return
			}
		}
	}()
	err = a.Run(ctx)
	close(done)
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	select {
	case <-interrupted:
		return cli.Exit("", 1)
	default:
		return nil
	}
}

func agentConfig(c *cli.Context, log *slog.Logger) (lbagent.Config, error) {
	var cfg lbagent.Config
	addr, err := netip.ParseAddrPort(c.String("addr"))
	if err != nil {
		return cfg, fmt.Errorf("addr: %q is not ip:port (the backend's address)", c.String("addr"))
	}
	labels := map[string]string{}
	for _, kv := range c.StringSlice("label") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return cfg, fmt.Errorf("label: %q is not k=v", kv)
		}
		labels[k] = v
	}
	if len(labels) == 0 {
		labels = nil
	}
	ec := etcdclient.FromFlags(c)
	etcdTLS, err := tlsConfig(ec.CACert, ec.Cert, ec.Key)
	if err != nil {
		return cfg, fmt.Errorf("etcd tls: %w", err)
	}
	probeTLS, err := tlsConfig(c.String("probe-cacert"), c.String("probe-cert"), c.String("probe-key"))
	if err != nil {
		return cfg, fmt.Errorf("probe tls: %w", err)
	}
	cfg = lbagent.Config{
		Endpoints: ec.Endpoints, EtcdTLS: etcdTLS, EtcdUsername: ec.Username, EtcdPassword: ec.Password, EtcdDialTimeout: ec.DialTimeout,
		Prefix: c.String("prefix"), Cluster: c.String("cluster"), SubCluster: c.String("subcluster"), IDC: c.String("idc"),
		Addr: addr, Weight: c.Int("weight"), CapacityRPS: c.Int("capacity-rps"), CapacityPerWeight: c.Int("capacity-per-weight"),
		Labels: labels, Probe: probePolicy(c), ProbeTLS: probeTLS,
		ProbeInterval: c.Duration("probe-interval"), ProbeTimeout: c.Duration("probe-timeout"),
		Rise: c.Int("rise"), Fall: c.Int("fall"),
		MetricsURL: c.String("metrics-url"), InFlightMetric: c.String("metrics-in-flight"), RequestsMetric: c.String("metrics-requests"),
		ReportInterval: c.Duration("report-interval"), MinWriteGap: c.Duration("min-write-gap"), LeaseTTL: c.Duration("lease-ttl"),
		DrainTimeout: c.Duration("drain-timeout"), DrainMin: c.Duration("drain-min"),
		Admin: c.String("admin"), AdminToken: c.String("admin-token"), Logger: log,
	}
	if c.Int("weight") < 1 {
		return cfg, fmt.Errorf("weight: %d must be at least 1", c.Int("weight"))
	}
	return cfg, nil
}

// tlsConfig builds a client TLS config from PEM files; nil when none is given.
func tlsConfig(ca, cert, key string) (*tls.Config, error) { return tlsfiles.Client(ca, cert, key) }

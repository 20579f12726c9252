// Package lbagent is the agent that runs beside one backend instance: it
// registers the instance in etcd under a lease, probes the backend, reports
// health and load, and drains cleanly. The lbagent binary, the local dev
// fleet and the integration tests all start it through Run / New.
package lbagent

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/probe"
)

// Version is the agent version reported in registrations; set at build
// time with -ldflags "-X github.com/sluicelb/sluice/agent/lbagent.Version=v1.2.3".
var Version = "dev"

// Defaults for zero Config fields.
const (
	DefaultLeaseTTL       = 10 * time.Second
	DefaultReportInterval = 10 * time.Second
	DefaultMinWriteGap    = time.Second
	DefaultProbeInterval  = 2 * time.Second
	DefaultProbeTimeout   = time.Second
	DefaultRise           = 2
	DefaultFall           = 3
	DefaultDrainTimeout   = 30 * time.Second
	DefaultDrainMin       = 5 * time.Second
	DefaultDrainPoll      = 500 * time.Millisecond
	DefaultAdmin          = "127.0.0.1:9102"
)

// Config is everything Run needs. Zero durations and thresholds take the
// defaults above.
type Config struct {
	// Etcd: either Client (used as is, never closed) or Endpoints with
	// optional TLS and credentials (a client is created and closed).
	Client       *clientv3.Client
	Endpoints    []string
	EtcdTLS      *tls.Config
	EtcdUsername string
	EtcdPassword string
	// EtcdDialTimeout bounds one connection attempt (default
	// etcdclient.DefaultDialTimeout).
	EtcdDialTimeout time.Duration
	// Prefix of every key ("" = /sluice).
	Prefix string

	// The instance.
	Cluster, SubCluster, IDC string
	// Addr is the backend's ip:port, probed and registered.
	Addr netip.AddrPort
	// Weight ≥ 1 (default 1... 0 means 1).
	Weight int
	// CapacityRPS is declared capacity in requests/s; when 0 it is derived
	// as Weight × CapacityPerWeight (0: unknown).
	CapacityRPS       int
	CapacityPerWeight int
	Labels            map[string]string

	// Probe is the health check (scheme, path, host, status, body).
	Probe config.Probe
	// ProbeTLS overrides the TLS config of https/tls probes (CA, client
	// cert); nil uses system roots (or InsecureSkipVerify from Probe).
	ProbeTLS      *tls.Config
	ProbeInterval time.Duration // default 2s
	ProbeTimeout  time.Duration // default 1s
	Rise, Fall    int           // defaults 2 and 3

	// MetricsURL is the backend's optional metrics endpoint (Prometheus
	// text or JSON {"in_flight":N,"requests_total":N}).
	MetricsURL     string
	InFlightMetric string // Prometheus series, default http_requests_in_flight
	RequestsMetric string // Prometheus series, default http_requests_total
	// ProcRoot is where host CPU/memory are read ("" = /proc).
	ProcRoot string

	// ReportInterval is the least time between writes carrying only load
	// changes (default 10s); it is also the load sampling period.
	ReportInterval time.Duration
	// MinWriteGap is the least time between writes for health-state
	// changes (default 1s).
	MinWriteGap time.Duration
	// LeaseTTL of the registration (default 10s; whole seconds).
	LeaseTTL time.Duration

	// DrainTimeout is the longest a drain waits for in-flight requests
	// (default 30s). DrainMin is the least time the instance stays
	// registered as draining so proxies see it (default 5s); without a
	// metrics endpoint the drain ends after DrainMin. DrainPoll is how
	// often in-flight is read while draining (default 500ms).
	DrainTimeout, DrainMin, DrainPoll time.Duration

	// Admin is the admin HTTP address ("" = no admin server). A
	// non-loopback address requires AdminToken.
	Admin      string
	AdminToken string

	// KeepLeaseOnExit: when ctx is cancelled, stop without revoking the
	// lease, as a crashed agent would (the key vanishes after LeaseTTL).
	// For tests and chaos drills.
	KeepLeaseOnExit bool

	// Logger (default slog.Default()).
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.LeaseTTL, DefaultLeaseTTL)
	def(&c.ReportInterval, DefaultReportInterval)
	def(&c.MinWriteGap, DefaultMinWriteGap)
	def(&c.ProbeInterval, DefaultProbeInterval)
	def(&c.ProbeTimeout, DefaultProbeTimeout)
	def(&c.DrainTimeout, DefaultDrainTimeout)
	def(&c.DrainMin, DefaultDrainMin)
	def(&c.DrainPoll, DefaultDrainPoll)
	if c.Rise == 0 {
		c.Rise = DefaultRise
	}
	if c.Fall == 0 {
		c.Fall = DefaultFall
	}
	if c.Weight == 0 {
		c.Weight = 1
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// validate checks c after defaults; errors name the field, value and rule.
func (c *Config) validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Client == nil && len(c.Endpoints) == 0 {
		add("etcd: no endpoints; want --etcd http://127.0.0.1:2379[,...]")
	}
	if _, err := keys.New(c.Prefix); err != nil {
		add("prefix: %w", err)
	}
	for name, v := range map[string]string{"cluster": c.Cluster, "subcluster": c.SubCluster} {
		if err := keys.ValidName(v); err != nil {
			add("%s: %w", name, err)
		}
	}
	if c.IDC != "" {
		if err := keys.ValidName(c.IDC); err != nil {
			add("idc: %w", err)
		}
	}
	if !c.Addr.IsValid() || c.Addr.Port() == 0 {
		add("addr: %q is not ip:port with a port in 1..65535", c.Addr)
	}
	if c.Weight < 0 || c.Weight > 1_000_000 {
		add("weight: %d must be in 1..1000000", c.Weight)
	}
	if c.CapacityRPS < 0 {
		add("capacity-rps: %d must not be negative", c.CapacityRPS)
	}
	if c.CapacityPerWeight < 0 {
		add("capacity-per-weight: %d must not be negative", c.CapacityPerWeight)
	}
	if c.Rise < 1 {
		add("rise: %d must be at least 1", c.Rise)
	}
	if c.Fall < 1 {
		add("fall: %d must be at least 1", c.Fall)
	}
	if c.ProbeTimeout > c.ProbeInterval {
		add("probe-timeout: %s must not exceed probe-interval %s", c.ProbeTimeout, c.ProbeInterval)
	}
	if c.LeaseTTL < time.Second {
		add("lease-ttl: %s must be at least 1s", c.LeaseTTL)
	}
	if c.DrainMin > c.DrainTimeout {
		add("drain-min: %s must not exceed drain-timeout %s", c.DrainMin, c.DrainTimeout)
	}
	if c.Admin != "" {
		host, _, err := net.SplitHostPort(c.Admin)
		if err != nil {
			add("admin: %q is not host:port: %v", c.Admin, err)
		} else if !isLoopback(host) && c.AdminToken == "" {
			add("admin: %q is not a loopback address; an admin token is required to expose it", c.Admin)
		}
	}
	for k := range c.Labels {
		if k == "" {
			add("label: empty key")
		}
	}
	return errors.Join(errs...)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// Target returns the probe target of the configuration (after defaults).
func (c Config) Target() (probe.Target, error) {
	timeout := c.ProbeTimeout
	if timeout <= 0 {
		timeout = DefaultProbeTimeout
	}
	t, err := probe.FromPolicy(c.Addr, c.Probe, timeout)
	if err != nil {
		return probe.Target{}, err
	}
	if c.ProbeTLS != nil {
		tc := c.ProbeTLS.Clone()
		if c.Probe.InsecureSkipVerify {
			tc.InsecureSkipVerify = true
		}
		t.TLS = tc
	}
	return t, nil
}

func (c Config) capacity() int {
	if c.CapacityRPS > 0 {
		return c.CapacityRPS
	}
	return c.Weight * c.CapacityPerWeight
}

// Package probe checks one backend: an HTTP(S) request with an expected
// status and optional body substring, or a bare TCP / TLS handshake. It is
// the one prober of Sluice: lbagent checks its local backend with it and
// lbproxy's balancer runs its active health checks with it, so an agent and
// a proxy judge a backend by the same rules. It is a module of its own that
// depends only on the standard library and the api module, so neither
// service module requires the other.
//
// The rules, for a cluster's probe policy (api/config.Probe, FromPolicy):
//
//   - scheme "http" when empty; "http", "https", "tcp" or "tls" (exact,
//     lower case), anything else is an error;
//   - http(s): GET path (default "/healthz", must start with "/"), the Host
//     header from the policy or else the dialled address; the status must
//     match the policy's expression (default "2xx"); a redirect is an answer
//     matched like any status, never followed; when the policy has a body,
//     it must appear in the first MaxBody bytes; User-Agent "sluice-probe";
//   - tcp: a connection opens; tls: a TLS handshake completes, the server
//     name being the Host's host part, or else the address's IP;
//   - certificate verification is on unless the policy sets
//     insecure_skip_verify (https and tls only);
//   - one timeout bounds dial, handshake, request and body (default 1s).
//
// Check is safe for concurrent use; every call opens its own connection
// (no keep-alive), so a probe observes what a new client would see.
package probe

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/statusmatch"
)

// Schemes a Target may use.
const (
	SchemeHTTP  = "http"
	SchemeHTTPS = "https"
	SchemeTCP   = "tcp"
	SchemeTLS   = "tls"
)

// Defaults applied by Check to zero fields.
const (
	DefaultPath    = "/healthz"
	DefaultTimeout = time.Second
	// MaxBody is how much of a response body Check reads (bytes); a body
	// match must appear within it.
	MaxBody = 64 << 10
)

// defaultExpect is used when Target.Expect is the zero Matcher.
var defaultExpect = statusmatch.MustParse("2xx")

// Sentinel errors callers may branch on with errors.Is.
var (
	// ErrStatus: the response status is not the expected one.
	ErrStatus = errors.New("unexpected status")
	// ErrBody: the response body does not contain the expected substring.
	ErrBody = errors.New("body mismatch")
	// ErrTimeout: the probe did not finish within its timeout.
	ErrTimeout = errors.New("probe timeout")
	// ErrDial: no connection could be opened.
	ErrDial = errors.New("dial failed")
)

// Target is one probe. The zero values of optional fields mean the
// documented defaults. A Target is a plain value: copy it freely.
type Target struct {
	// Scheme is "http" (default when empty), "https", "tcp" or "tls".
	Scheme string
	// Addr is the backend address that is dialled.
	Addr netip.AddrPort
	// Path of the request for http(s); default "/healthz".
	Path string
	// Host is the Host header and TLS server name; default the address.
	Host string
	// Expect is the accepted status; the zero Matcher means "2xx".
	Expect statusmatch.Matcher
	// Body, when set, must be contained in the first MaxBody bytes of the
	// response body (http(s) only).
	Body string
	// Timeout bounds the whole check (dial, handshake, request, body);
	// default 1s.
	Timeout time.Duration
	// TLS configures https/tls probes (CA, server name, client
	// certificate); nil means system roots and verification on.
	TLS *tls.Config
}

// Check runs one probe and returns nil when the backend is healthy, or an
// error saying why not, for example
//
//	status 503 not in 2xx
//	dial 127.0.0.1:8080: connection refused
//	body does not contain "ok"
//	timeout after 1s
//
// It never blocks longer than the Target's timeout (or ctx, if sooner).
func Check(ctx context.Context, t Target) error {
	if !t.Addr.IsValid() || t.Addr.Port() == 0 {
		return fmt.Errorf("probe: address %q is not ip:port", t.Addr)
	}
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var err error
	switch t.Scheme {
	case "", SchemeHTTP, SchemeHTTPS:
		err = checkHTTP(ctx, t)
	case SchemeTCP:
		err = checkConn(ctx, t, false)
	case SchemeTLS:
		err = checkConn(ctx, t, true)
	default:
		return fmt.Errorf("probe: scheme %q is not http, https, tcp or tls", t.Scheme)
	}
	if err != nil && ctx.Err() == context.DeadlineExceeded && !errors.Is(err, ErrStatus) && !errors.Is(err, ErrBody) {
		return fmt.Errorf("%w: timeout after %s", ErrTimeout, timeout)
	}
	return err
}

func dialer() *net.Dialer { return &net.Dialer{KeepAlive: -1} }

func (t Target) serverName() string {
	if t.Host != "" {
		if h, _, err := net.SplitHostPort(t.Host); err == nil {
			return h
		}
		return t.Host
	}
	return ""
}

func (t Target) tlsConfig() *tls.Config {
	var c *tls.Config
	if t.TLS != nil {
		c = t.TLS.Clone()
	} else {
		c = &tls.Config{}
	}
	if c.ServerName == "" {
		if sn := t.serverName(); sn != "" {
			c.ServerName = sn
		} else {
			c.ServerName = t.Addr.Addr().String()
		}
	}
	return c
}

func checkConn(ctx context.Context, t Target, useTLS bool) error {
	conn, err := dialer().DialContext(ctx, "tcp", t.Addr.String())
	if err != nil {
		return dialError(t.Addr, err)
	}
	defer conn.Close()
	if !useTLS {
		return nil
	}
	tc := tls.Client(conn, t.tlsConfig())
	if err := tc.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("tls handshake with %s: %w", t.Addr, err)
	}
	return nil
}

func dialError(addr netip.AddrPort, err error) error {
	msg := err.Error()
	var sc *os.SyscallError
	var op *net.OpError
	switch {
	case errors.As(err, &sc):
		msg = sc.Err.Error()
	case errors.As(err, &op) && op.Err != nil:
		msg = op.Err.Error()
	}
	return fmt.Errorf("%w: dial %s: %s", ErrDial, addr, msg)
}

func checkHTTP(ctx context.Context, t Target) error {
	scheme := t.Scheme
	if scheme == "" {
		scheme = SchemeHTTP
	}
	path := t.Path
	if path == "" {
		path = DefaultPath
	}
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	host := t.Host
	if host == "" {
		host = t.Addr.String()
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			// Always dial the target address, whatever Host says.
			return dialer().DialContext(ctx, "tcp", t.Addr.String())
		},
		DisableKeepAlives:  true,
		DisableCompression: true,
		Proxy:              nil,
	}
	if scheme == SchemeHTTPS {
		tr.TLSClientConfig = t.tlsConfig()
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+t.Addr.String()+path, nil)
	if err != nil {
		return fmt.Errorf("probe request: %w", err)
	}
	req.Host = host
	req.Header.Set("User-Agent", "sluice-probe")
	client := &http.Client{
		Transport: tr,
		// A redirect is an answer, not something to follow: its status is
		// matched against Expect ("2xx|30x").
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return dialError(t.Addr, op)
		}
		return fmt.Errorf("%s %s: %w", scheme, t.Addr, unwrapURL(err))
	}
	defer resp.Body.Close()
	expect := t.Expect
	if expect.String() == "" {
		expect = defaultExpect
	}
	if !expect.Match(resp.StatusCode) {
		return fmt.Errorf("%w: status %d not in %s", ErrStatus, resp.StatusCode, expect)
	}
	if t.Body == "" {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if !strings.Contains(string(b), t.Body) {
		return fmt.Errorf("%w: body does not contain %q", ErrBody, t.Body)
	}
	return nil
}

func unwrapURL(err error) error {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) {
		if inner := ue.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}

// FromPolicy builds a Target for addr from a cluster's probe policy
// (api/config.Probe): defaults for empty fields, the status expression
// compiled, InsecureSkipVerify carried into the TLS config. timeout is the
// per-check timeout (0 means DefaultTimeout).
func FromPolicy(addr netip.AddrPort, p config.Probe, timeout time.Duration) (Target, error) {
	t := Target{Scheme: p.Scheme, Addr: addr, Path: p.Path, Host: p.Host, Body: p.Body, Timeout: timeout}
	if t.Scheme == "" {
		t.Scheme = SchemeHTTP
	}
	switch t.Scheme {
	case SchemeHTTP, SchemeHTTPS, SchemeTCP, SchemeTLS:
	default:
		return Target{}, fmt.Errorf("probe.scheme: %q is not http, https, tcp or tls", p.Scheme)
	}
	if !addr.IsValid() || addr.Port() == 0 {
		return Target{}, fmt.Errorf("probe address %q is not ip:port with a port in 1..65535", addr)
	}
	if t.Path == "" {
		t.Path = DefaultPath
	}
	if !strings.HasPrefix(t.Path, "/") {
		return Target{}, fmt.Errorf("probe.path: %q must start with \"/\"", p.Path)
	}
	status := p.Status
	if status == "" {
		status = "2xx"
	}
	m, err := statusmatch.Parse(status)
	if err != nil {
		return Target{}, fmt.Errorf("probe.status: %w", err)
	}
	t.Expect = m
	if timeout < 0 {
		return Target{}, fmt.Errorf("probe timeout %s must not be negative", timeout)
	}
	if p.InsecureSkipVerify && (t.Scheme == SchemeHTTPS || t.Scheme == SchemeTLS) {
		t.TLS = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // operator asked for it
	}
	return t, nil
}

// CheckPolicy runs one check of addr as the probe policy p says (FromPolicy,
// then Check): nil when the backend is healthy, else why not. Its signature
// is the balancer's active health check (proxy/internal/balance.ProbeFunc).
func CheckPolicy(ctx context.Context, addr netip.AddrPort, p config.Probe, timeout time.Duration) error {
	t, err := FromPolicy(addr, p, timeout)
	if err != nil {
		return err
	}
	return Check(ctx, t)
}

package balance

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/statusmatch"
)

// DefaultProbe checks addr as p says: "tcp" connects, "tls" completes a TLS
// handshake, "http"/"https" send GET p.Path and match the status against
// p.Status ("200", "2xx", "2xx|30x", "200-299"; default "2xx") and, when set,
// require p.Body in the first 64 KiB of the body. It returns nil when healthy.
func DefaultProbe(ctx context.Context, addr netip.AddrPort, p config.Probe, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d := net.Dialer{}
	host := p.Host
	if host == "" {
		host = addr.Addr().String()
	}
	tlsConf := &tls.Config{ServerName: host, InsecureSkipVerify: p.InsecureSkipVerify} //nolint:gosec // operator's choice
	switch strings.ToLower(p.Scheme) {
	case "tcp":
		c, err := d.DialContext(ctx, "tcp", addr.String())
		if err != nil {
			return fmt.Errorf("probe tcp %s: %w", addr, err)
		}
		return c.Close()
	case "tls":
		td := tls.Dialer{NetDialer: &d, Config: tlsConf}
		c, err := td.DialContext(ctx, "tcp", addr.String())
		if err != nil {
			return fmt.Errorf("probe tls %s: %w", addr, err)
		}
		return c.Close()
	case "", "http", "https":
	default:
		return fmt.Errorf("probe %s: scheme %q: want http, https, tcp or tls", addr, p.Scheme)
	}
	scheme := strings.ToLower(p.Scheme)
	if scheme == "" {
		scheme = "http"
	}
	want := p.Status
	if want == "" {
		want = "2xx"
	}
	m, err := statusmatch.Parse(want)
	if err != nil {
		return fmt.Errorf("probe %s: %w", addr, err)
	}
	path := p.Path
	if path == "" {
		path = "/healthz"
	}
	tr := &http.Transport{DialContext: d.DialContext, TLSClientConfig: tlsConf, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr.String()+path, nil)
	if err != nil {
		return fmt.Errorf("probe %s: %w", addr, err)
	}
	if p.Host != "" {
		req.Host = p.Host
	}
	req.Header.Set("User-Agent", "sluice-health/1")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("probe %s %s: %w", scheme, addr, err)
	}
	defer resp.Body.Close()
	if !m.Match(resp.StatusCode) {
		return fmt.Errorf("probe %s %s: status %d does not match %q", scheme, addr, resp.StatusCode, want)
	}
	if p.Body != "" {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if !strings.Contains(string(b), p.Body) {
			return fmt.Errorf("probe %s %s: body does not contain %q", scheme, addr, p.Body)
		}
	}
	return nil
}

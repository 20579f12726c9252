// Package explain says where a request would go and why — route rule,
// cluster, sub-cluster, instance — without forwarding it or changing any
// state a request sees. It is a pure evaluator over the route and balance
// logic: no server, no sockets, no fasthttp. lbproxy's admin endpoint
// (/v1/explain, through server.Explain, on the live table) and lbctl
// explain (offline, on a table Compile builds from a file) both use it.
//
// What the balance part may claim is balance.Explanation's contract: an
// instance is named only when the request decides it (hashing modes, a
// valid sticky cookie, a single available instance); otherwise the
// candidates are listed with their effective weights and the next pick of
// this proxy marked where the algorithm's state says it.
package explain

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/sluicelb/sluice/api/route"
	"github.com/sluicelb/sluice/api/validate"
	"github.com/sluicelb/sluice/proxy/internal/balance"
	"github.com/sluicelb/sluice/proxy/internal/clientip"
)

// ErrNoRoute is returned by Explain when no product or rule matches, or
// the matched cluster is not in the table.
var ErrNoRoute = errors.New("explain: no route matches the request")

// Explanation is what the request path would do with a request.
type Explanation struct {
	Version  uint64              `json:"version"`
	ClientIP string              `json:"client_ip"`
	Product  string              `json:"product"`
	Rule     string              `json:"rule"`
	RuleIdx  int                 `json:"rule_index"`
	Cluster  string              `json:"cluster"`
	Balance  balance.Explanation `json:"balance"`
}

// Evaluator explains requests against one compiled snapshot.
type Evaluator struct {
	Version uint64
	Router  *route.Router
	Trusted []netip.Prefix // trusted proxies (X-Forwarded-For is believed from them)
	Table   *balance.Table
}

// Compile builds an Evaluator for a validated snapshot on a registry of
// its own: every instance healthy, nothing in flight (lbctl explain
// --config). extraTrusted are added to settings.trusted_proxies, as
// lbproxy's --trusted-proxy flags are.
func Compile(checked validate.Checked, extraTrusted []netip.Prefix) (*Evaluator, error) {
	s := checked.Snapshot()
	if s == nil {
		return nil, fmt.Errorf("explain: no snapshot (the zero validate.Checked)")
	}
	router, err := route.Compile(s.Products, s.DefaultProduct)
	if err != nil {
		return nil, fmt.Errorf("version %d: routes: %w", s.Meta.Version, err)
	}
	tr, err := clientip.ParseTrusted(s.Settings.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("version %d: settings.trusted_proxies: %w", s.Meta.Version, err)
	}
	t, err := balance.Build(checked, balance.NewRegistry(balance.RegistryOptions{}))
	if err != nil {
		return nil, fmt.Errorf("version %d: %w", s.Meta.Version, err)
	}
	var h balance.Holder
	h.Store(t)
	return &Evaluator{Version: s.Meta.Version, Router: router, Trusted: append(append([]netip.Prefix(nil), extraTrusted...), tr...), Table: t}, nil
}

// Explain routes r as if it came from peer (X-Forwarded-For is honoured
// only from a trusted peer, exactly as for real requests) and asks the
// balancer where its first attempt would go.
func (ev *Evaluator) Explain(r *http.Request, peer netip.Addr) (Explanation, error) {
	ip := clientip.Resolve(peer, r.Header["X-Forwarded-For"], ev.Trusted)
	e := Explanation{Version: ev.Version, ClientIP: ip.String()}
	var rr route.Request
	rr.Reset(r, ip, r.TLS != nil || r.URL.Scheme == "https")
	res, ok := ev.Router.Match(&rr)
	if !ok {
		return e, ErrNoRoute
	}
	e.Product, e.Rule, e.RuleIdx, e.Cluster = res.Product, res.RuleName, res.RuleIndex, res.Cluster
	c := ev.Table.Cluster(res.Cluster)
	if c == nil {
		return e, ErrNoRoute
	}
	e.Balance = c.Explain(r, ip)
	return e, nil
}

// Request builds the request an explain query describes: url (absolute
// http or https), method, client_ip (the peer address; an X-Forwarded-For
// given in a header= counts only from trusted proxies), header=NAME:VALUE
// and cookie=NAME=VALUE (repeatable). It returns the request and the peer.
func Request(q url.Values) (*http.Request, netip.Addr, error) {
	raw := q.Get("url")
	if raw == "" {
		return nil, netip.Addr{}, errors.New("query parameter url is required (e.g. url=http://example.test/path)")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, netip.Addr{}, fmt.Errorf("url %q: want an absolute http or https URL", raw)
	}
	method := q.Get("method")
	if method == "" {
		method = http.MethodGet
	}
	if strings.IndexFunc(method, func(r rune) bool { return r < 'A' || r > 'Z' }) >= 0 {
		return nil, netip.Addr{}, fmt.Errorf("method %q: want an upper-case HTTP method", method)
	}
	peer := netip.MustParseAddr("127.0.0.1")
	if ip := q.Get("client_ip"); ip != "" {
		if peer, err = netip.ParseAddr(ip); err != nil {
			return nil, netip.Addr{}, fmt.Errorf("client_ip %q: not an IP address", ip)
		}
	}
	req := &http.Request{Method: method, URL: u, Host: u.Host, Header: make(http.Header),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, RemoteAddr: netip.AddrPortFrom(peer, 1).String()}
	for _, h := range q["header"] {
		k, v, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, netip.Addr{}, fmt.Errorf("header %q: want NAME:VALUE", h)
		}
		req.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	for _, c := range q["cookie"] {
		k, v, ok := strings.Cut(c, "=")
		if !ok || k == "" {
			return nil, netip.Addr{}, fmt.Errorf("cookie %q: want NAME=VALUE", c)
		}
		req.AddCookie(&http.Cookie{Name: k, Value: v, Quoted: false})
	}
	return req, peer, nil
}

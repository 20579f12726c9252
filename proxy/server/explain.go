package server

import (
	"errors"
	"net/http"
	"net/netip"

	"github.com/sluicelb/sluice/api/route"
	"github.com/sluicelb/sluice/proxy/balance"
)

// ErrNotReady is returned before the first snapshot is applied.
var ErrNotReady = errors.New("server: no snapshot applied yet")

// ErrNoRoute is returned by Explain when no product or rule matches.
var ErrNoRoute = errors.New("server: no route matches the request")

// Explanation is what the request path would do with a request, without
// forwarding it or changing any counter.
type Explanation struct {
	Version  uint64              `json:"version"`
	ClientIP string              `json:"client_ip"`
	Product  string              `json:"product"`
	Rule     string              `json:"rule"`
	RuleIdx  int                 `json:"rule_index"`
	Cluster  string              `json:"cluster"`
	Balance  balance.Explanation `json:"balance"`
}

// Explain routes r (as if it came from peer) and asks the balancer what it
// would pick first and why. r's header X-Forwarded-For is honoured only if
// peer is a trusted proxy, exactly as for real requests.
func (s *Server) Explain(r *http.Request, peer netip.Addr) (Explanation, error) {
	rt := s.rt.Load()
	if rt == nil {
		return Explanation{}, ErrNotReady
	}
	ip := ClientIP(peer, r.Header["X-Forwarded-For"], rt.trusted)
	var rr route.Request
	rr.Reset(r, ip, r.TLS != nil || r.URL.Scheme == "https")
	res, ok := rt.router.Match(&rr)
	if !ok {
		return Explanation{Version: rt.version, ClientIP: ip.String()}, ErrNoRoute
	}
	e := Explanation{Version: rt.version, ClientIP: ip.String(), Product: res.Product,
		Rule: res.RuleName, RuleIdx: res.RuleIndex, Cluster: res.Cluster}
	c := rt.clusters[res.Cluster]
	if c == nil {
		return e, ErrNoRoute
	}
	e.Balance = c.bc.Explain(r, ip)
	return e, nil
}

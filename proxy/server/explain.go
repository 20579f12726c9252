package server

import (
	"errors"
	"net/http"
	"net/netip"

	"github.com/sluicelb/sluice/proxy/explain"
)

// ErrNotReady is returned before the first snapshot is applied.
var ErrNotReady = errors.New("server: no snapshot applied yet")

// ErrNoRoute is returned by Explain when no product or rule matches.
var ErrNoRoute = explain.ErrNoRoute

// Explanation is what the request path would do with a request (see
// package explain).
type Explanation = explain.Explanation

// Explain evaluates r (as if it came from peer) against the runtime the
// request path serves: its routes, trusted proxies and live table (health,
// in-flight counts, schedule positions). Nothing is forwarded or counted.
func (s *Server) Explain(r *http.Request, peer netip.Addr) (Explanation, error) {
	rt := s.rt.Load()
	if rt == nil {
		return Explanation{}, ErrNotReady
	}
	ev := explain.Evaluator{Version: rt.version, Router: rt.router, Trusted: rt.trusted, Table: rt.table}
	return ev.Explain(r, peer)
}

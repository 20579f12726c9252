package server

import (
	"net/netip"

	"github.com/sluicelb/sluice/proxy/internal/clientip"
)

// The client-address rule lives in proxy/internal/clientip, shared with the explain
// evaluator; these names keep the request path's call sites as they are.

// ParseTrusted parses trusted-proxy CIDRs (see clientip.ParseTrusted).
func ParseTrusted(cidrs []string) ([]netip.Prefix, error) { return clientip.ParseTrusted(cidrs) }

func trusted(a netip.Addr, ps []netip.Prefix) bool { return clientip.Trusted(a, ps) }

// ClientIP is the request's client address (see clientip.Resolve).
func ClientIP(peer netip.Addr, xff []string, ps []netip.Prefix) netip.Addr {
	return clientip.Resolve(peer, xff, ps)
}

// Package clientip is the rule by which the proxy tells a request's client
// address: the peer, unless the peer is a trusted proxy, in which case the
// right-most X-Forwarded-For entry that is not itself trusted. The request
// path (proxy/server) and the explain evaluator (proxy/explain) both use it;
// it imports nothing of the request path.
package clientip

import (
	"fmt"
	"net/netip"
	"strings"
)

// ParseTrusted parses trusted-proxy CIDRs ("10.0.0.0/8", or a bare address
// meaning a single host).
func ParseTrusted(cidrs []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	for i, c := range cidrs {
		c = strings.TrimSpace(c)
		if !strings.Contains(c, "/") {
			a, err := netip.ParseAddr(c)
			if err != nil {
				return nil, fmt.Errorf("trusted proxy [%d] %q: not a CIDR or an IP address", i, c)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy [%d] %q: %w", i, c, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Trusted reports whether a is in one of ps.
func Trusted(a netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Resolve returns the client address of a request: the peer, unless the
// peer is a trusted proxy, in which case it is the right-most entry of
// X-Forwarded-For that is not itself trusted. A client therefore cannot
// choose its own address (and hash key) by sending X-Forwarded-For: only
// entries appended by trusted hops are believed. An unparsable entry stops
// the walk at the last trusted hop.
func Resolve(peer netip.Addr, xff []string, ps []netip.Prefix) netip.Addr {
	peer = peer.Unmap()
	if len(ps) == 0 || !Trusted(peer, ps) {
		return peer
	}
	ip := peer
	for i := len(xff) - 1; i >= 0; i-- {
		line := xff[i]
		for line != "" {
			var part string
			if j := strings.LastIndexByte(line, ','); j >= 0 {
				part, line = line[j+1:], line[:j]
			} else {
				part, line = line, ""
			}
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			a, err := netip.ParseAddr(part)
			if err != nil {
				return ip
			}
			ip = a.Unmap()
			if !Trusted(ip, ps) {
				return ip
			}
		}
	}
	return ip
}

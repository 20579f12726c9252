package config

import "net/netip"

// MergeInstance returns list with in added: it replaces the instance at
// in's address (same port, same IP with IPv4-mapped IPv6 equal to IPv4) or
// is appended. An agent's registration overrides the static instance it
// describes this way, in the scheduler's inventory and in lbctl's exports.
// list's backing array may be reused.
func MergeInstance(list []Instance, in Instance) []Instance {
	for i, x := range list {
		if x.Port == in.Port && sameAddr(x.Addr, in.Addr) {
			list[i] = in
			return list
		}
	}
	return append(list, in)
}

func sameAddr(a, b string) bool {
	pa, ea := netip.ParseAddr(a)
	pb, eb := netip.ParseAddr(b)
	if ea != nil || eb != nil {
		return a == b
	}
	return pa.Unmap() == pb.Unmap()
}

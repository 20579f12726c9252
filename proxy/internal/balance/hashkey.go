package balance

import (
	"encoding/binary"
	"math"
	"net/http"
	"net/netip"
	"strings"
	"unsafe"

	"github.com/sluicelb/sluice/api/config"
)

// hashBytes is murmur3 x64_128's first 64 bits with seed 0 (BFE's GetHash).
func hashBytes(b []byte) uint64 { return sum64(b) }

// hashString hashes s without copying it.
func hashString(s string) uint64 {
	return sum64(unsafe.Slice(unsafe.StringData(s), len(s)))
}

// hashAddr hashes an IP: 4 bytes for IPv4 (and IPv4-mapped IPv6), 16 for IPv6.
func hashAddr(a netip.Addr) uint64 {
	if a.Is4() || a.Is4In6() {
		// Through a 4-byte array: wider arrays make the compiler copy them
		// through the stack in pieces, a store-forwarding stall per call.
		b := a.As4()
		return sum64x4(binary.LittleEndian.Uint32(b[:]))
	}
	return hashAddr16(a)
}

func hashAddr16(a netip.Addr) uint64 {
	b := a.As16()
	return sum64x16(binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:]))
}

// keySpec is a compiled policy.balance.hash.
type keySpec struct {
	kind   string
	header string // canonical header name, or cookie name when cookie
	cookie bool
	ipOnly bool // kind is client_ip: the pick's fast path hashes the address directly
}

func compileKey(h config.Hash) keySpec {
	k := keySpec{kind: h.Key}
	if k.kind == "" {
		k.kind = config.HashClientIP
	}
	k.ipOnly = k.kind == config.HashClientIP
	if name, ok := strings.CutPrefix(h.Header, "Cookie:"); ok {
		k.cookie, k.header = true, name
	} else {
		k.header = http.CanonicalHeaderKey(h.Header)
	}
	return k
}

// hash returns the request's key hash; ok is false when the key is empty
// (the caller then draws at random).
func (k keySpec) hash(req *http.Request, ip netip.Addr) (uint64, bool) {
	switch k.kind {
	case config.HashHeader, config.HashHeaderOrIP:
		if v := k.value(req); v != "" {
			return hashString(v), true
		}
		if k.kind == config.HashHeader {
			return 0, false
		}
		fallthrough
	case config.HashClientIP:
		if !ip.IsValid() {
			return 0, false
		}
		return hashAddr(ip), true
	case config.HashURI:
		if req == nil {
			return 0, false
		}
		if req.RequestURI != "" {
			return hashString(req.RequestURI), true
		}
		if req.URL == nil {
			return 0, false
		}
		h := hashString(req.URL.Path)
		if req.URL.RawQuery != "" {
			h = h*1099511628211 ^ hashString(req.URL.RawQuery)
		}
		return h, true
	}
	return 0, false
}

func (k keySpec) value(req *http.Request) string {
	if req == nil {
		return ""
	}
	if k.cookie {
		c, err := req.Cookie(k.header)
		if err != nil {
			return ""
		}
		return c.Value
	}
	if v := req.Header[k.header]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// instKey is the key of HAProxy's hash modes uri, hdr(<name>) and
// url_param(<name>) (policy.balance.instance), parsed by api/policy.
type instKey struct {
	algo  algo
	param string // header name (canonical) or query parameter
	whole bool   // uri whole: the query string is part of the key
}

// hash returns the request's key hash; ok is false when there is no key
// (hdr without the header or with an empty value, url_param without the
// parameter or with an empty value): HAProxy then balances round robin.
func (k *instKey) hash(req *http.Request) (uint64, bool) {
	if req == nil {
		return 0, false
	}
	switch k.algo {
	case algoURI:
		if u := req.RequestURI; u != "" {
			if !k.whole {
				u, _, _ = strings.Cut(u, "?")
			}
			return hashString(u), true
		}
		if req.URL == nil {
			return 0, false
		}
		h := hashString(req.URL.Path)
		if k.whole && req.URL.RawQuery != "" {
			h = h*1099511628211 ^ hashString(req.URL.RawQuery)
		}
		return h, true
	case algoHdr:
		if v := req.Header[k.param]; len(v) > 0 && v[0] != "" {
			return hashString(v[0]), true
		}
	case algoURLParam:
		if req.URL != nil {
			if v := queryParam(req.URL.RawQuery, k.param); v != "" {
				return hashString(v), true
			}
		}
	}
	return 0, false
}

// queryParam is the raw (not unescaped) value of the first name=value pair
// of the query named name, as HAProxy's url_param reads it; "" when absent.
// name is non-empty and has no "&" or "=" (api/policy checks url_param's
// name), so a pair is name's exactly when it starts with name and "=": the
// query is scanned once, pair by pair, without cutting each pair. It does
// not allocate.
func queryParam(q, name string) string {
	for {
		if len(q) > len(name) && q[len(name)] == '=' && q[:len(name)] == name {
			v := q[len(name)+1:]
			if i := strings.IndexByte(v, '&'); i >= 0 {
				v = v[:i]
			}
			return v
		}
		i := strings.IndexByte(q, '&')
		if i < 0 {
			return ""
		}
		q = q[i+1:]
	}
}

// unit maps a 64-bit hash to (0, 1).
func unit(h uint64) float64 {
	return (float64(h>>11) + 0.5) / (1 << 53)
}

// mix is a 64-bit finaliser (murmur3 fmix64) for deriving independent hashes.
func mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// rendezvousScore is weighted rendezvous hashing's score (-w / ln u): the
// member with the highest score owns the key; P(own) = w / Σw.
func rendezvousScore(key, member uint64, w int) float64 {
	if w <= 0 {
		return math.Inf(-1)
	}
	return -float64(w) / math.Log(unit(mix(key^member)))
}

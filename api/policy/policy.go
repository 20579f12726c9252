// Package policy parses the policy strings of a cluster (instance algorithm,
// sub-cluster mode, hash key, hash type) into typed values. It is the one
// parser: api/validate reports its errors at the document path and the
// proxy's balance compile switches on its values, so the two cannot accept
// different documents. The accepted words and ranges are documented in
// docs/config.md ("policy.balance").
package policy

import (
	"fmt"
	"net/textproto"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/sluicelb/sluice/api/config"
)

// Bounds of random(N): N draws, the least loaded wins. random(1) is plain
// random and is spelled "random"; more than 10 draws only adds work (the
// pick is already the least loaded of most of a sub-cluster).
const (
	MinRandomChoices = 2
	MaxRandomChoices = 10
)

// Algo is an instance (SLB) algorithm, policy.balance.instance.
type Algo uint8

// Instance algorithms, one per word of config.Instance*.
const (
	WRR Algo = iota
	WLC
	WLCRandom
	P2CEWMA
	Sticky
	StickyCookie
	StaticRR
	RoundRobin
	LeastConn
	First
	Random
	Source
	RingHash // ring_hash: the hash key on the ring (Envoy's name; sticky without bounded load)
	URI      // HAProxy uri: the request path (uri whole: path and query)
	Hdr      // HAProxy hdr(<name>): the header's first value, round robin without one
	URLParam // HAProxy url_param(<name>): the query parameter's first value, round robin without one
)

// Hashed reports whether the algorithm is one of HAProxy's hash modes, whose
// mapping policy.balance.hash_type chooses (map-based or consistent).
func (a Algo) Hashed() bool { return a == Source || a == URI || a == Hdr || a == URLParam }

// instanceWords is every accepted word in the documented order; the index
// is the Algo. "random(N)" is listed for the error text only.
var instanceWords = []string{
	config.InstanceWRR, config.InstanceWLC, config.InstanceWLCRandom, config.InstanceP2CEWMA,
	config.InstanceSticky, config.InstanceStickyCookie, config.InstanceStaticRR, config.InstanceRoundRobin,
	config.InstanceLeastConn, config.InstanceFirst, config.InstanceRandom, config.InstanceSource,
	config.InstanceRingHash, config.InstanceURI,
}

// uriWhole is HAProxy's "balance uri whole": the query string is hashed too.
const uriWhole = config.InstanceURI + " whole"

// Instance is a parsed policy.balance.instance.
type Instance struct {
	Algo Algo
	// Choices is the N of random(N): 1 for plain random, 2..10 for
	// random(N), 0 for the other algorithms.
	Choices int
	// Param is the header name of hdr(<name>) (canonical form) or the query
	// parameter of url_param(<name>) (as written: parameters are
	// case-sensitive); "" for the other algorithms.
	Param string
	// Whole is "uri whole": the query string is part of the key.
	Whole bool
}

// ParseInstance parses an instance algorithm: one of the config.Instance*
// words, random(N) with N in MinRandomChoices..MaxRandomChoices, "uri
// whole", hdr(<name>) with an HTTP header name, or url_param(<name>) with a
// query parameter name (no "&", "=", "#", "?", spaces or controls).
func ParseInstance(s string) (Instance, error) {
	if s == uriWhole {
		return Instance{Algo: URI, Whole: true}, nil
	}
	if inner, ok := call(s, config.InstanceHdr); ok {
		if !IsToken(inner) {
			return Instance{}, fmt.Errorf("%q: the name in hdr(<name>) must be an HTTP header name (a token), have %q", s, inner)
		}
		return Instance{Algo: Hdr, Param: textproto.CanonicalMIMEHeaderKey(inner)}, nil
	}
	if inner, ok := call(s, config.InstanceURLParam); ok {
		if inner == "" || strings.ContainsFunc(inner, func(r rune) bool {
			return r <= ' ' || r == 0x7f || strings.ContainsRune("&=#?", r)
		}) {
			return Instance{}, fmt.Errorf("%q: the name in url_param(<name>) must be a non-empty query parameter name without \"&\", \"=\", \"#\", \"?\", spaces or control characters, have %q", s, inner)
		}
		return Instance{Algo: URLParam, Param: inner}, nil
	}
	if inner, ok := strings.CutPrefix(s, config.InstanceRandom+"("); ok && strings.HasSuffix(inner, ")") {
		n, err := strconv.Atoi(strings.TrimSuffix(inner, ")"))
		if err != nil || n < MinRandomChoices || n > MaxRandomChoices {
			return Instance{}, fmt.Errorf("%q: N in random(N) must be an integer in %d..%d", s, MinRandomChoices, MaxRandomChoices)
		}
		return Instance{Algo: Random, Choices: n}, nil
	}
	for i, w := range instanceWords {
		if s == w {
			in := Instance{Algo: Algo(i)}
			if in.Algo == Random {
				in.Choices = 1
			}
			return in, nil
		}
	}
	words := append(append(append([]string(nil), instanceWords[:Random+1]...), "random(N)"), instanceWords[Random+1:]...)
	words = append(words, uriWhole, config.InstanceHdr+"(<name>)", config.InstanceURLParam+"(<name>)")
	return Instance{}, notOneOf(s, words...)
}

// call returns the argument of "name(arg)".
func call(s, name string) (string, bool) {
	inner, ok := strings.CutPrefix(s, name+"(")
	if !ok || !strings.HasSuffix(inner, ")") {
		return "", false
	}
	return strings.TrimSuffix(inner, ")"), true
}

// IsToken reports whether s is a non-empty RFC 9110 token (header and
// cookie names, methods).
func IsToken(s string) bool { return httpguts.ValidHeaderFieldName(s) }

// Mode is a sub-cluster (GSLB) mode, policy.balance.subcluster_mode.
type Mode uint8

// Sub-cluster modes.
const (
	Consistent Mode = iota // config.SubclusterConsistent
	BFE                    // config.SubclusterBFE
	Request                // config.SubclusterRequest
)

// ParseMode parses a sub-cluster mode: consistent, bfe or request.
func ParseMode(s string) (Mode, error) {
	switch s {
	case config.SubclusterConsistent:
		return Consistent, nil
	case config.SubclusterBFE:
		return BFE, nil
	case config.SubclusterRequest:
		return Request, nil
	}
	return 0, notOneOf(s, config.SubclusterConsistent, config.SubclusterBFE, config.SubclusterRequest)
}

// Key is a hash key, policy.balance.hash.key.
type Key uint8

// Hash keys.
const (
	KeyClientIP   Key = iota // config.HashClientIP
	KeyHeader                // config.HashHeader
	KeyHeaderOrIP            // config.HashHeaderOrIP
	KeyURI                   // config.HashURI
)

// NeedsHeader reports whether the key reads policy.balance.hash.header.
func (k Key) NeedsHeader() bool { return k == KeyHeader || k == KeyHeaderOrIP }

// ParseKey parses a hash key: client_ip, header, header_or_ip or uri.
func ParseKey(s string) (Key, error) {
	switch s {
	case config.HashClientIP:
		return KeyClientIP, nil
	case config.HashHeader:
		return KeyHeader, nil
	case config.HashHeaderOrIP:
		return KeyHeaderOrIP, nil
	case config.HashURI:
		return KeyURI, nil
	}
	return 0, notOneOf(s, config.HashClientIP, config.HashHeader, config.HashHeaderOrIP, config.HashURI)
}

// HashType is policy.balance.hash_type, how "source" maps a client.
type HashType uint8

// Hash types.
const (
	MapBased       HashType = iota // "map-based", the default ("")
	ConsistentHash                 // "consistent"
)

// ParseHashType parses a hash type: "" or map-based, or consistent. It
// applies to the Hashed algorithms (Source, URI, Hdr, URLParam).
func ParseHashType(s string) (HashType, error) {
	switch s {
	case "", "map-based":
		return MapBased, nil
	case "consistent":
		return ConsistentHash, nil
	}
	return 0, notOneOf(s, "map-based", "consistent")
}

func notOneOf(v string, allowed ...string) error {
	return fmt.Errorf("%q is not one of %s", v, strings.Join(allowed, ", "))
}

package route

import (
	"fmt"
	"net/netip"
	"net/textproto"
	"sort"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// The primitives, with BFE's names and argument conventions. Lists are
// "|"-separated strings; case_insensitive folds ASCII letters only.
//
//	default_t()                                   always true
//	req_host_in(hosts)                            Host (port stripped, case-insensitive) in hosts
//	req_path_in(paths, case_insensitive)          URL path in paths
//	req_path_prefix_in(prefixes, case_insensitive) URL path starts with one of prefixes
//	req_path_suffix_in(suffixes, case_insensitive) URL path ends with one of suffixes
//	req_method_in(methods)                        method in methods (exact)
//	req_query_key_in(keys)                        one of keys is in the query
//	req_query_value_in(key, values, case_insensitive)   first value of query key in values
//	req_cookie_key_in(names)                      one of the cookies is present
//	req_cookie_value_in(name, values, case_insensitive) value of cookie name in values
//	req_header_key_in(headers)                    one of the headers is present
//	req_header_value_in(header, values, case_insensitive) first value of header in values
//	req_cip_range(start, end)                     client IP in start..end (inclusive, one family)
//	req_proto_secure()                            the client connection is TLS
type paramKind uint8

const (
	kindString paramKind = iota
	kindBool
)

type param struct {
	name string
	kind paramKind
}

type argError struct {
	arg int // index of the bad argument, -1 for the call
	msg string
}

type signature struct {
	params []param
	build  func(args []arg) (matcher, *argError)
}

func (s signature) usage(name string) string {
	parts := make([]string, len(s.params))
	for i, p := range s.params {
		k := "string"
		if p.kind == kindBool {
			k = "bool"
		}
		parts[i] = p.name + " " + k
	}
	return name + "(" + strings.Join(parts, ", ") + ")"
}

var (
	pList = func(name string) param { return param{name, kindString} }
	pStr  = func(name string) param { return param{name, kindString} }
	pCI   = param{"case_insensitive", kindBool}
)

// Primitives returns the names of every primitive, sorted.
func Primitives() []string {
	names := make([]string, 0, len(signatures))
	for n := range signatures {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

var signatures = map[string]signature{
	"default_t":        {build: func([]arg) (matcher, *argError) { return always{}, nil }},
	"req_proto_secure": {build: func([]arg) (matcher, *argError) { return protoSecure{}, nil }},
	"req_host_in": {params: []param{pList("hosts")}, build: func(a []arg) (matcher, *argError) {
		l, err := list(a, 0, true)
		return &hostIn{hosts: l}, err
	}},
	"req_path_in": {params: []param{pList("paths"), pCI}, build: func(a []arg) (matcher, *argError) {
		l, err := list(a, 0, a[1].b)
		return &pathIn{paths: l, ci: a[1].b}, err
	}},
	"req_path_prefix_in": {params: []param{pList("prefixes"), pCI}, build: func(a []arg) (matcher, *argError) {
		l, err := list(a, 0, a[1].b)
		return &pathPrefixIn{prefixes: l, ci: a[1].b}, err
	}},
	"req_path_suffix_in": {params: []param{pList("suffixes"), pCI}, build: func(a []arg) (matcher, *argError) {
		l, err := list(a, 0, a[1].b)
		return &pathSuffixIn{suffixes: l, ci: a[1].b}, err
	}},
	"req_method_in": {params: []param{pList("methods")}, build: func(a []arg) (matcher, *argError) {
		l, err := list(a, 0, false)
		if err == nil {
			for _, m := range l {
				if !httpguts.ValidHeaderFieldName(m) {
					return nil, &argError{0, fmt.Sprintf("method %q is not an HTTP token", truncate(m))}
				}
			}
		}
		return &methodIn{methods: l}, err
	}},
	"req_query_key_in": {params: []param{pList("keys")}, build: func(a []arg) (matcher, *argError) {
		l, err := list(a, 0, false)
		return &queryKeyIn{keys: l}, err
	}},
	"req_query_value_in": {params: []param{pStr("key"), pList("values"), pCI}, build: func(a []arg) (matcher, *argError) {
		if a[0].s == "" {
			return nil, &argError{0, "key is empty"}
		}
		l, err := list(a, 1, a[2].b)
		return &queryValueIn{key: a[0].s, values: l, ci: a[2].b}, err
	}},
	"req_cookie_key_in": {params: []param{pList("names")}, build: func(a []arg) (matcher, *argError) {
		l, err := list(a, 0, false)
		return &cookieKeyIn{names: l}, err
	}},
	"req_cookie_value_in": {params: []param{pStr("name"), pList("values"), pCI}, build: func(a []arg) (matcher, *argError) {
		if a[0].s == "" {
			return nil, &argError{0, "cookie name is empty"}
		}
		l, err := list(a, 1, a[2].b)
		return &cookieValueIn{name: a[0].s, values: l, ci: a[2].b}, err
	}},
	"req_header_key_in": {params: []param{pList("headers")}, build: func(a []arg) (matcher, *argError) {
		l, err := list(a, 0, false)
		if err != nil {
			return nil, err
		}
		for i, h := range l {
			if !httpguts.ValidHeaderFieldName(h) {
				return nil, &argError{0, fmt.Sprintf("header name %q is not an HTTP token", truncate(h))}
			}
			l[i] = textproto.CanonicalMIMEHeaderKey(h)
		}
		return &headerKeyIn{headers: l}, nil
	}},
	"req_header_value_in": {params: []param{pStr("header"), pList("values"), pCI}, build: func(a []arg) (matcher, *argError) {
		if !httpguts.ValidHeaderFieldName(a[0].s) {
			return nil, &argError{0, fmt.Sprintf("header name %q is not an HTTP token", truncate(a[0].s))}
		}
		l, err := list(a, 1, a[2].b)
		return &headerValueIn{header: textproto.CanonicalMIMEHeaderKey(a[0].s), values: l, ci: a[2].b}, err
	}},
	"req_cip_range": {params: []param{pStr("start"), pStr("end")}, build: func(a []arg) (matcher, *argError) {
		var ips [2]netip.Addr
		for i := range ips {
			ip, err := netip.ParseAddr(a[i].s)
			if err != nil || ip.Zone() != "" {
				return nil, &argError{i, fmt.Sprintf("%q is not an IP address", truncate(a[i].s))}
			}
			ips[i] = ip.Unmap()
		}
		if ips[0].Is4() != ips[1].Is4() {
			return nil, &argError{1, fmt.Sprintf("%s and %s are not of the same address family", ips[0], ips[1])}
		}
		if ips[0].Compare(ips[1]) > 0 {
			return nil, &argError{1, fmt.Sprintf("start %s is after end %s", ips[0], ips[1])}
		}
		return &cipRange{start: ips[0], end: ips[1]}, nil
	}},
}

// list splits argument i on "|"; every item must be non-empty. With fold
// the items are lower-cased (ASCII) for case-insensitive comparison.
func list(a []arg, i int, fold bool) ([]string, *argError) {
	s := a[i].s
	if s == "" {
		return nil, &argError{i, "list is empty"}
	}
	items := strings.Split(s, "|")
	for j, it := range items {
		if it == "" {
			return nil, &argError{i, fmt.Sprintf("list %q has an empty item at position %d", truncate(s), j+1)}
		}
		if fold {
			items[j] = lowerASCII(it)
		}
	}
	return items, nil
}

type always struct{}

func (always) match(*Request) bool { return true }

type protoSecure struct{}

func (protoSecure) match(r *Request) bool { return r.Secure }

type hostIn struct{ hosts []string }

func (m *hostIn) match(r *Request) bool { return inFold(r.host(), m.hosts) }

type pathIn struct {
	paths []string
	ci    bool
}

func (m *pathIn) match(r *Request) bool {
	p := r.path()
	if m.ci {
		return inFold(p, m.paths)
	}
	for _, x := range m.paths {
		if p == x {
			return true
		}
	}
	return false
}

type pathPrefixIn struct {
	prefixes []string
	ci       bool
}

func (m *pathPrefixIn) match(r *Request) bool {
	p := r.path()
	for _, x := range m.prefixes {
		if len(p) >= len(x) && eq(p[:len(x)], x, m.ci) {
			return true
		}
	}
	return false
}

type pathSuffixIn struct {
	suffixes []string
	ci       bool
}

func (m *pathSuffixIn) match(r *Request) bool {
	p := r.path()
	for _, x := range m.suffixes {
		if len(p) >= len(x) && eq(p[len(p)-len(x):], x, m.ci) {
			return true
		}
	}
	return false
}

type methodIn struct{ methods []string }

func (m *methodIn) match(r *Request) bool {
	if r.HTTP == nil {
		return false
	}
	method := r.HTTP.Method
	if method == "" {
		method = "GET" // net/http: an empty method means GET
	}
	for _, x := range m.methods {
		if method == x {
			return true
		}
	}
	return false
}

type queryKeyIn struct{ keys []string }

func (m *queryKeyIn) match(r *Request) bool {
	for _, k := range m.keys {
		if _, ok := r.queryValue(k); ok {
			return true
		}
	}
	return false
}

type queryValueIn struct {
	key    string
	values []string
	ci     bool
}

func (m *queryValueIn) match(r *Request) bool {
	v, ok := r.queryValue(m.key)
	return ok && in(v, m.values, m.ci)
}

type cookieKeyIn struct{ names []string }

func (m *cookieKeyIn) match(r *Request) bool {
	for _, n := range m.names {
		if _, ok := r.cookieValue(n); ok {
			return true
		}
	}
	return false
}

type cookieValueIn struct {
	name   string
	values []string
	ci     bool
}

func (m *cookieValueIn) match(r *Request) bool {
	v, ok := r.cookieValue(m.name)
	return ok && in(v, m.values, m.ci)
}

type headerKeyIn struct{ headers []string } // canonical names

func (m *headerKeyIn) match(r *Request) bool {
	if r.HTTP == nil {
		return false
	}
	for _, h := range m.headers {
		if _, ok := r.HTTP.Header[h]; ok {
			return true
		}
	}
	return false
}

type headerValueIn struct {
	header string // canonical name
	values []string
	ci     bool
}

func (m *headerValueIn) match(r *Request) bool {
	if r.HTTP == nil {
		return false
	}
	vs := r.HTTP.Header[m.header]
	return len(vs) > 0 && in(vs[0], m.values, m.ci)
}

type cipRange struct{ start, end netip.Addr }

func (m *cipRange) match(r *Request) bool {
	ip := r.ClientIP.Unmap()
	if !ip.IsValid() || ip.Is4() != m.start.Is4() {
		return false
	}
	ip = ip.WithZone("")
	return m.start.Compare(ip) <= 0 && ip.Compare(m.end) <= 0
}

// in reports whether s is one of list; with ci, list is lower-case and s
// is compared ignoring ASCII case.
func in(s string, list []string, ci bool) bool {
	if ci {
		return inFold(s, list)
	}
	for _, x := range list {
		if s == x {
			return true
		}
	}
	return false
}

func inFold(s string, lowerList []string) bool {
	for _, x := range lowerList {
		if equalFoldASCII(s, x) {
			return true
		}
	}
	return false
}

func eq(a, b string, ci bool) bool {
	if ci {
		return equalFoldASCII(a, b)
	}
	return a == b
}

// equalFoldASCII compares a with lower-case b ignoring ASCII case.
func equalFoldASCII(a, lowerB string) bool {
	if len(a) != len(lowerB) {
		return false
	}
	for i := 0; i < len(a); i++ {
		c := a[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lowerB[i] {
			return false
		}
	}
	return true
}

func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

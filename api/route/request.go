package route

import (
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Request is what conditions are evaluated against: the HTTP request plus
// facts the proxy knows about its connection. The query string and cookies
// are parsed lazily, once, the first time a primitive needs them, and kept
// in the Request so later rules do not parse them again.
//
// A Request is used by one goroutine at a time. Reuse one (for example from
// a sync.Pool) with Reset: its caches keep their capacity, so matching
// allocates nothing once they have grown.
type Request struct {
	// HTTP is the request; only read.
	HTTP *http.Request
	// ClientIP is the client address as the proxy determined it (peer or
	// trusted X-Forwarded-For).
	ClientIP netip.Addr
	// Secure is true when the client connection uses TLS.
	Secure bool

	queryDone  bool
	query      []pair
	cookieDone bool
	cookies    []pair
	hostBuf    []byte
}

type pair struct{ k, v string }

// Reset prepares r for another request, keeping the capacity of its caches.
func (r *Request) Reset(h *http.Request, clientIP netip.Addr, secure bool) {
	r.HTTP, r.ClientIP, r.Secure = h, clientIP, secure
	r.queryDone, r.query = false, r.query[:0]
	r.cookieDone, r.cookies = false, r.cookies[:0]
}

// host returns the request host without its port.
func (r *Request) host() string {
	if r.HTTP == nil {
		return ""
	}
	h := r.HTTP.Host
	if h == "" && r.HTTP.URL != nil {
		h = r.HTTP.URL.Host
	}
	return strings.TrimSuffix(stripPort(h), ".")
}

// stripPort removes a ":port" suffix and the brackets of an IPv6 literal.
func stripPort(h string) string {
	if strings.HasPrefix(h, "[") {
		if i := strings.IndexByte(h, ']'); i > 0 {
			return h[1:i]
		}
		return h
	}
	if i := strings.IndexByte(h, ':'); i >= 0 && strings.IndexByte(h[i+1:], ':') < 0 {
		return h[:i]
	}
	return h
}

// lowerHostBytes writes the lower-cased host into r's buffer and returns
// it; the result is valid until the next call.
func (r *Request) lowerHostBytes(h string) []byte {
	r.hostBuf = append(r.hostBuf[:0], h...)
	for j, b := range r.hostBuf {
		if b >= 'A' && b <= 'Z' {
			r.hostBuf[j] = b + 'a' - 'A'
		}
	}
	return r.hostBuf
}

func (r *Request) path() string {
	if r.HTTP == nil || r.HTTP.URL == nil {
		return ""
	}
	return r.HTTP.URL.Path
}

// queryValue returns the first value of key in the query string, as
// url.Values.Get does, and whether the key is present.
func (r *Request) queryValue(key string) (string, bool) {
	if !r.queryDone {
		r.queryDone = true
		if r.HTTP != nil && r.HTTP.URL != nil {
			r.query = parseQuery(r.query[:0], r.HTTP.URL.RawQuery)
		}
	}
	for _, p := range r.query {
		if p.k == key {
			return p.v, true
		}
	}
	return "", false
}

// parseQuery appends the pairs of raw to dst with url.ParseQuery's rules
// (pairs with a bad escape or a ";" are skipped). Unescaping allocates only
// when a key or value is actually escaped.
func parseQuery(dst []pair, raw string) []pair {
	for raw != "" {
		var kv string
		kv, raw, _ = strings.Cut(raw, "&")
		if kv == "" || strings.IndexByte(kv, ';') >= 0 {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		k, err := url.QueryUnescape(k)
		if err != nil {
			continue
		}
		v, err = url.QueryUnescape(v)
		if err != nil {
			continue
		}
		dst = append(dst, pair{k, v})
	}
	return dst
}

// cookieValue returns the value of the first cookie called name.
func (r *Request) cookieValue(name string) (string, bool) {
	if !r.cookieDone {
		r.cookieDone = true
		if r.HTTP != nil {
			for _, line := range r.HTTP.Header["Cookie"] {
				r.cookies = parseCookies(r.cookies, line)
			}
		}
	}
	for _, p := range r.cookies {
		if p.k == name {
			return p.v, true
		}
	}
	return "", false
}

// parseCookies appends the cookies of one Cookie header line to dst, as
// net/http reads them: "; "-separated name=value pairs, a value in double
// quotes loses them, pairs without "=" or with an empty name are skipped.
func parseCookies(dst []pair, line string) []pair {
	for line != "" {
		var part string
		part, line, _ = strings.Cut(line, ";")
		part = strings.TrimSpace(part)
		name, val, ok := strings.Cut(part, "=")
		if !ok || !httpguts.ValidHeaderFieldName(name) {
			continue
		}
		if len(val) > 1 && val[0] == '"' && val[len(val)-1] == '"' {
			val = val[1 : len(val)-1]
		}
		dst = append(dst, pair{name, val})
	}
	return dst
}

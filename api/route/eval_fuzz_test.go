package route

import (
	"net/http"
	"net/netip"
	"net/url"
	"testing"
)

// FuzzCondEval parses fuzzed conditions and evaluates them against
// requests built of fuzzed method, host, path, query, header, cookie,
// client address and TLS flag (FuzzParse uses three fixed requests). For
// every condition that parses and every request:
//   - Match never panics and is deterministic, also on a request whose
//     query and cookies are already cached;
//   - the canonical String() matches exactly the same requests;
//   - !(c) matches exactly when c does not, c && c as c, c || !(c) always.
func FuzzCondEval(f *testing.F) {
	for _, s := range []string{
		`default_t()`,
		`req_method_in("GET|POST")`,
		`req_host_in("demo.local|a.b")`,
		`req_path_prefix_in("/static", false) && !req_path_in("/static/x", true)`,
		`req_query_value_in("k", "v1|v2", true) || req_cookie_value_in("sid", "abc", false)`,
		`req_header_value_in("X-A", "é", false)`,
		`req_cip_range("10.0.0.0", "10.255.255.255") || req_proto_secure()`,
		`req_cip_range("::1", "::2")`,
	} {
		f.Add(s, "GET", "demo.local", "/static/x", "k=v1&k=v2", "X-A", "é", "sid=abc", []byte{10, 1, 1, 1}, false)
	}
	f.Add(`req_path_in("/", false)`, "", "", "", "%zz;&=", "", "", "=;;", []byte{}, true)
	f.Add(`req_host_in("DEMO.LOCAL")`, "get", "Demo.Local:8080", "//a/../b", "a", "x-a", "\xff", `theme="Dark"; bad name=1`, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1}, false)
	f.Fuzz(func(t *testing.T, cond, method, host, path, query, hname, hval, cookie string, ip []byte, secure bool) {
		c, err := Parse(cond)
		if err != nil {
			return
		}
		addr, _ := netip.AddrFromSlice(ip)
		mk := func() *Request {
			h := http.Header{}
			if hname != "" {
				h[http.CanonicalHeaderKey(hname)] = []string{hval}
			}
			if cookie != "" {
				h["Cookie"] = []string{cookie}
			}
			return &Request{
				HTTP:     &http.Request{Method: method, Host: host, URL: &url.URL{Path: path, RawQuery: query}, Header: h, RequestURI: path},
				ClientIP: addr, Secure: secure,
			}
		}
		r := mk()
		got := c.Match(r)
		if again := c.Match(r); again != got {
			t.Fatalf("%q: Match is %v, then %v on the same (cached) request", cond, got, again)
		}
		if fresh := c.Match(mk()); fresh != got {
			t.Fatalf("%q: Match is %v on one request, %v on an identical one", cond, got, fresh)
		}
		canon := c.String()
		c2, err := Parse(canon)
		if err != nil {
			t.Fatalf("String() %q of %q does not parse: %v", canon, cond, err)
		}
		if m := c2.Match(mk()); m != got {
			t.Fatalf("%q matches %v, its String() %q matches %v", cond, got, canon, m)
		}
		for _, d := range []struct {
			expr string
			want bool
		}{
			{"!(" + canon + ")", !got},
			{"(" + canon + ") && (" + canon + ")", got},
			{"(" + canon + ") || !(" + canon + ")", true},
		} {
			if len(d.expr) > MaxCondLen {
				continue
			}
			dc, err := Parse(d.expr)
			if err != nil {
				t.Fatalf("%q does not parse: %v", d.expr, err)
			}
			if m := dc.Match(mk()); m != d.want {
				t.Fatalf("%q matches %v, want %v (%q matches %v)", d.expr, m, d.want, canon, got)
			}
		}
	})
}

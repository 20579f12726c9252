package route

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

func newReq(method, target string, hdr map[string]string) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	return r
}

func TestPrimitiveMatch(t *testing.T) {
	base := func() *Request {
		return &Request{
			HTTP: newReq("POST", "http://Demo.Local:8080/Static/app.JS?lang=EN&x=%41b&empty=&k=v1&k=v2", map[string]string{
				"Cookie":     `sid=abc; theme="Dark"; bad name=1`,
				"X-Tenant":   "Blue",
				"User-Agent": "test",
			}),
			ClientIP: netip.MustParseAddr("10.1.2.3"),
		}
	}
	tests := []struct {
		cond string
		want bool
	}{
		{`default_t()`, true},
		{`req_host_in("demo.local")`, true},
		{`req_host_in("other.local|DEMO.LOCAL")`, true},
		{`req_host_in("demo")`, false},
		{`req_path_in("/Static/app.JS", false)`, true},
		{`req_path_in("/static/app.js", false)`, false},
		{`req_path_in("/static/app.js", true)`, true},
		{`req_path_prefix_in("/static", false)`, false},
		{`req_path_prefix_in("/static", true)`, true},
		{`req_path_prefix_in("/x|/Static/", false)`, true},
		{`req_path_prefix_in("/Static/app.JS/more", false)`, false},
		{`req_path_suffix_in(".js", false)`, false},
		{`req_path_suffix_in(".css|.js", true)`, true},
		{`req_method_in("GET|HEAD")`, false},
		{`req_method_in("POST")`, true},
		{`req_method_in("post")`, false},
		{`req_query_key_in("nope|empty")`, true},
		{`req_query_key_in("nope")`, false},
		{`req_query_value_in("lang", "en", false)`, false},
		{`req_query_value_in("lang", "en", true)`, true},
		{`req_query_value_in("x", "Ab", false)`, true},
		{`req_query_value_in("k", "v1", false)`, true},
		{`req_query_value_in("k", "v2", false)`, false},
		{`req_query_value_in("missing", "v", false)`, false},
		{`req_cookie_key_in("sid")`, true},
		{`req_cookie_key_in("other|theme")`, true},
		{`req_cookie_key_in("nope")`, false},
		{`req_cookie_value_in("theme", "Dark", false)`, true},
		{`req_cookie_value_in("theme", "dark", false)`, false},
		{`req_cookie_value_in("theme", "dark", true)`, true},
		{`req_cookie_value_in("sid", "xyz|abc", false)`, true},
		{`req_header_key_in("x-tenant")`, true},
		{`req_header_key_in("X-Missing")`, false},
		{`req_header_value_in("x-tenant", "blue", true)`, true},
		{`req_header_value_in("X-Tenant", "blue", false)`, false},
		{`req_cip_range("10.1.0.0", "10.1.255.255")`, true},
		{`req_cip_range("10.1.2.4", "10.1.2.9")`, false},
		{`req_cip_range("10.1.2.3", "10.1.2.3")`, true},
		{`req_cip_range("::", "ffff::")`, false},
		{`req_proto_secure()`, false},
		{`!req_proto_secure()`, true},
		{`req_method_in("POST") && req_path_prefix_in("/static", true) && !req_query_key_in("debug")`, true},
		{`req_method_in("GET") || req_cookie_key_in("zzz") || req_host_in("demo.local")`, true},
	}
	for _, tt := range tests {
		c := MustParse(tt.cond)
		if got := c.Match(base()); got != tt.want {
			t.Errorf("%s = %v, want %v", tt.cond, got, tt.want)
		}
	}
}

func TestCIPRangeMappedAndV6(t *testing.T) {
	c := MustParse(`req_cip_range("10.0.0.0", "10.0.0.255")`)
	if !c.Match(&Request{ClientIP: netip.MustParseAddr("::ffff:10.0.0.7")}) {
		t.Error("an IPv4-mapped IPv6 client address in range did not match")
	}
	if c.Match(&Request{}) {
		t.Error("an unknown client IP matched a range")
	}
	c6 := MustParse(`req_cip_range("2001:db8::", "2001:db8::ffff")`)
	if !c6.Match(&Request{ClientIP: netip.MustParseAddr("2001:db8::12")}) {
		t.Error("IPv6 client in range did not match")
	}
	if c6.Match(&Request{ClientIP: netip.MustParseAddr("10.0.0.7")}) {
		t.Error("IPv4 client matched an IPv6 range")
	}
}

func TestRequestResetClearsCaches(t *testing.T) {
	c := MustParse(`req_query_value_in("a", "1", false) && req_cookie_value_in("s", "x", false)`)
	var r Request
	r.Reset(newReq("GET", "http://h/?a=1", map[string]string{"Cookie": "s=x"}), netip.Addr{}, false)
	if !c.Match(&r) {
		t.Fatal("first request did not match")
	}
	r.Reset(newReq("GET", "http://h/?a=2", map[string]string{"Cookie": "s=y"}), netip.Addr{}, false)
	if c.Match(&r) {
		t.Fatal("second request matched with the first request's query and cookies")
	}
}

func TestSecure(t *testing.T) {
	c := MustParse(`req_proto_secure()`)
	if !c.Match(&Request{HTTP: newReq("GET", "https://h/", nil), Secure: true}) {
		t.Error("secure request did not match req_proto_secure()")
	}
}

func TestNilHTTPNeverPanics(t *testing.T) {
	r := &Request{}
	conds := []string{`req_host_in("a")`, `req_path_in("/a", true)`, `req_method_in("GET")`,
		`req_query_key_in("a")`, `req_cookie_key_in("a")`, `req_header_key_in("a")`,
		`req_header_value_in("a", "b", false)`, `req_path_suffix_in("a", false)`, `req_path_prefix_in("a", false)`}
	for _, s := range conds {
		if MustParse(s).Match(r) {
			t.Errorf("%s matched an empty request", s)
		}
	}
}

package route

import (
	"net/netip"
	"testing"
)

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`default_t()`,
		`req_path_prefix_in("/static", false)`,
		`req_method_in("POST") && req_path_prefix_in("/setting", false)`,
		`!(req_proto_secure() || req_host_in("a.b|C.D")) && req_cip_range("10.0.0.0", "10.255.255.255")`,
		`req_query_value_in("k", "v1|v2", true) || req_cookie_value_in("c", "x", false)`,
		`req_header_value_in("X-A", "\u00e9\"\\", false)`,
		`((((default_t()))))`, `!!!!default_t()`, `req_method_in("GET"`, `)(`, `&&||!`,
		`req_pat_in("/")`, `req_method_in("G\xffT")`, "\xff\xfe", `"unterminated`, `req_cip_range("::1", "::2")`,
		`default_t() default_t()`, `req_path_in("/a", tru)`, `req_path_in("/a",, false)`,
	} {
		f.Add(s)
	}
	reqs := []*Request{
		{HTTP: newReq("GET", "http://demo.local/static/x?a=1", map[string]string{"Cookie": "c=x", "X-A": "é"}), ClientIP: netip.MustParseAddr("10.1.1.1")},
		{HTTP: newReq("POST", "http://OTHER:81/setting", nil), ClientIP: netip.MustParseAddr("::1"), Secure: true},
		{},
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Parse(s)
		if err != nil {
			pe, ok := err.(*ParseError)
			if !ok || pe.Column < 1 {
				t.Fatalf("Parse(%q) error %v is not a *ParseError with a column", s, err)
			}
			return
		}
		canon := c.String()
		c2, err := Parse(canon)
		if err != nil {
			t.Fatalf("String() %q of %q does not re-parse: %v", canon, s, err)
		}
		if c2.String() != canon {
			t.Fatalf("re-parse of %q prints %q", canon, c2.String())
		}
		if c.IsDefault() != c2.IsDefault() {
			t.Fatalf("IsDefault changed across String() for %q", s)
		}
		for i, r := range reqs {
			if c.Match(r) != c2.Match(r) {
				t.Fatalf("%q and its String() %q disagree on request %d", s, canon, i)
			}
		}
	})
}

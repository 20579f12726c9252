package route

import (
	"errors"
	"strings"
	"testing"
)

func TestParseErrors(t *testing.T) {
	tests := []struct {
		cond string
		want string
	}{
		{`req_path_in("/a", false) && req_pat_in("/b")`, `column 29: unknown primitive "req_pat_in"`},
		{``, `column 1: condition is empty`},
		{`   `, `column 4: condition is empty`},
		{`req_method_in("GET"`, `column 14: unbalanced parenthesis: "(" is never closed`},
		{`(req_method_in("GET")`, `column 1: unbalanced parenthesis: "(" is never closed`},
		{`req_method_in("GET"))`, `column 21: unexpected ")" after the end of the condition`},
		{`) && default_t()`, `column 1: unbalanced parenthesis: unexpected ")"`},
		{`default_t() default_t()`, `column 13: unexpected "default_t" after the end of the condition`},
		{`req_path_in("/a")`, `column 1: req_path_in takes 2 arguments req_path_in(paths string, case_insensitive bool), have 1`},
		{`req_path_in("/a", "false")`, `column 19: argument 2 (case_insensitive) of req_path_in must be true or false`},
		{`req_method_in(true)`, `column 15: argument 1 (methods) of req_method_in must be a string`},
		{`default_t(1)`, `column 11: unexpected character '1'`},
		{`req_method_in("GET") & default_t()`, `column 22: "&" is not an operator; want "&&"`},
		{`req_method_in("GET") | default_t()`, `column 22: "|" is not an operator; want "||"`},
		{`req_method_in("GET) && default_t()`, `column 15: string is not terminated`},
		{`req_method_in("G\q")`, `column 15: string "G\q" has an invalid escape`},
		{`req_method_in("GET||POST")`, `column 15: req_method_in: list "GET||POST" has an empty item at position 2`},
		{`req_method_in("")`, `column 15: req_method_in: list is empty`},
		{`req_method_in("GE T")`, `column 15: req_method_in: method "GE T" is not an HTTP token`},
		{`req_cip_range("10.0.0.9", "10.0.0.1")`, `column 27: req_cip_range: start 10.0.0.9 is after end 10.0.0.1`},
		{`req_cip_range("10.0.0.1", "::1")`, `column 27: req_cip_range: 10.0.0.1 and ::1 are not of the same address family`},
		{`req_cip_range("10.0.0.x", "10.0.0.1")`, `column 15: req_cip_range: "10.0.0.x" is not an IP address`},
		{`req_header_value_in("X Y", "a", false)`, `column 21: req_header_value_in: header name "X Y" is not an HTTP token`},
		{`true`, `column 1: true is not a condition; use default_t() for a rule that always matches`},
		{`default_t && req_proto_secure()`, `column 11: want "(" after default_t, have "&&"`},
		{`default_t() &&`, `column 15: unexpected end of condition; want a primitive, "!" or "("`},
		{`!`, `column 2: unexpected end of condition; want a primitive, "!" or "("`},
		{`req_method_in("GET" "POST")`, `column 21: unexpected string "POST" in the arguments of req_method_in; want "," or ")"`},
		{`req_method_in(,)`, `column 15: unexpected "," in the arguments of req_method_in; want a "string", true or false`},
		{`(default_t() default_t())`, `column 14: unexpected "default_t"; want ")" or an operator`},
		{`req_path_in("/é", false) && ünknown()`, `column 29: unexpected character 'ü'`},
		{"\xff", `column 1: condition is not valid UTF-8`},
		{strings.Repeat("!", 200) + "default_t()", `column 101: condition is nested deeper than 100 levels`},
	}
	for _, tt := range tests {
		_, err := Parse(tt.cond)
		if err == nil {
			t.Errorf("Parse(%q) = nil error, want %q", tt.cond, tt.want)
			continue
		}
		if err.Error() != tt.want {
			t.Errorf("Parse(%q)\n got  %q\n want %q", tt.cond, err.Error(), tt.want)
		}
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("Parse(%q) error %T is not a *ParseError", tt.cond, err)
		}
	}
}

func TestParseStringCanonical(t *testing.T) {
	tests := []struct{ in, want string }{
		{`default_t()`, `default_t()`},
		{` req_method_in( "POST" )&&req_path_prefix_in("/setting",false) `, `req_method_in("POST") && req_path_prefix_in("/setting", false)`},
		{`a() || b() && c()`, ``}, // unknown primitives: checked below to fail
		{`req_proto_secure() || req_method_in("GET") && !req_path_in("/x", true)`, `req_proto_secure() || req_method_in("GET") && !req_path_in("/x", true)`},
		{`(req_proto_secure() || req_method_in("GET")) && default_t()`, `(req_proto_secure() || req_method_in("GET")) && default_t()`},
		{`req_proto_secure() && (req_method_in("GET") && default_t())`, `req_proto_secure() && (req_method_in("GET") && default_t())`},
		{`((req_proto_secure()))`, `req_proto_secure()`},
		{`!(req_proto_secure() || default_t())`, `!(req_proto_secure() || default_t())`},
		{`!!req_proto_secure()`, `!!req_proto_secure()`},
		{`req_header_value_in("x-a", "q\"u\\o", false)`, `req_header_value_in("x-a", "q\"u\\o", false)`},
	}
	for _, tt := range tests {
		c, err := Parse(tt.in)
		if tt.want == "" {
			if err == nil {
				t.Errorf("Parse(%q) succeeded, want an error", tt.in)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.in, err)
		}
		if got := c.String(); got != tt.want {
			t.Errorf("Parse(%q).String() = %q, want %q", tt.in, got, tt.want)
		}
		c2, err := Parse(c.String())
		if err != nil || c2.String() != c.String() {
			t.Errorf("String() of %q does not re-parse to itself: %v", tt.in, err)
		}
	}
}

func TestPrecedence(t *testing.T) {
	// a || b && c must be a || (b && c): with a true, b false it matches.
	secure := &Request{HTTP: newReq("GET", "http://h/x", nil), Secure: true}
	c := MustParse(`req_proto_secure() || req_method_in("POST") && req_path_in("/nope", false)`)
	if !c.Match(secure) {
		t.Error(`a || b && c with a true did not match; && must bind tighter than ||`)
	}
	// !a && b must be (!a) && b.
	c = MustParse(`!req_proto_secure() && req_method_in("GET")`)
	if c.Match(secure) {
		t.Error(`!a && b with a true matched; ! must bind tighter than &&`)
	}
	plain := &Request{HTTP: newReq("GET", "http://h/x", nil)}
	if !c.Match(plain) {
		t.Error(`!a && b with a false, b true did not match`)
	}
}

func TestIsDefault(t *testing.T) {
	for cond, want := range map[string]bool{
		`default_t()`:                         true,
		`(default_t())`:                       true,
		`default_t() && req_proto_secure()`:   false,
		`!default_t()`:                        false,
		`req_path_prefix_in("/static", true)`: false,
	} {
		if got := MustParse(cond).IsDefault(); got != want {
			t.Errorf("IsDefault(%q) = %v, want %v", cond, got, want)
		}
	}
}

func TestPrimitivesListed(t *testing.T) {
	want := []string{"default_t", "req_cip_range", "req_cookie_key_in", "req_cookie_value_in",
		"req_header_key_in", "req_header_value_in", "req_host_in", "req_method_in", "req_path_in",
		"req_path_prefix_in", "req_path_suffix_in", "req_proto_secure", "req_query_key_in", "req_query_value_in"}
	got := Primitives()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("Primitives() = %v, want %v", got, want)
	}
}

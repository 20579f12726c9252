package policy

import (
	"strconv"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

func TestParseInstance(t *testing.T) {
	ok := map[string]Instance{
		config.InstanceWRR: {Algo: WRR}, config.InstanceWLC: {Algo: WLC}, config.InstanceWLCRandom: {Algo: WLCRandom},
		config.InstanceP2CEWMA: {Algo: P2CEWMA}, config.InstanceSticky: {Algo: Sticky},
		config.InstanceStickyCookie: {Algo: StickyCookie}, config.InstanceStaticRR: {Algo: StaticRR},
		config.InstanceRoundRobin: {Algo: RoundRobin}, config.InstanceLeastConn: {Algo: LeastConn},
		config.InstanceFirst: {Algo: First}, config.InstanceSource: {Algo: Source},
		"random": {Algo: Random, Choices: 1}, "random(2)": {Algo: Random, Choices: 2}, "random(10)": {Algo: Random, Choices: 10},
		"ring_hash": {Algo: RingHash}, "uri": {Algo: URI}, "uri whole": {Algo: URI, Whole: true},
		"hdr(x-user-id)": {Algo: Hdr, Param: "X-User-Id"}, "hdr(Host)": {Algo: Hdr, Param: "Host"},
		"url_param(userid)": {Algo: URLParam, Param: "userid"}, "url_param(User.ID)": {Algo: URLParam, Param: "User.ID"},
	}
	for s, want := range ok {
		got, err := ParseInstance(s)
		if err != nil || got != want {
			t.Errorf("ParseInstance(%q) = %+v, %v; want %+v", s, got, err, want)
		}
	}
	bad := map[string]string{
		"":               `"" is not one of wrr, wlc, wlc-random, p2c-ewma, sticky, sticky-cookie, static-rr, roundrobin, leastconn, first, random, random(N), source, ring_hash, uri, uri whole, hdr(<name>), url_param(<name>)`,
		"fastest":        `"fastest" is not one of wrr, wlc, wlc-random, p2c-ewma, sticky, sticky-cookie, static-rr, roundrobin, leastconn, first, random, random(N), source, ring_hash, uri, uri whole, hdr(<name>), url_param(<name>)`,
		"random(1)":      `"random(1)": N in random(N) must be an integer in 2..10`,
		"random(11)":     `"random(11)": N in random(N) must be an integer in 2..10`,
		"random(16)":     `"random(16)": N in random(N) must be an integer in 2..10`,
		"random(x)":      `"random(x)": N in random(N) must be an integer in 2..10`,
		"random(3":       `"random(3" is not one of wrr, wlc, wlc-random, p2c-ewma, sticky, sticky-cookie, static-rr, roundrobin, leastconn, first, random, random(N), source, ring_hash, uri, uri whole, hdr(<name>), url_param(<name>)`,
		"hdr()":          `"hdr()": the name in hdr(<name>) must be an HTTP header name (a token), have ""`,
		"hdr(x y)":       `"hdr(x y)": the name in hdr(<name>) must be an HTTP header name (a token), have "x y"`,
		"hdr(a:b)":       `"hdr(a:b)": the name in hdr(<name>) must be an HTTP header name (a token), have "a:b"`,
		"url_param()":    `"url_param()": the name in url_param(<name>) must be a non-empty query parameter name without "&", "=", "#", "?", spaces or control characters, have ""`,
		"url_param(a=b)": `"url_param(a=b)": the name in url_param(<name>) must be a non-empty query parameter name without "&", "=", "#", "?", spaces or control characters, have "a=b"`,
		"url_param(a b)": `"url_param(a b)": the name in url_param(<name>) must be a non-empty query parameter name without "&", "=", "#", "?", spaces or control characters, have "a b"`,
		"uri  whole":     `"uri  whole" is not one of wrr, wlc, wlc-random, p2c-ewma, sticky, sticky-cookie, static-rr, roundrobin, leastconn, first, random, random(N), source, ring_hash, uri, uri whole, hdr(<name>), url_param(<name>)`,
		"hdr(x":          `"hdr(x" is not one of wrr, wlc, wlc-random, p2c-ewma, sticky, sticky-cookie, static-rr, roundrobin, leastconn, first, random, random(N), source, ring_hash, uri, uri whole, hdr(<name>), url_param(<name>)`,
		"WRR":            `"WRR" is not one of wrr, wlc, wlc-random, p2c-ewma, sticky, sticky-cookie, static-rr, roundrobin, leastconn, first, random, random(N), source, ring_hash, uri, uri whole, hdr(<name>), url_param(<name>)`,
	}
	for s, want := range bad {
		if _, err := ParseInstance(s); err == nil || err.Error() != want {
			t.Errorf("ParseInstance(%q) error = %v; want %s", s, err, want)
		}
	}
}

func TestParseModeKeyHashType(t *testing.T) {
	for s, want := range map[string]Mode{"consistent": Consistent, "bfe": BFE, "request": Request} {
		if got, err := ParseMode(s); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseMode(""); err == nil || err.Error() != `"" is not one of consistent, bfe, request` {
		t.Errorf("ParseMode(\"\") error = %v", err)
	}
	for s, want := range map[string]Key{"client_ip": KeyClientIP, "header": KeyHeader, "header_or_ip": KeyHeaderOrIP, "uri": KeyURI} {
		got, err := ParseKey(s)
		if err != nil || got != want || got.NeedsHeader() != (want == KeyHeader || want == KeyHeaderOrIP) {
			t.Errorf("ParseKey(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseKey("cookie"); err == nil || err.Error() != `"cookie" is not one of client_ip, header, header_or_ip, uri` {
		t.Errorf("ParseKey(cookie) error = %v", err)
	}
	for s, want := range map[string]HashType{"": MapBased, "map-based": MapBased, "consistent": ConsistentHash} {
		if got, err := ParseHashType(s); err != nil || got != want {
			t.Errorf("ParseHashType(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseHashType("ring"); err == nil || err.Error() != `"ring" is not one of map-based, consistent` {
		t.Errorf("ParseHashType(ring) error = %v", err)
	}
}

// FuzzParseInstance: the parser never panics; what it accepts it accepts
// exactly (a hdr or url_param name is a valid one, random(N) in range), and
// every refusal names the value it was given.
func FuzzParseInstance(f *testing.F) {
	for _, s := range []string{"wrr", "random(2)", "random(0)", "random(-1)", "random(99999999999999999999)", "uri", "uri whole",
		"uri whole ", "hdr(X-User)", "hdr()", "hdr(()", "hdr(a)b)", "url_param(id)", "url_param(a&b)", "url_param(\x00)",
		"url_param(é)", "ring_hash", "source", "hdr(Cookie:x)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		in, err := ParseInstance(s)
		if err != nil {
			if !strings.Contains(err.Error(), strconv.Quote(s)) {
				t.Fatalf("ParseInstance(%q) error %q does not name the value", s, err)
			}
			return
		}
		switch in.Algo {
		case Hdr:
			if !IsToken(in.Param) {
				t.Fatalf("ParseInstance(%q) accepted header name %q", s, in.Param)
			}
		case URLParam:
			if in.Param == "" || strings.ContainsAny(in.Param, "&=#? ") {
				t.Fatalf("ParseInstance(%q) accepted parameter %q", s, in.Param)
			}
		case Random:
			if in.Choices < 1 || in.Choices > MaxRandomChoices {
				t.Fatalf("ParseInstance(%q) accepted %d choices", s, in.Choices)
			}
		default:
			if in.Param != "" {
				t.Fatalf("ParseInstance(%q) = %+v: a parameter on %v", s, in, in.Algo)
			}
		}
	})
}

package balance

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// hreq is a request as the fronts build it (RequestURI set, URL parsed).
func hreq(t *testing.T, target string, hdr ...string) *http.Request {
	t.Helper()
	u, err := url.ParseRequestURI(target)
	if err != nil {
		t.Fatal(err)
	}
	r := &http.Request{Method: http.MethodGet, RequestURI: target, URL: u, Header: http.Header{}}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	return r
}

// pickFor is one first pick of req's instance.
func (e *env) pickFor(req *http.Request) netip.AddrPort {
	e.t.Helper()
	s := e.cluster().NewSelection(req, netip.MustParseAddr("192.0.2.1"))
	defer s.Release()
	p, err := s.Next()
	if err != nil {
		e.t.Fatalf("pick %s: %v", req.RequestURI, err)
	}
	p.Done(Result{Status: 200})
	return p.Endpoint().Addr()
}

// HAProxy's hash modes, map-based and consistent: the key's request part
// decides the instance (uri: the path, query ignored unless "uri whole";
// hdr(<name>): the header's value; url_param(<name>): the parameter's raw
// value), requests with the same key always land together, different keys
// spread over every instance, and a request without the key (header or
// parameter absent or empty) is balanced round robin: with four equal
// instances, four such requests in a row visit all four.
func TestRequestHashModes(t *testing.T) {
	type sameDiff struct {
		same [][2]*http.Request // pairs that must land together
		keys func(i int) *http.Request
		none []*http.Request // requests without a key
	}
	cases := map[string]sameDiff{
		"uri": {
			same: [][2]*http.Request{{hreq(t, "/a/b?x=1"), hreq(t, "/a/b?x=2")}, {hreq(t, "/a/b"), hreq(t, "/a/b?")}},
			keys: func(i int) *http.Request { return hreq(t, fmt.Sprintf("/item/%d?q=1", i)) },
		},
		"uri whole": {
			same: [][2]*http.Request{{hreq(t, "/a?x=1"), hreq(t, "/a?x=1", "X-Other", "y")}},
			keys: func(i int) *http.Request { return hreq(t, fmt.Sprintf("/a?x=%d", i)) },
		},
		"hdr(x-user)": {
			same: [][2]*http.Request{{hreq(t, "/a", "X-User", "alice"), hreq(t, "/b?z=1", "X-User", "alice", "X-User", "bob")}},
			keys: func(i int) *http.Request { return hreq(t, "/", "X-User", fmt.Sprint("user-", i)) },
			none: []*http.Request{hreq(t, "/"), hreq(t, "/", "X-User", ""), hreq(t, "/", "X-Users", "alice")},
		},
		"url_param(uid)": {
			same: [][2]*http.Request{{hreq(t, "/a?uid=42"), hreq(t, "/b?x=1&uid=42&uid=7")}, {hreq(t, "/?uid=a%20b"), hreq(t, "/c?uid=a%20b")}},
			keys: func(i int) *http.Request { return hreq(t, fmt.Sprintf("/p?a=1&uid=%d", i)) },
			none: []*http.Request{hreq(t, "/p"), hreq(t, "/p?uid="), hreq(t, "/p?uid"), hreq(t, "/p?UID=1"), hreq(t, "/p?xuid=1")},
		},
	}
	for mode, tc := range cases {
		for _, ht := range []string{"map-based", "consistent"} {
			t.Run(mode+"/"+ht, func(t *testing.T) {
				pol := policy(nil)
				pol.Balance.Instance, pol.Balance.HashType = mode, ht
				e := newEnv(t, snap(1, pol, 0, sc{name: "A", weight: 100, weights: ones(4)}))
				for _, p := range tc.same {
					for range 3 {
						if a, b := e.pickFor(p[0]), e.pickFor(p[1]); a != b {
							t.Fatalf("%s went to %s, %s to %s; want together", p[0].RequestURI, a, p[1].RequestURI, b)
						}
					}
				}
				seen := map[netip.AddrPort]bool{}
				for i := range 200 {
					req := tc.keys(i)
					a := e.pickFor(req)
					if b := e.pickFor(req); a != b {
						t.Fatalf("key %d: %s then %s", i, a, b)
					}
					seen[a] = true
				}
				if len(seen) != 4 {
					t.Fatalf("200 keys used %d of 4 instances", len(seen))
				}
				for _, req := range tc.none {
					rr := map[netip.AddrPort]bool{}
					for range 4 {
						rr[e.pickFor(req)] = true
					}
					if len(rr) != 4 {
						t.Fatalf("%s %v without a key: 4 picks visited %d instances, want round robin over 4", req.RequestURI, req.Header, len(rr))
					}
				}
			})
		}
	}
}

// hash_type consistent: draining one of five instances moves only its keys;
// map-based (modulo the available weight) moves most of the others' too,
// as HAProxy's map-based does.
func TestRequestHashConsistentVersusMapBased(t *testing.T) {
	for _, ht := range []string{"consistent", "map-based"} {
		t.Run(ht, func(t *testing.T) {
			pol := policy(nil)
			pol.Balance.Instance, pol.Balance.HashType = "hdr(X-User)", ht
			e := newEnv(t, snap(1, pol, 0, sc{name: "A", weight: 100, weights: ones(5)}))
			const keys = 2000
			req := func(i int) *http.Request { return hreq(t, "/", "X-User", fmt.Sprint("u", i)) }
			before := make([]netip.AddrPort, keys)
			for i := range before {
				before[i] = e.pickFor(req(i))
			}
			down := inst(1, 2)
			if err := e.reg.SetOverride(down, Override{Drain: true}); err != nil {
				t.Fatal(err)
			}
			others := 0
			for i := range before {
				now := e.pickFor(req(i))
				if now == down {
					t.Fatalf("key %d on the drained %s", i, down)
				}
				if before[i] != down && now != before[i] {
					others++
				}
			}
			switch {
			case ht == "consistent" && others != 0:
				t.Fatalf("consistent: %d keys of live instances moved", others)
			case ht == "map-based" && others < keys/4:
				t.Fatalf("map-based: only %d of %d keys of live instances moved; modulo hashing moves most", others, keys)
			}
			t.Logf("%s: %d of %d keys of live instances moved", ht, others, keys)
		})
	}
}

// The request hash modes pick without allocating.
func TestRequestHashPickAllocs(t *testing.T) {
	for _, mode := range []string{"uri", "hdr(X-User)", "url_param(uid)"} {
		pol := policy(nil)
		pol.Balance.Instance, pol.Balance.HashType = mode, "consistent"
		e := newEnv(t, snap(1, pol, 0, sc{name: "A", weight: 100, weights: ones(8)}))
		req := hreq(t, "/p/q?a=1&uid=77", "X-User", "alice")
		c := e.cluster()
		var s Selection
		if n := testing.AllocsPerRun(200, func() {
			c.Start(&s, req, netip.MustParseAddr("192.0.2.1"), 0)
			p, err := s.Next()
			if err == nil {
				p.Done(Result{Status: 200})
			}
			s.Release()
		}); n != 0 {
			t.Errorf("%s: %.1f allocs per pick, want 0", mode, n)
		}
	}
}

func TestQueryParam(t *testing.T) {
	for q, want := range map[string]string{
		"uid=1": "1", "a=2&uid=1&uid=3": "1", "uid": "", "uid=": "", "xuid=1&uid=2": "2", "": "",
		"&&uid=%41": "%41", "a=b=c&uid=x=y": "x=y",
	} {
		if got := queryParam(q, "uid"); got != want {
			t.Errorf("queryParam(%q, uid) = %q, want %q", q, got, want)
		}
	}
	if strings.Contains(queryParam("uid=1", "UID"), "1") {
		t.Error("parameter names are case-sensitive")
	}
}

// queryParam is the pair-by-pair reading (cut the query at "&", each pair
// at its first "=") for every query over a small alphabet of names,
// separators and values, and every valid name (no "&" or "=") of it.
func TestQueryParamIsPairByPair(t *testing.T) {
	ref := func(q, name string) string {
		for q != "" {
			var pair string
			pair, q, _ = strings.Cut(q, "&")
			if k, v, ok := strings.Cut(pair, "="); ok && k == name {
				return v
			}
		}
		return ""
	}
	const alphabet = "ui=&"
	var queries []string
	var grow func(q string)
	grow = func(q string) {
		queries = append(queries, q)
		if len(q) < 7 {
			for _, c := range alphabet {
				grow(q + string(c))
			}
		}
	}
	grow("")
	for _, name := range []string{"u", "i", "ui", "uu", "iu", "uiu"} {
		for _, q := range queries {
			if got, want := queryParam(q, name), ref(q, name); got != want {
				t.Fatalf("queryParam(%q, %q) = %q, want %q", q, name, got, want)
			}
		}
	}
}

package balance

import (
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

// FuzzHashKey extracts hash keys (policy.balance.hash) from requests built
// of fuzzed header names, header values, cookies, URIs and client
// addresses, and checks what the key means:
//   - header: ok exactly when the header (or Cookie:<name> cookie) has a
//     value, and the hash is that value's; header_or_ip falls back to the
//     client IP's hash; client_ip hashes the address (IPv4-mapped = IPv4);
//     uri hashes the request URI;
//   - HAProxy's uri hashes the URI before "?" (uri whole: all of it);
//     hdr(<name>) is ok exactly when the header's first value is non-empty;
//     url_param(<name>) exactly when the query has <name>=<non-empty>;
//   - extraction is a pure function: the same request hashes the same twice,
//     and nothing panics, whatever the bytes.
func FuzzHashKey(f *testing.F) {
	f.Add("X-User", "alice", "sid=abc; other=1", "/a?b=c", []byte{10, 0, 0, 1}, false)
	f.Add("x-user", "", "", "/", []byte{}, true)
	f.Add("Cookie:sid", "v", "sid=abc", "/p", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1}, false)
	f.Add("Cookie:", "", "=; ;;=x", "", []byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, true)
	f.Add(strings.Repeat("X", 300), strings.Repeat("v", 70000), "a=\"quoted\"", "http://h/abs?x", []byte{127, 0, 0, 1}, false)
	f.Add("uid", "", "", "/p?a=1&uid=42&uid=7", []byte{10, 0, 0, 1}, false)
	f.Add("uid", "x", "", "/p?uid=&uid=2", []byte{}, true)
	f.Add("a", "", "", "/?a=b=c&&a=d", []byte{}, false)
	f.Add("X-\xff", "\x00\r\n", "sid=\xff", "%zz", []byte{1, 2, 3}, true)
	f.Fuzz(func(t *testing.T, header, value, cookie, uri string, ipb []byte, setHeader bool) {
		req := &http.Request{Method: http.MethodGet, Header: http.Header{}, RequestURI: uri, URL: &url.URL{Path: uri}}
		if setHeader {
			req.Header[http.CanonicalHeaderKey(header)] = []string{value}
		}
		if cookie != "" {
			req.Header["Cookie"] = []string{cookie}
		}
		if _, q, ok := strings.Cut(uri, "?"); ok {
			req.URL.RawQuery = q
		}
		ip, _ := netip.AddrFromSlice(ipb)
		checkInstKeys(t, req, header, uri)
		for _, kind := range []string{config.HashHeader, config.HashHeaderOrIP, config.HashClientIP, config.HashURI, ""} {
			k := compileKey(config.Hash{Key: kind, Header: header})
			h, ok := k.hash(req, ip)
			if h2, ok2 := k.hash(req, ip); h != h2 || ok != ok2 {
				t.Fatalf("key %q header %q: hash not deterministic (%x,%v then %x,%v)", kind, header, h, ok, h2, ok2)
			}
			v := k.value(req)
			if name, isCookie := strings.CutPrefix(header, "Cookie:"); isCookie {
				want := ""
				if c, err := req.Cookie(name); err == nil {
					want = c.Value
				}
				if v != want {
					t.Fatalf("cookie key %q: value %q, want %q", name, v, want)
				}
			} else if want := req.Header.Get(header); v != want {
				t.Fatalf("header key %q: value %q, want %q", header, v, want)
			}
			ipHash, ipOK := uint64(0), ip.IsValid()
			if ipOK {
				ipHash = hashAddr(ip)
				if ip.Is4In6() && hashAddr(ip.Unmap()) != ipHash {
					t.Fatalf("IPv4-mapped %s hashes apart from %s", ip, ip.Unmap())
				}
			}
			switch kind {
			case config.HashHeader:
				if ok != (v != "") || ok && h != hashString(v) {
					t.Fatalf("header key %q value %q: hash %x ok %v", header, v, h, ok)
				}
			case config.HashHeaderOrIP:
				switch {
				case v != "":
					if !ok || h != hashString(v) {
						t.Fatalf("header_or_ip with value %q: hash %x ok %v", v, h, ok)
					}
				case ok != ipOK || ok && h != ipHash:
					t.Fatalf("header_or_ip without a value, ip %v: hash %x ok %v, want the IP's", ip, h, ok)
				}
			case config.HashClientIP, "":
				if ok != ipOK || ok && h != ipHash {
					t.Fatalf("client_ip %v: hash %x ok %v", ip, h, ok)
				}
			case config.HashURI:
				want := hashString(uri)
				if uri == "" {
					want = hashString(req.URL.Path)
				}
				if !ok || h != want {
					t.Fatalf("uri %q: hash %x ok %v, want %x", uri, h, ok, want)
				}
			}
		}
	})
}

func checkInstKeys(t *testing.T, req *http.Request, name, uri string) {
	path, _, _ := strings.Cut(uri, "?")
	canon := http.CanonicalHeaderKey(name)
	for _, k := range []instKey{{algo: algoURI}, {algo: algoURI, whole: true}, {algo: algoHdr, param: canon}, {algo: algoURLParam, param: name}} {
		h, ok := k.hash(req)
		if h2, ok2 := k.hash(req); h != h2 || ok != ok2 {
			t.Fatalf("%+v: not deterministic", k)
		}
		switch {
		case k.algo == algoURI && uri != "":
			want := hashString(path)
			if k.whole {
				want = hashString(uri)
			}
			if !ok || h != want {
				t.Fatalf("%+v on %q: hash %x ok %v, want %x", k, uri, h, ok, want)
			}
		case k.algo == algoHdr:
			v := req.Header[canon]
			if want := len(v) > 0 && v[0] != ""; ok != want || ok && h != hashString(v[0]) {
				t.Fatalf("hdr(%s) with %q: ok %v", name, v, ok)
			}
		case k.algo == algoURLParam:
			want := ""
			for _, pair := range strings.Split(req.URL.RawQuery, "&") {
				if kk, v, found := strings.Cut(pair, "="); found && kk == name {
					want = v
					break
				}
			}
			if ok != (want != "") || ok && h != hashString(want) {
				t.Fatalf("url_param(%s) on %q: ok %v, want value %q", name, req.URL.RawQuery, ok, want)
			}
		}
	}
}

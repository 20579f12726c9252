package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/sluicelb/sluice/api/config"
)

// headerLines is a fasthttp response header's field lines, sorted, with
// the status line and fasthttp's own Date left out.
func headerLines(h *fasthttp.ResponseHeader) []string {
	var lines []string
	for _, l := range strings.Split(string(h.Header()), "\r\n")[1:] {
		if l != "" && !strings.HasPrefix(l, "Date: ") {
			lines = append(lines, l)
		}
	}
	slices.Sort(lines)
	return lines
}

// TestWriteHeaderSetsAsAddWould: WriteHeader gives fasthttp a canonical
// single-valued name with SetCanonical (no copy, no normalizing), which
// replaces a field of that name; Add appends. The header fasthttp gets is
// the one Add alone makes, in whatever order the map yields the names:
// names two of which normalize alike ("x-dup" and "X-Dup"), repeated
// fields, names fasthttp handles itself (Server, Set-Cookie,
// Content-Encoding) and a name that is no token.
func TestWriteHeaderSetsAsAddWould(t *testing.T) {
	src := http.Header{
		"Cache-Control":    {"no-cache"},
		"Etag":             {`"abc"`},
		"x-dup":            {"lower"},
		"X-Dup":            {"canonical"},
		"X-DUP":            {"upper"},
		"Vary":             {"Accept", "Accept-Encoding"},
		"Server":           {"backend/1"},
		"Set-Cookie":       {"a=1"},
		"Content-Encoding": {"gzip"},
		"X-Sp ace":         {"v"},
		"X-Request-Id":     {"42"},
		"A":                {"1"},
	}
	var want fasthttp.ResponseHeader
	want.SetNoDefaultContentType(true)
	for k, vv := range src {
		for _, v := range vv {
			want.Add(k, v)
		}
	}
	wantLines := headerLines(&want)
	for i := range 200 { // map order varies: every name first and last
		var ctx fasthttp.RequestCtx
		ctx.Response.Header.SetNoDefaultContentType(true)
		a := &fastAdapter{ctx: &ctx, h: src.Clone()}
		a.req.Method = http.MethodGet
		a.WriteHeader(http.StatusOK)
		if got := headerLines(&ctx.Response.Header); !slices.Equal(got, wantLines) {
			t.Fatalf("run %d: fasthttp's header\n%q\nwant (Add alone)\n%q", i, got, wantLines)
		}
	}
}

func TestFastCanonical(t *testing.T) {
	for k, want := range map[string]bool{
		"Cache-Control": true, "Etag": true, "A": true, "X-1": true, "X--Y": true, "-": true, "Www-Authenticate": true,
		"": false, "cache-control": false, "Cache-control": false, "ETag": false, "X-Sp ace": false, "Caché": false, "X-a": false,
	} {
		if got := fastCanonical(k); got != want {
			t.Errorf("fastCanonical(%q) = %v, want %v", k, got, want)
		}
		if ok := fastCanonical(k); ok && http.CanonicalHeaderKey(k) != k {
			t.Errorf("fastCanonical(%q) but net/http canonicalizes it to %q", k, http.CanonicalHeaderKey(k))
		}
	}
}

// fieldAnswers are raw backend answers by request path: header shapes
// net/http's own servers never send (names in any case, repeated fields,
// hop-by-hop fields and those a Connection field names, X-Accel-Buffering
// once and twice, over 16 fields).
var fieldAnswers = map[string]string{
	"/mixed": "HTTP/1.1 200 OK\r\nx-dup: lower\r\nX-Dup: canonical\r\nSet-Cookie: a=1\r\nset-cookie: b=2\r\n" +
		"Vary: Accept\r\nVary: Accept-Encoding\r\nServer: backend/1\r\nContent-Type: text/plain\r\n" +
		"Cache-Control: no-cache\r\nConnection: keep-alive, X-Hop\r\nX-Hop: h\r\nKeep-Alive: timeout=5\r\n" +
		"X-Accel-Buffering: no\r\nEtag: \"e\"\r\nContent-Length: 2\r\n\r\nok",
	"/accel-twice": "HTTP/1.1 200 OK\r\nX-Accel-Buffering: yes\r\nX-A: 1\r\nX-Accel-Buffering: no\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok",
	"/many":        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n" + strings.Repeat("X-R: r\r\nx-s: s\r\nX-T: t\r\n", 7) + "Content-Length: 2\r\n\r\nok",
	"/upper":       "HTTP/1.1 201 Created\r\nCONTENT-TYPE: text/plain\r\nX-UP: U\r\nLOCATION: /x\r\nContent-Length: 2\r\n\r\nok",
}

// TestFrontsRelayBackendFieldsAlike: the fasthttp front writes the
// backend's fields (forward.Fields) straight into fasthttp's header, the
// std front gets them through its header map: the client sees the same
// header (every field, sorted, Date left out) and body from both.
func TestFrontsRelayBackendFieldsAlike(t *testing.T) {
	addr := rawListen(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			ans, ok := fieldAnswers[req.URL.Path]
			if !ok {
				ans = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
			}
			if req.Method == http.MethodHead {
				ans = ans[:strings.Index(ans, "\r\n\r\n")+4]
			}
			if _, err := io.WriteString(c, ans); err != nil {
				return
			}
		}
	}, nil)
	snap := testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(addr, 1)}},
		map[string]int{"SC1": 100}, nil))
	o := Options{UpstreamClient: UpstreamFast}
	std := newProxy(t, snap, proxyOpts{frontKind: FrontStd, opts: o})
	fast := newProxy(t, snap, proxyOpts{frontKind: FrontFastHTTP, opts: o})
	dump := func(c *http.Client, method, url string) string {
		res, b := demoExchange(t, c, method, url, nil, -1, nil)
		var lines []string
		for k, vv := range res.Header {
			if k == "Date" {
				continue
			}
			for _, v := range vv {
				lines = append(lines, k+": "+v)
			}
		}
		slices.Sort(lines)
		return fmt.Sprintf("%d %q len=%d body=%q", res.StatusCode, lines, res.ContentLength, b)
	}
	cs, cf := client(t), client(t)
	want := map[string]string{
		"GET /mixed": `200 ["Cache-Control: no-cache" "Content-Length: 2" "Content-Type: text/plain" "Etag: \"e\"" ` +
			`"Server: backend/1" "Set-Cookie: a=1" "Set-Cookie: b=2" "Vary: Accept" "Vary: Accept-Encoding" "X-Dup: canonical" "X-Dup: lower"] len=2 body="ok"`,
		"GET /accel-twice": `200 ["Content-Length: 2" "Content-Type: text/plain" "X-A: 1"] len=2 body="ok"`,
		"GET /upper":       `201 ["Content-Length: 2" "Content-Type: text/plain" "Location: /x" "X-Up: U"] len=2 body="ok"`,
		"HEAD /mixed": `200 ["Cache-Control: no-cache" "Content-Length: 2" "Content-Type: text/plain" "Etag: \"e\"" ` +
			`"Server: backend/1" "Set-Cookie: a=1" "Set-Cookie: b=2" "Vary: Accept" "Vary: Accept-Encoding" "X-Dup: canonical" "X-Dup: lower"] len=2 body=""`,
	}
	for _, method := range []string{"GET", "HEAD"} {
		for _, path := range []string{"/mixed", "/accel-twice", "/many", "/upper"} {
			ds, df := dump(cs, method, std.url+path), dump(cf, method, fast.url+path)
			if ds != df {
				t.Errorf("%s %s: fronts differ:\nstd:      %s\nfasthttp: %s", method, path, ds, df)
			}
			if w, ok := want[method+" "+path]; ok && df != w {
				t.Errorf("%s %s: fasthttp front answered\n%s\nwant\n%s", method, path, df, w)
			}
		}
	}
}

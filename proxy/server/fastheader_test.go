package server

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
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

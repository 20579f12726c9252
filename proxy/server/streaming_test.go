package server

import (
	"io"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
)

// slowBody is a backend that sends its header (and first, a part of its
// body) at once and the rest only when the test releases it (or the request
// is abandoned). So whatever the client has before the release was relayed
// while the backend still held the rest: no timing is involved.
func slowBody(t *testing.T, sized bool, first, rest string, hdr map[string]string) (*backend, chan struct{}) {
	release := make(chan struct{})
	b := newBackend(t, "slow", func(w http.ResponseWriter, r *http.Request) {
		if sized {
			w.Header().Set("Content-Length", strconv.Itoa(len(first)+len(rest)))
		}
		for k, v := range hdr {
			w.Header().Set(k, v)
		}
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, first)
		http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, rest)
	})
	return b, release
}

// Issue 17.2: the backend's header reaches the client as soon as it arrived,
// not with the first body byte, whether the body is sized or chunked.
func TestResponseHeaderNotHeldForBody(t *testing.T) {
	for _, sized := range []bool{true, false} {
		t.Run("sized="+strconv.FormatBool(sized), func(t *testing.T) {
			b, release := slowBody(t, sized, "", "the body", nil)
			p := newProxy(t, testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}},
				map[string]int{"SC1": 100}, nil)), proxyOpts{})
			req, _ := http.NewRequest(http.MethodGet, p.url+"/", nil)
			req.Host = "demo.test"
			// The backend holds its body until release: a proxy that held
			// the header for the first body byte would never answer, and
			// the client gives up after its 20 s timeout.
			start := time.Now()
			res, err := client(t).Do(req)
			took := time.Since(start)
			close(release)
			if err != nil {
				t.Fatalf("no header while the backend held its body: %v", err)
			}
			t.Logf("header after %s", took)
			body, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil || string(body) != "the body" || res.StatusCode != http.StatusOK {
				t.Fatalf("answer %d %q %v", res.StatusCode, body, err)
			}
		})
	}
}

// Issue 17.2: a body streams as it comes — the part the backend sent
// reaches the client while the backend still holds the rest — and
// X-Accel-Buffering is a policy for the proxy, never relayed.
func TestBodyStreamsAsItComes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sized bool
		hdr   map[string]string
	}{
		{"chunked", false, nil},
		{"chunked-accel-no", false, map[string]string{AccelBuffering: "no"}},
		{"sized", true, nil},
		{"sized-accel-no", true, map[string]string{AccelBuffering: "no"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.sized && os.Getenv(frontEnv) == FrontFastHTTP {
				// fasthttp writes a sized stream through its 4 KiB buffer
				// (docs/lbproxy.md, "Streaming").
				t.Skip("the fasthttp front coalesces a sized body's writes")
			}
			b, release := slowBody(t, tc.sized, "first;", "second", tc.hdr)
			defer close(release)
			p := newProxy(t, testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}},
				map[string]int{"SC1": 100}, nil)), proxyOpts{})
			req, _ := http.NewRequest(http.MethodGet, p.url+"/", nil)
			req.Host = "demo.test"
			start := time.Now()
			res, err := client(t).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			if v, ok := res.Header[AccelBuffering]; ok {
				t.Errorf("%s relayed to the client: %q", AccelBuffering, v)
			}
			// The backend holds "second" until release (deferred): a proxy
			// that buffered the body would not give "first;" before the
			// client's 20 s timeout.
			buf := make([]byte, len("first;"))
			if _, err := io.ReadFull(res.Body, buf); err != nil || string(buf) != "first;" {
				t.Fatalf("first part %q while the backend held the rest: %v", buf, err)
			}
			t.Logf("first part after %s", time.Since(start))
		})
	}
}

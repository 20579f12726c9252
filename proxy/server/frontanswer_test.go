package server

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/testkit/poll"
)

// Issue 17.5: the answers the fasthttp front makes itself — 400, 408, 431 —
// carry the reason header, get an access-log line and are counted by
// reason in sluice_proxy_generated_responses_total; a 413 the same.
func TestFrontGeneratedAnswersVisible(t *testing.T) {
	b := newBackend(t, "b1", nil)
	var buf syncBuffer
	reg := prometheus.NewRegistry()
	snap := testSnapshot(3, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}}, map[string]int{"SC1": 100}, nil))
	p := newProxy(t, snap, proxyOpts{
		opts:      Options{UpstreamClient: UpstreamFast, AccessLog: slog.New(slog.NewJSONHandler(&buf, nil)), Metrics: reg, MaxBodyBytes: 1024},
		front:     FrontOptions{MaxHeaderBytes: 4096, ReadHeaderTimeout: 300 * time.Millisecond},
		frontKind: FrontFastHTTP,
	})
	checkGenerated(t, p, &buf, b, []genCase{
		{"GET / HTTP/1.1\r\nHost: demo.test\r\nX-Big: " + strings.Repeat("a", 16<<10) + "\r\n\r\n", "431", CodeHeaderTooLarge, ""},
		{"GET / HTTP/1.1\r\nHost: demo.test\r\nBad Header\r\n\r\n", "400", CodeBadRequest, ""},
		{"GET / HTTP/1.1\r\nHost: demo.test\r\nX-Slow: a", "408", CodeClientTimeout, ""},
		{"POST / HTTP/1.1\r\nHost: demo.test\r\nContent-Length: 2048\r\n\r\n" + strings.Repeat("b", 2048), "413", CodeBodyTooLarge, "main"},
	})
}

type genCase struct {
	raw    string
	status string
	code   string
	cl     string // cluster label of the count
}

// checkGenerated sends each raw request on its own connection and checks its
// answer carries the reason header, is counted once by code and has an
// access-log line, and that the backend saw none of them.
func checkGenerated(t *testing.T, p *proxy, buf *syncBuffer, b *backend, cases []genCase) {
	t.Helper()
	hits := b.hits.Load()
	for i, tc := range cases {
		status, rest := rawExchange(t, p.addr, tc.raw)
		if !strings.HasPrefix(status, "HTTP/1.1 "+tc.status) || !strings.Contains(rest, ReasonHeader+": "+tc.code+"\r\n") {
			t.Errorf("case %d: %q %q, want %s with %s: %s", i, status, rest, tc.status, ReasonHeader, tc.code)
		}
		if n := testutil.ToFloat64(p.s.metrics.generated.WithLabelValues(tc.cl, tc.code)); n != 1 {
			t.Errorf("case %d: generated_responses_total{cluster=%q,code=%q} = %v, want 1", i, tc.cl, tc.code, n)
		}
	}
	lines := buf.lines(t)
	if len(lines) != len(cases) {
		t.Fatalf("%d access lines, want %d: %v", len(lines), len(cases), lines)
	}
	for i, tc := range cases {
		if st := lines[i]["status"]; st != float64(atoi(tc.status)) || lines[i]["error_code"] != tc.code {
			t.Errorf("access line %d: status %v error_code %v, want %s %s (%v)", i, st, lines[i]["error_code"], tc.status, tc.code, lines[i])
		}
		if lines[i]["client_ip"] != "127.0.0.1" || lines[i]["version"] != float64(3) {
			t.Errorf("access line %d: %v, want client_ip 127.0.0.1 and version 3", i, lines[i])
		}
	}
	if n := b.hits.Load() - hits; n != 0 {
		t.Fatalf("backend saw %d of these requests, want 0", n)
	}
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// Issue 17.6 on --front std: net/http's own answers to requests it cannot
// read (431, 400) carry the reason header, get an access-log line and are
// counted, as on the fasthttp front. A backend's own 400, relayed on a
// kept-alive connection, is not mistaken for one.
func TestStdFrontGeneratedAnswersVisible(t *testing.T) {
	b := newBackend(t, "b1", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, "backend says no")
	})
	var buf syncBuffer
	reg := prometheus.NewRegistry()
	snap := testSnapshot(3, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}}, map[string]int{"SC1": 100}, nil))
	p := newProxy(t, snap, proxyOpts{
		opts:      Options{AccessLog: slog.New(slog.NewJSONHandler(&buf, nil)), Metrics: reg, MaxBodyBytes: 1024},
		front:     FrontOptions{MaxHeaderBytes: 4096},
		frontKind: FrontStd,
	})
	c := client(t)
	for range 2 {
		resp, body := get(t, c, p.url+"/", map[string]string{"Host": "demo.test"})
		if resp.StatusCode != http.StatusBadRequest || body != "backend says no" || resp.Header.Get(ReasonHeader) != "" {
			t.Fatalf("relayed backend 400: %d %q %s=%q", resp.StatusCode, body, ReasonHeader, resp.Header.Get(ReasonHeader))
		}
	}
	if n := testutil.ToFloat64(p.s.metrics.generated.WithLabelValues("", CodeBadRequest)); n != 0 {
		t.Fatalf("a backend's 400 counted as generated (%v)", n)
	}
	var lines []map[string]any
	poll.EventuallyTrue(t, 10*time.Second, "two access lines", func() bool { lines = buf.lines(t); return len(lines) == 2 })
	buf.reset()
	checkGenerated(t, p, &buf, b, []genCase{
		{"GET / HTTP/1.1\r\nHost: demo.test\r\nX-Big: " + strings.Repeat("a", 16<<10) + "\r\n\r\n", "431", CodeHeaderTooLarge, ""},
		{"GET / HTTP/1.1\r\nHost: demo.test\r\nBad Header\r\n\r\n", "400", CodeBadRequest, ""},
	})
}

func (s *syncBuffer) reset() {
	s.mu.Lock()
	s.b.Reset()
	s.mu.Unlock()
}

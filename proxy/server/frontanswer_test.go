package server

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicelb/sluice/api/config"
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
	cases := []struct {
		raw    string
		status string
		code   string
		cl     string // cluster label of the count
	}{
		{"GET / HTTP/1.1\r\nHost: demo.test\r\nX-Big: " + strings.Repeat("a", 16<<10) + "\r\n\r\n", "431", CodeHeaderTooLarge, ""},
		{"GET / HTTP/1.1\r\nHost: demo.test\r\nBad Header\r\n\r\n", "400", CodeBadRequest, ""},
		{"GET / HTTP/1.1\r\nHost: demo.test\r\nX-Slow: a", "408", CodeClientTimeout, ""},
		{"POST / HTTP/1.1\r\nHost: demo.test\r\nContent-Length: 2048\r\n\r\n" + strings.Repeat("b", 2048), "413", CodeBodyTooLarge, "main"},
	}
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
	if n := b.hits.Load(); n != 0 {
		t.Fatalf("backend saw %d requests, want 0", n)
	}
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

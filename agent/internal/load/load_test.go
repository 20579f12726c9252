package load

import (
	"context"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseMetrics(t *testing.T) {
	text := `# HELP http_requests_in_flight In-flight.
# TYPE http_requests_in_flight gauge
http_requests_in_flight 3
http_requests_total{code="200",method="GET"} 100
http_requests_total{code="500",method="GET",path="a}b \"q\""} 5.5 1700000000000
http_requests_total_other 99
other_metric{x="y"} 7
`
	in, total, err := ParseMetrics([]byte(text), DefaultInFlightMetric, DefaultRequestsMetric)
	if err != nil || in != 3 || total != 105.5 {
		t.Fatalf("text: in=%v total=%v err=%v", in, total, err)
	}
	in, total, err = ParseMetrics([]byte(` {"in_flight": 7, "requests_total": 12}`), "", "")
	if err != nil || in != 7 || total != 12 {
		t.Fatalf("json: in=%v total=%v err=%v", in, total, err)
	}
	in, total, err = ParseMetrics([]byte(`{"in_flight": 0}`), "", "")
	if err != nil || in != 0 || !math.IsNaN(total) {
		t.Fatalf("json without counter: in=%v total=%v err=%v", in, total, err)
	}
	bad := []struct{ body, want string }{
		{`{"requests_total": 1}`, "no in-flight value"},
		{`{"in_flight": -1}`, "negative"},
		{`{"in_flight": "x"}`, "json:"},
		{"http_requests_total 5\n", "no http_requests_in_flight series"},
		{"http_requests_in_flight abc\n", `value "abc" is not a number`},
		{"http_requests_in_flight{a=\"b\" 1\n", "unterminated labels"},
	}
	for _, b := range bad {
		if _, _, err := ParseMetrics([]byte(b.body), DefaultInFlightMetric, DefaultRequestsMetric); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Fatalf("%q: want %q, got %v", b.body, b.want, err)
		}
	}
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestBackendFetchRateAndRetries(t *testing.T) {
	var total, calls, failNext atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if failNext.Load() > 0 {
			failNext.Add(-1)
			w.WriteHeader(503)
			return
		}
		io.WriteString(w, "http_requests_in_flight 2\nhttp_requests_total "+itoa(total.Load())+"\n")
	}))
	defer srv.Close()
	clk := &fakeClock{t: time.Unix(1000, 0)}
	b, err := NewBackend(srv.URL, BackendOptions{Now: clk.now, RetryWaitMin: time.Millisecond, RetryWaitMax: 2 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	total.Store(100)
	s, err := b.Fetch(ctx)
	if err != nil || s.InFlight != 2 || s.HaveRPS {
		t.Fatalf("first: %+v %v", s, err)
	}
	clk.t = clk.t.Add(10 * time.Second)
	total.Store(350)
	failNext.Store(2) // two 503s, then success on the last of 3 attempts
	calls.Store(0)
	s, err = b.Fetch(ctx)
	if err != nil || !s.HaveRPS || s.RPS != 25 {
		t.Fatalf("second: %+v %v", s, err)
	}
	if calls.Load() != 3 {
		t.Fatalf("want 3 attempts (2 retries), got %d", calls.Load())
	}
	// Counter reset: no rate, new baseline.
	clk.t = clk.t.Add(10 * time.Second)
	total.Store(10)
	if s, err = b.Fetch(ctx); err != nil || s.HaveRPS {
		t.Fatalf("reset: %+v %v", s, err)
	}
	// Retries are bounded: 1 + RetryMax attempts, then an error.
	failNext.Store(100)
	calls.Store(0)
	if _, err = b.Fetch(ctx); err == nil {
		t.Fatal("want error after retries")
	}
	if calls.Load() != 3 {
		t.Fatalf("want 3 attempts, got %d", calls.Load())
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func TestNewBackendRejectsBadURL(t *testing.T) {
	if _, err := NewBackend("ftp://x", BackendOptions{}); err == nil || !strings.Contains(err.Error(), `metrics url "ftp://x"`) {
		t.Fatalf("got %v", err)
	}
}

func writeProc(t *testing.T, dir, stat, meminfo string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "meminfo"), []byte(meminfo), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestHostSample(t *testing.T) {
	dir := t.TempDir()
	mem := "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    250 kB\n"
	writeProc(t, dir, "cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3 4\n", mem)
	h := NewHost(dir)
	s, err := h.Sample()
	if err != nil || s.HaveCPU || s.MemPercent != 75 {
		t.Fatalf("first: %+v %v", s, err)
	}
	// +300 busy (user 200 + system 100), +100 idle → 75 % busy.
	writeProc(t, dir, "cpu  300 0 200 800 100 0 0 0 0 0\n", mem)
	s, err = h.Sample()
	if err != nil || !s.HaveCPU || s.CPUPercent != 75 {
		t.Fatalf("second: %+v %v", s, err)
	}
	writeProc(t, dir, "intr 1\n", mem)
	if _, err := h.Sample(); err == nil || !strings.Contains(err.Error(), "no aggregate cpu line") {
		t.Fatalf("got %v", err)
	}
	writeProc(t, dir, "cpu  1 1 1 1 1\n", "MemTotal: 10 kB\n")
	if _, err := h.Sample(); err == nil || !strings.Contains(err.Error(), "MemAvailable") {
		t.Fatalf("got %v", err)
	}
}

func TestHostRealProc(t *testing.T) {
	if _, err := os.Stat("/proc/stat"); err != nil {
		t.Fatalf("this test needs Linux /proc: %v", err)
	}
	h := NewHost("")
	s, err := h.Sample()
	if err != nil || s.MemPercent <= 0 || s.MemPercent >= 100 {
		t.Fatalf("%+v %v", s, err)
	}
}

package server

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

// syncBuffer collects access-log lines written by request goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	if s.b.Len() == 0 {
		return nil
	}
	for _, l := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("access line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// One slog JSON line per request with the decision fields: a request that
// failed to connect in SC1 and succeeded by cross retry in SC2, then a
// generated 502 whose error code is in the line.
func TestAccessLogLine(t *testing.T) {
	be := newBackend(t, "b2", nil)
	dead := deadAddr(t)
	var buf syncBuffer
	cl := testCluster(map[string][]config.Instance{"SC1": {inst(dead, 1)}, "SC2": {inst(be.addr, 1)}},
		map[string]int{"SC1": 100}, func(p *config.Policy) {
			p.Retry.RetryMax, p.Retry.CrossRetry, p.Retry.BudgetPercent = 0, 1, 100
		})
	p := newProxy(t, testSnapshot(7, cl), proxyOpts{opts: Options{AccessLog: slog.New(slog.NewJSONHandler(&buf, nil))}})
	c := client(t)
	if res, _ := get(t, c, p.url+"/x?q=1", nil); res.StatusCode != http.StatusOK {
		t.Fatalf("cross-retried request: %d", res.StatusCode)
	}
	be.srv.Close() // now nothing answers: a generated 502
	if res, _ := get(t, c, p.url+"/y", nil); res.StatusCode != http.StatusBadGateway {
		t.Fatalf("request with every instance dead: %d, want 502", res.StatusCode)
	}
	lines := buf.lines(t)
	if len(lines) != 2 {
		t.Fatalf("%d access lines, want 2: %v", len(lines), lines)
	}
	want := []map[string]any{{
		"level": "INFO", "msg": "request", "method": "GET", "host": "demo.test", "path": "/x",
		"client_ip": "127.0.0.1", "version": 7.0, "product": "demo", "rule": "all", "cluster": "main",
		"subcluster": "SC2", "instance": be.addr.String(), "algorithm": "wrr", "pick_reason": "cross-retry",
		"attempts": 2.0, "status": 200.0, "error_code": "",
	}, {
		"path": "/y", "status": 502.0, "error_code": CodeConnect, "attempts": 2.0,
	}}
	for i, w := range want {
		for k, v := range w {
			if lines[i][k] != v {
				t.Errorf("line %d: %s = %v, want %v (line %v)", i, k, lines[i][k], v, lines[i])
			}
		}
		for _, k := range []string{"time", "duration"} {
			if _, ok := lines[i][k]; !ok {
				t.Errorf("line %d lacks %s: %v", i, k, lines[i])
			}
		}
	}
}

package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

// A retry-on status (policy.retry.on_status) is retried; when no attempt is
// left, the backend's own last answer is relayed unchanged (not an answer
// of the proxy's), on both upstream clients (the suites run this file
// with each).
func TestOnStatusRetriedThenBackendAnswerRelayed(t *testing.T) {
	busy := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Busy", name)
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("busy from " + name))
		}
	}
	b1, b2 := newBackend(t, "b1", busy("b1")), newBackend(t, "b2", busy("b2"))
	p := newProxy(t, testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(b1.addr, 1), inst(b2.addr, 1)}},
		map[string]int{"SC1": 100}, func(p *config.Policy) {
			p.Retry.OnStatus = []int{503}
			p.Retry.RetryMax, p.Retry.CrossRetry = 1, 0
		})), proxyOpts{})
	c := client(t)
	for i := 0; i < 4; i++ {
		res, body := get(t, c, p.url+"/", nil)
		if res.StatusCode != http.StatusServiceUnavailable || !strings.HasPrefix(body, "busy from ") ||
			res.Header.Get(ReasonHeader) != "" || res.Header.Get("X-Busy") != strings.TrimPrefix(body, "busy from ") {
			t.Fatalf("request %d: %d %q %v; want the last backend's own 503", i, res.StatusCode, body, res.Header)
		}
	}
	if got := b1.hits.Load() + b2.hits.Load(); got != 8 {
		t.Fatalf("%d attempts for 4 requests with retry_max 1, want 8", got)
	}

	// With a healthy instance beside the busy one, the kept 503 is dropped
	// and the retry's answer relayed.
	good := newBackend(t, "good", nil)
	p2 := newProxy(t, testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(b1.addr, 1), inst(good.addr, 1)}},
		map[string]int{"SC1": 100}, func(p *config.Policy) {
			p.Retry.OnStatus = []int{503}
			p.Retry.RetryMax, p.Retry.CrossRetry = 1, 0
		})), proxyOpts{})
	for i := 0; i < 4; i++ {
		res, body := get(t, c, p2.url+"/", nil)
		if res.StatusCode != http.StatusOK || body != "hello from good" || res.Header.Get("X-Busy") != "" {
			t.Fatalf("request %d: %d %q %v; want good's 200 and none of the 503's headers", i, res.StatusCode, body, res.Header)
		}
	}
}

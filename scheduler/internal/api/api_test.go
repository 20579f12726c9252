package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fakeSource struct {
	ready bool
	last  WhatIf
}

func (f *fakeSource) Plan(context.Context) (any, error) {
	if !f.ready {
		return nil, ErrNotReady
	}
	return map[string]int{"rows": 1}, nil
}
func (f *fakeSource) WhatIf(_ context.Context, w WhatIf) (any, error) {
	f.last = w
	if w.Drain == "nope/SC1" {
		return nil, fmt.Errorf("%w: unknown cluster nope", ErrBadRequest)
	}
	return map[string]string{"drain": w.Drain}, nil
}
func (f *fakeSource) History(_ context.Context, pc string) (any, error) { return []string{pc}, nil }
func (f *fakeSource) Ready() bool                                       { return f.ready }

func do(t *testing.T, srv *httptest.Server, method, path, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestEndpoints(t *testing.T) {
	src := &fakeSource{}
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_test_total", Help: "t"})
	reg.MustRegister(c)
	srv := httptest.NewServer(Handler(Options{Source: src, Token: "s3cret", Gatherer: reg}))
	defer srv.Close()
	cases := []struct {
		method, path, token, body string
		code                      int
		contains                  string
	}{
		{"GET", "/healthz", "", "", 200, "ok"},
		{"GET", "/readyz", "", "", 503, "not synced"},
		{"GET", "/v1/plan", "", "", 401, "bearer"},
		{"GET", "/v1/plan", "wrong", "", 401, "bearer"},
		{"GET", "/v1/plan", "s3cret", "", 503, "not ready"},
		{"GET", "/metrics", "s3cret", "", 200, "sluice_test_total 0"},
		{"GET", "/v1/history?proxy_cluster=BFE1", "s3cret", "", 200, `"BFE1"`},
		{"GET", "/v1/history?proxy_cluster=../x", "s3cret", "", 400, "proxy_cluster"},
		{"POST", "/v1/plan", "s3cret", `{"drain":"demo-main/SC1"}`, 200, `"drain": "demo-main/SC1"`},
		{"POST", "/v1/plan", "s3cret", `{"drain":"nope/SC1"}`, 400, "unknown cluster nope"},
		{"POST", "/v1/plan", "s3cret", `{"drain":"demo-main"}`, 400, "cluster/subcluster"},
		{"POST", "/v1/plan", "s3cret", `{}`, 400, "exactly one"},
		{"POST", "/v1/plan", "s3cret", `{"drain":"a/b","drain":"c/d"}`, 400, "duplicate"},
		{"POST", "/v1/plan", "s3cret", `{"pins":[{"proxy_cluster":"BFE1","cluster":"c","weights":{"SC1":"x"}}]}`, 400, "weights"},
		{"POST", "/v1/plan", "s3cret", `{"bogus":1}`, 400, "bogus"},
	}
	for _, tc := range cases {
		code, body := do(t, srv, tc.method, tc.path, tc.token, tc.body)
		if code != tc.code || !strings.Contains(strings.ToLower(body), strings.ToLower(tc.contains)) {
			t.Errorf("%s %s %s: %d %q, want %d containing %q", tc.method, tc.path, tc.body, code, body, tc.code, tc.contains)
		}
	}
	src.ready = true
	if code, body := do(t, srv, "GET", "/v1/plan", "s3cret", ""); code != 200 || !strings.Contains(body, `"rows": 1`) {
		t.Fatalf("plan: %d %s", code, body)
	}
	if code, _ := do(t, srv, "GET", "/readyz", "", ""); code != 200 {
		t.Fatalf("readyz %d", code)
	}
}

func TestListenNeedsTokenOffLoopback(t *testing.T) {
	if _, err := Listen("0.0.0.0:0", ""); err == nil || !strings.Contains(err.Error(), "api-token") {
		t.Fatalf("listen on all interfaces without token: %v", err)
	}
	ln, err := Listen("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
}

func TestServeStopsOnCancel(t *testing.T) {
	ln, err := Listen("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, Handler(Options{Source: &fakeSource{}})) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	http.DefaultClient.CloseIdleConnections()
}

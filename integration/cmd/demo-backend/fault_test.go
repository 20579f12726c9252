package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// The fault share is exact per hundred answers, set and cleared over HTTP;
// /healthz is never affected.
func TestFaultInjection(t *testing.T) {
	b := &backend{cluster: "c", subcluster: "SC", instance: "i", byPath: map[string]int64{}}
	b.healthy.Store(true)
	post := func(q string) int {
		rec := httptest.NewRecorder()
		b.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/admin/fault?"+q, nil))
		return rec.Code
	}
	if c := post("percent=30&status=503"); c != 200 {
		t.Fatalf("set fault: %d", c)
	}
	codes := map[int]int{}
	var seq []bool // hit or not, answer by answer
	for range 200 {
		rec := httptest.NewRecorder()
		b.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
		codes[rec.Code]++
		seq = append(seq, rec.Code == 503)
		hz := httptest.NewRecorder()
		b.ServeHTTP(hz, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		if hz.Code != 200 {
			t.Fatalf("/healthz answered %d under a fault", hz.Code)
		}
	}
	if codes[503] != 60 || codes[200] != 140 {
		t.Fatalf("answers %v, want exactly 60 × 503 and 140 × 200", codes)
	}
	// spread evenly: every window of L answers holds 30 % of L, ± 1
	for l := 1; l <= len(seq); l++ {
		for i := 0; i+l <= len(seq); i++ {
			hits := 0
			for _, h := range seq[i : i+l] {
				if h {
					hits++
				}
			}
			if d := float64(hits) - 0.3*float64(l); d > 1 || d < -1 {
				t.Fatalf("answers %d..%d hold %d failures, want 30 %% of %d ± 1", i, i+l-1, hits, l)
			}
		}
	}
	if c := post("percent=101"); c != http.StatusBadRequest {
		t.Fatalf("percent 101 accepted: %d", c)
	}
	post("percent=0")
	rec := httptest.NewRecorder()
	b.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
	if rec.Code != 200 {
		t.Fatalf("after clearing: %d", rec.Code)
	}
}

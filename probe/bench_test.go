package probe

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkCheckHTTP measures one full http probe (new connection, GET,
// status and body match) against a loopback server.
func BenchmarkCheckHTTP(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer srv.Close()
	t := Target{Addr: mustAddr(srv.Listener.Addr().String()), Body: "ok"}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := Check(ctx, t); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTrackerObserve(b *testing.B) {
	tr, _ := NewTracker(2, 3)
	fail := errors.New("x")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i%4 == 0 {
			tr.Observe(fail)
		} else {
			tr.Observe(nil)
		}
		i++
	}
}

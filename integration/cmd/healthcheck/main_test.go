package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCheck(t *testing.T) {
	var gotAuth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		switch r.URL.Path {
		case "/ok":
			w.WriteHeader(http.StatusNoContent)
		case "/slow":
			time.Sleep(300 * time.Millisecond) // longer than the client's timeout below
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	if err := check(srv.URL+"/ok", time.Second, "s3cret"); err != nil {
		t.Errorf("2xx: %v", err)
	}
	if gotAuth != "Bearer s3cret" {
		t.Errorf("Authorization %q, want the bearer token", gotAuth)
	}
	if err := check(srv.URL+"/down", time.Second, ""); err == nil || !strings.Contains(err.Error(), "status 503") {
		t.Errorf("503: %v, want status 503", err)
	}
	if gotAuth != "" {
		t.Errorf("Authorization %q sent without a token", gotAuth)
	}
	if err := check(srv.URL+"/slow", 50*time.Millisecond, ""); err == nil {
		t.Error("a request beyond the timeout passed")
	}
	if err := check("http://127.0.0.1:1/", time.Second, ""); err == nil {
		t.Error("a refused connection passed")
	}
}

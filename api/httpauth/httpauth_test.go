package httpauth

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestRequire(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	deny := func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, "missing or wrong bearer token")
	}
	srv := httptest.NewServer(Require("s3cret", "test", deny, ok))
	defer srv.Close()
	open := httptest.NewServer(Require("", "test", deny, ok))
	defer open.Close()
	cases := []struct {
		name, url, auth string
		code            int
		body, challenge string
	}{
		{"right token", srv.URL, "Bearer s3cret", 200, "ok", ""},
		{"no header", srv.URL, "", 401, "missing or wrong bearer token", `Bearer realm="test"`},
		{"wrong token", srv.URL, "Bearer s3cre", 401, "missing or wrong bearer token", `Bearer realm="test"`},
		{"wrong scheme", srv.URL, "Basic s3cret", 401, "missing or wrong bearer token", `Bearer realm="test"`},
		{"token with a suffix", srv.URL, "Bearer s3cretX", 401, "missing or wrong bearer token", `Bearer realm="test"`},
		{"no token configured", open.URL, "", 200, "ok", ""},
	}
	for _, c := range cases {
		req, _ := http.NewRequest("GET", c.url, nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || string(b) != c.body || resp.Header.Get("WWW-Authenticate") != c.challenge {
			t.Errorf("%s: %d %q challenge %q; want %d %q challenge %q", c.name, resp.StatusCode, b, resp.Header.Get("WWW-Authenticate"), c.code, c.body, c.challenge)
		}
	}
}

func TestRequireWithoutRealmSetsNoChallenge(t *testing.T) {
	rec := httptest.NewRecorder()
	Require("t", "", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(401) }, http.NotFoundHandler()).
		ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 401 || rec.Header().Get("WWW-Authenticate") != "" {
		t.Fatalf("%d, challenge %q", rec.Code, rec.Header().Get("WWW-Authenticate"))
	}
}

func TestValidRefusesEmptyToken(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Bearer ")
	if Valid(r, "") {
		t.Fatal("an empty token was accepted")
	}
}

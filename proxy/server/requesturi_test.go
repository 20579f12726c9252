package server

import (
	"net/http"
	"net/url"
	"testing"
)

// requestURI is what URL.RequestURI gives, for every target a front may
// parse, and for a URL changed after the parse.
func TestRequestURIMatchesURLRequestURI(t *testing.T) {
	targets := []string{"/", "/a/b", "/index.html?q=1", "/a?b?c", "/a?", "/x;y=1/z@h:8,$&+=", "/-._~",
		"/a%20b", "/a%2Fb?x", "/a(b)", "/a!b", "/a*b", "/a'b", "*", "http://h/p?q", "/é", "/a?x=%zz", "//x/y", "/p?é"}
	for _, target := range targets {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			t.Fatalf("%q: %v", target, err)
		}
		r := &http.Request{RequestURI: target, URL: u}
		if got, want := requestURI(r), u.RequestURI(); got != want {
			t.Fatalf("%q: requestURI %q, URL.RequestURI %q", target, got, want)
		}
		moved := *u
		moved.Path = "/moved"
		r.URL = &moved
		if got, want := requestURI(r), moved.RequestURI(); got != want {
			t.Fatalf("%q, path changed: requestURI %q, URL.RequestURI %q", target, got, want)
		}
	}
}

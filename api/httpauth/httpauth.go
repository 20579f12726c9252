// Package httpauth is the one bearer-token check of Sluice's HTTP APIs (the
// proxy's admin API, the scheduler's API and dashboard actions, the agent's
// admin API): "Authorization: Bearer <token>", compared in constant time.
package httpauth

import (
	"crypto/subtle"
	"net/http"
)

// Valid reports whether r carries "Authorization: Bearer <token>". An empty
// token is never valid: callers decide what "no token configured" means.
func Valid(r *http.Request, token string) bool {
	if token == "" {
		return false
	}
	got := []byte(r.Header.Get("Authorization"))
	return subtle.ConstantTimeCompare(got, []byte("Bearer "+token)) == 1
}

// Require wraps next so that only requests with the bearer token reach it;
// an empty token means no check (next is returned as is). Other requests
// get 401 from deny, in the service's own error format, with
// `WWW-Authenticate: Bearer realm="<realm>"` when realm is set.
func Require(token, realm string, deny http.HandlerFunc, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	challenge := `Bearer realm="` + realm + `"`
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !Valid(r, token) {
			if realm != "" {
				w.Header().Set("WWW-Authenticate", challenge)
			}
			deny(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

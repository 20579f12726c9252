package server

import (
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"time"
)

// FrontOptions are the client-facing limits of the HTTP server. Zero values
// get the defaults in brackets.
type FrontOptions struct {
	// ReadHeaderTimeout bounds reading request headers (slowloris) [10s].
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request; per-cluster
	// policy.timeouts.read_client tightens it per request [0: none here].
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response; per-cluster
	// policy.timeouts.write_client sets it per request [0: none here].
	WriteTimeout time.Duration
	// IdleTimeout closes idle client keep-alive connections [90s].
	IdleTimeout time.Duration
	// ParkIdleAfter: a keep-alive connection of the fasthttp front that
	// waits this long for its next request is parked without buffers
	// (idlepark.go); one busier than that keeps them and is not parked
	// between requests. It is parked between ParkIdleAfter and twice that
	// after its last answer [500ms]. The same holds for an HTTP/2 connection
	// of the sluice server with no open stream (h2park.go).
	ParkIdleAfter time.Duration
	// MaxHeaderBytes caps request line + headers; over it the client gets 431 [64 KiB].
	MaxHeaderBytes int
	// Certificates enable TLS (HTTP/1.1 and HTTP/2); the one whose names
	// match the client's SNI is served, the first one otherwise.
	Certificates []tls.Certificate
	// ErrorLog receives net/http's own complaints; nil discards them.
	ErrorLog *log.Logger
	// ConnState, when set, is told of every client connection's state
	// changes (http.Server.ConnState; the fasthttp front maps its states).
	ConnState func(net.Conn, http.ConnState)
	// H2MaxPrematureResets: an HTTP/2 connection of the TLS front whose
	// client reset more streams than this before their answers (and more
	// than half its streams) within PrematureResetWindow is closed
	// (rapid reset, h2reset.go) [0: no limit].
	H2MaxPrematureResets int
	// H2Server serves the TLS front's HTTP/2 connections: H2ServerSluice
	// (h2conn.go) or H2ServerXNet (net/http's server) ["": sluice].
	H2Server string
}

// HTTPServer returns an http.Server serving s with the front limits. With
// Certificates it serves HTTP/2 and HTTP/1.1 over TLS (use ServeTLS(l, "",
// "")); without, plain HTTP/1.1 only: h2c is not offered (no handler speaks
// it, and ServeHTTP strips "Upgrade: h2c").
func (s *Server) HTTPServer(o FrontOptions) (*http.Server, error) {
	if o.ReadHeaderTimeout == 0 {
		o.ReadHeaderTimeout = 10 * time.Second
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = 90 * time.Second
	}
	if o.MaxHeaderBytes == 0 {
		o.MaxHeaderBytes = 64 << 10
	}
	if o.ErrorLog == nil {
		o.ErrorLog = log.New(io.Discard, "", 0)
	}
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		ReadTimeout:       o.ReadTimeout,
		WriteTimeout:      o.WriteTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    o.MaxHeaderBytes,
		ErrorLog:          o.ErrorLog,
		ConnState:         withLimitState(o.ConnState),
	}
	if len(o.Certificates) > 0 {
		for i, c := range o.Certificates {
			if len(c.Certificate) == 0 {
				return nil, fmt.Errorf("server: certificate %d is empty", i)
			}
		}
		hs.TLSConfig = &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: o.Certificates,
			NextProtos:   []string{"h2", "http/1.1"},
		}
	}
	return hs, nil
}

// withLimitState calls limitState (connlimit.go) before hook.
func withLimitState(hook func(net.Conn, http.ConnState)) func(net.Conn, http.ConnState) {
	return func(c net.Conn, st http.ConnState) {
		limitState(c, st)
		if hook != nil {
			hook(c, st)
		}
	}
}

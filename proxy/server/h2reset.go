package server

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// HTTP/2 rapid reset (CVE-2023-44487): a client opens streams and resets
// each at once. net/http's HTTP/2 server bounds the handlers it runs per
// connection, but keeps such a connection open, and every stream it does
// run costs a routed request (a backend attempt, often). Like Envoy's
// premature-reset check and nginx's per-connection request limit, the TLS
// front closes a connection whose client resets too many streams: a
// stream is premature when its context was canceled (RST_STREAM, or the
// connection lost) before its handler returned, i.e. before its answer was
// complete. When, within one PrematureResetWindow of a connection's
// streams, more than the limit (FrontOptions.H2MaxPrematureResets,
// --h2-max-premature-resets) were premature and they are more than half of
// the window's streams, the connection is tripped: every stream it starts
// afterwards, and the stream that tripped it unless its answer's head was
// written already, answers with "Connection: close", on which the HTTP/2
// server (ours, h2conn.go, or net/http's) sends GOAWAY (NO_ERROR, with the
// last stream id: nothing above it is served)
// and closes the connection once its streams are done; and it is closed
// outright PrematureResetGrace after the trip in any case. net/http offers
// a handler no GOAWAY with ENHANCE_YOUR_CALM; its own ENHANCE_YOUR_CALM
// (more than 4×MaxConcurrentStreams handlers queued) still applies.

// PrematureResetWindow is how long a connection's premature resets are
// counted together; the counts start again after it.
const PrematureResetWindow = 10 * time.Second

// PrematureResetGrace: a tripped connection is closed this long after the
// trip whether or not GOAWAY ended it.
const PrematureResetGrace = 2 * time.Second

type h2ConnKey struct{}

// h2Conn is one connection's stream counts in the current window.
type h2Conn struct {
	conn net.Conn

	mu                 sync.Mutex
	start              time.Time
	streams, premature int
	tripped            bool
}

// end counts a stream that ended, premature or not, at now; it reports
// whether this stream tripped the connection.
func (c *h2Conn) end(premature bool, limit int, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tripped {
		return false
	}
	if now.Sub(c.start) >= PrematureResetWindow {
		c.start, c.streams, c.premature = now, 0, 0
	}
	c.streams++
	if premature {
		c.premature++
	}
	c.tripped = c.premature > limit && 2*c.premature > c.streams
	return c.tripped
}

func (c *h2Conn) isTripped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tripped
}

// resetGuard wraps the TLS front's net/http handler with the rule above.
type resetGuard struct {
	limit int // 0: off
	next  http.Handler
	s     *Server
	now   func() time.Time
}

// connContext gives each connection its counts.
func (g *resetGuard) connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, h2ConnKey{}, &h2Conn{conn: c, start: g.now()})
}

func (g *resetGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, _ := r.Context().Value(h2ConnKey{}).(*h2Conn)
	if c == nil || r.ProtoMajor != 2 {
		g.next.ServeHTTP(w, r)
		return
	}
	if c.isTripped() {
		w.Header().Set("Connection", "close") // net/http: GOAWAY, then close
	}
	g.next.ServeHTTP(w, r)
	premature := r.Context().Err() != nil
	tripped := c.end(premature, g.limit, g.now())
	if tripped {
		g.s.metrics.h2ResetCloses.Inc()
	}
	if premature { // after the close is counted: a test waiting for this count sees both
		g.s.metrics.h2Premature.Inc()
	}
	if !tripped {
		return
	}
	// This stream's answer is not sent yet (it is at the handler's return,
	// after this): unless the handler wrote its head, this GOAWAYs now,
	// whether or not the client sends another stream.
	w.Header().Set("Connection", "close")
	g.s.log.Warn("closing an HTTP/2 connection whose client reset too many streams before their answers (rapid reset)",
		"limit", g.limit, "window", PrematureResetWindow.String())
	time.AfterFunc(PrematureResetGrace, func() { c.conn.Close() })
}

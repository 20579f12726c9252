package server

import (
	"net"
	"net/http"

	"github.com/sluicelb/sluice/proxy/internal/connlimit"
	"github.com/valyala/fasthttp"
)

// Client connection limits (issue 23, internal/connlimit): the listeners
// lbproxy serves are wrapped by a connlimit.Limiter, and every front tells
// it when a connection is idle (evictable, the oldest first, when the limit
// is reached) or busy:
//
//   - net/http (the std front, HTTP/1.1 and HTTP/2 over TLS): ConnState.
//     StateActive is busy, StateIdle idle; HTTP/2 reports StateActive when a
//     stream opens on a connection with none and StateIdle when the last
//     one ends, so an HTTP/2 connection is idle when no stream is open.
//   - fasthttp (the plain front and --tls-front fasthttp): its StateActive
//     and StateIdle; a parked connection (idlepark.go) stays idle.
//
// A connection is idle from its accept until its first request (a TLS
// handshake under way included), as nginx counts connections waiting for
// their first request among the reusable ones. A connection handed over
// for an Upgrade stays busy until it closes. Without a Limiter (tests,
// other listeners) connlimit.Of is nil and these do nothing.

// limitState follows net/http's connection states.
func limitState(c net.Conn, st http.ConnState) {
	switch st {
	case http.StateActive:
		connlimit.Of(c).Busy()
	case http.StateIdle:
		connlimit.Of(c).Idle()
	}
}

// limitFastState follows fasthttp's connection states.
func limitFastState(c *addrConn, st fasthttp.ConnState) {
	switch st {
	case fasthttp.StateActive:
		c.lim.Busy()
	case fasthttp.StateIdle:
		c.lim.Idle()
	}
}

// NetConn lets connlimit.Of find the accepted connection under crypto/tls
// (tls.Conn.NetConn is the recordConn) and under the std front's wrapper.
func (c *recordConn) NetConn() net.Conn { return c.Conn }

func (c *answerConn) NetConn() net.Conn { return c.Conn }

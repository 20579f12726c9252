package server

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"sync/atomic"
)

// stdFront is the cleartext net/http front. net/http answers a request it
// cannot read — 400 (unparsable head, missing Host, bad Transfer-Encoding:
// 501, HTTP version: 505) and 431 (head over MaxHeaderBytes) — by writing
// to the connection itself, without calling the handler and without a hook.
// So that those answers are recorded like every other generated answer (the
// reason header, an access-log line, sluice_proxy_generated_responses_total
// by code, as on the fasthttp front), every connection is wrapped in a
// answerConn that knows whether a handler owns the connection: a response that
// starts while none does is net/http's own.
type stdFront struct {
	*http.Server
	s *Server
}

func (s *Server) newStdFront(o FrontOptions) (*stdFront, error) {
	hs, err := s.HTTPServer(o)
	if err != nil {
		return nil, err
	}
	inner := hs.Handler
	hs.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gc, _ := r.Context().Value(answerConnKey{}).(*answerConn)
		if gc != nil {
			gc.state.Store(connHandler)
		}
		inner.ServeHTTP(w, r)
		if gc != nil {
			// net/http flushes the answer after the handler returned, then
			// reports the connection idle (ConnState below).
			gc.state.Store(connFlushing)
		}
	})
	outer := hs.ConnState
	hs.ConnState = func(c net.Conn, cs http.ConnState) {
		if gc, ok := c.(*answerConn); ok && cs == http.StateIdle {
			// The answer is flushed: what the connection writes next,
			// before a handler runs, is net/http's own.
			gc.state.Store(connReading)
		}
		if outer != nil {
			outer(c, cs)
		}
	}
	hs.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if gc, ok := c.(*answerConn); ok {
			return context.WithValue(ctx, answerConnKey{}, gc)
		}
		return ctx
	}
	return &stdFront{Server: hs, s: s}, nil
}

// Serve serves l with every connection wrapped in a answerConn.
func (f *stdFront) Serve(l net.Listener) error {
	return f.Server.Serve(answerListener{Listener: l, s: f.s})
}

type answerConnKey struct{}

// States of a answerConn.
const (
	connReading  int32 = iota // new or idle (http.StateIdle): net/http reads a head
	connHandler               // ServeHTTP runs
	connFlushing              // ServeHTTP returned; net/http flushes its answer until StateIdle
)

type answerListener struct {
	net.Listener
	s *Server
}

func (l answerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &answerConn{Conn: c, s: l.s}, nil
}

// answerConn is a client connection of the std front that tells net/http's own
// answers from the handler's.
type answerConn struct {
	net.Conn
	s     *Server
	state atomic.Int32
}

// CloseWrite keeps net/http's lingering close (closeWriteAndWait: half-close,
// then wait for the client to read the answer) working through the wrapper:
// without it net/http closes at once and a client still sending its
// oversized head may get a reset instead of the 431.
func (c *answerConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

func (c *answerConn) Write(p []byte) (int, error) {
	if c.state.Load() == connReading {
		if status, ok := responseStatus(p); ok {
			return c.writeGenerated(p, status)
		}
	}
	return c.Conn.Write(p)
}

// writeGenerated writes net/http's answer with the reason header added
// after its status line, and records it.
func (c *answerConn) writeGenerated(p []byte, status int) (int, error) {
	code := CodeBadRequest
	if status == http.StatusRequestHeaderFieldsTooLarge {
		code = CodeHeaderTooLarge
	}
	i := bytes.Index(p, []byte("\r\n"))
	if i < 0 {
		return c.Conn.Write(p)
	}
	out := make([]byte, 0, len(p)+len(ReasonHeader)+len(code)+4)
	out = append(out, p[:i+2]...)
	out = append(out, ReasonHeader+": "+code+"\r\n"...)
	out = append(out, p[i+2:]...)
	c.s.frontAnswer(status, code, c.RemoteAddr().String(), "", "", "")
	if _, err := c.Conn.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// responseStatus reads the status of a write that starts an HTTP/1.1
// answer ("HTTP/1.1 431 …").
func responseStatus(p []byte) (int, bool) {
	const prefix = "HTTP/1.1 "
	if len(p) < len(prefix)+3 || string(p[:len(prefix)]) != prefix {
		return 0, false
	}
	n := 0
	for _, d := range p[len(prefix) : len(prefix)+3] {
		if d < '0' || d > '9' {
			return 0, false
		}
		n = n*10 + int(d-'0')
	}
	return n, n >= 400
}

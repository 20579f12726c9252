package server

// The net/http transport of the request path: one httputil.ReverseProxy
// shared by all requests (the std upstream client), its forwarding headers,
// response streaming and error answers. The per-request state travels in
// the request context (reqState).

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"strings"

	"github.com/sluicelb/sluice/proxy/internal/bufpool"
)

// newReverseProxy builds the one ReverseProxy all requests share; the
// per-request state travels in the request context.
func (s *Server) newReverseProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite:        s.rewrite,
		Transport:      transport{},
		ModifyResponse: s.modifyResponse,
		ErrorHandler:   s.errorHandler,
		BufferPool:     bufpool.HTTPUtil{},
		ErrorLog:       log.New(io.Discard, "", 0),
	}
}

// rewrite sets the forwarding headers. X-Forwarded-For is the chain the
// trusted peer sent (if it is trusted) plus the peer; an untrusted peer's
// X-Forwarded-For is dropped. It is set after ReverseProxy removed the
// hop-by-hop headers, so "Connection: X-Forwarded-For" cannot strip it.
func (s *Server) rewrite(pr *httputil.ProxyRequest) {
	st := pr.In.Context().Value(stateKey{}).(*reqState)
	peer := st.peerString()
	if prior := pr.In.Header["X-Forwarded-For"]; st.peerTrust && len(prior) > 0 {
		pr.Out.Header["X-Forwarded-For"] = []string{strings.Join(prior, ", ") + ", " + peer}
	} else {
		pr.Out.Header["X-Forwarded-For"] = []string{peer}
	}
	if prior := pr.In.Header["X-Forwarded-Proto"]; st.peerTrust && len(prior) > 0 {
		pr.Out.Header["X-Forwarded-Proto"] = prior[:1]
	} else if pr.In.TLS != nil {
		pr.Out.Header["X-Forwarded-Proto"] = []string{"https"}
	} else {
		pr.Out.Header["X-Forwarded-Proto"] = []string{"http"}
	}
	if prior := pr.In.Header["X-Forwarded-Host"]; st.peerTrust && len(prior) > 0 {
		pr.Out.Header["X-Forwarded-Host"] = prior[:1]
	} else {
		pr.Out.Header["X-Forwarded-Host"] = []string{pr.In.Host}
	}
	pr.Out.URL.Scheme = "http"
	pr.Out.Host = pr.In.Host
	if st.buf != nil {
		pr.Out.ContentLength = int64(len(st.buf))
	}
}

func (s *Server) modifyResponse(res *http.Response) error {
	st := res.Request.Context().Value(stateKey{}).(*reqState)
	st.status = res.StatusCode
	if st.status >= 500 {
		st.c.stats.errors.Add(1)
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		return nil
	}
	policy := accelPolicy(res.Header)
	// An unsized or event-stream answer is flushed by ReverseProxy itself
	// (header at once, then every write, from its own timer goroutine).
	if fl, ok := st.w.(http.Flusher); ok && res.ContentLength >= 0 && !isEventStream(res.Header) {
		res.Body = &flushingBody{ReadCloser: res.Body, fl: fl, policy: policy}
	}
	return nil
}

func isEventStream(h http.Header) bool {
	ct := h.Get("Content-Type")
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.EqualFold(strings.TrimSpace(ct), "text/event-stream")
}

// flushingBody gives a sized answer on the std path relay's flush policy:
// ReverseProxy writes what a Read returned before it calls Read again, so a
// flush before a Read that may wait sends the header (first Read) and the
// body read so far to the client instead of holding them until the backend
// sends more.
type flushingBody struct {
	io.ReadCloser
	fl     http.Flusher
	policy flushPolicy
	n      int
}

func (b *flushingBody) Read(p []byte) (int, error) {
	if b.n == 0 || b.policy != flushBuffer {
		b.fl.Flush()
	}
	b.n++
	return b.ReadCloser.Read(p)
}

func (s *Server) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	st := r.Context().Value(stateKey{}).(*reqState)
	var ge *genError
	if !errors.As(err, &ge) {
		switch {
		case r.Context().Err() != nil && errors.Is(context.Cause(r.Context()), context.DeadlineExceeded):
			ge = &genError{status: http.StatusGatewayTimeout, code: CodeRequestTimeout, err: err}
		case r.Context().Err() != nil:
			ge = &genError{status: StatusClientClosed, code: CodeClientClosed, err: err}
		default:
			ge = classifyBodyError(false, err) // a gone client is the case above
			if ge.status != http.StatusRequestEntityTooLarge {
				ge = &genError{status: http.StatusBadGateway, code: CodeUpstream, err: err}
			}
		}
	}
	st.generated(w, ge)
}

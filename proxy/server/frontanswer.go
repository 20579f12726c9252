package server

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"

	"github.com/valyala/fasthttp"
)

// Codes of the answers a front generates before a request reaches
// ServeHTTP (ReasonHeader values and access-log codes).
const (
	CodeBadRequest     = "bad-request"      // 400: the request could not be parsed
	CodeClientTimeout  = "client-timeout"   // 408: the request header did not arrive in time
	CodeHeaderTooLarge = "header-too-large" // 431: request header over the limit
)

// onError answers a request fasthttp could not read, with the statuses of
// the std front: 431 header too large, 408 read timeout, 413, else 400.
func (f *FastFront) onError(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.As(err, &small):
		f.answer(ctx, http.StatusRequestHeaderFieldsTooLarge, CodeHeaderTooLarge, false, "")
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		f.answer(ctx, http.StatusRequestEntityTooLarge, CodeBodyTooLarge, true, "")
	case errors.As(err, &ne) && ne.Timeout():
		f.answer(ctx, http.StatusRequestTimeout, CodeClientTimeout, false, "")
	default:
		f.answer(ctx, http.StatusBadRequest, CodeBadRequest, false, "")
	}
}

// answer writes a generated answer of the front and records it like any
// other: the reason header, sluice_proxy_generated_responses_total (no
// cluster) and an access-log line. parsed says the request header was read
// (its method, host and path are logged). The connection is closed after.
func (f *FastFront) answer(ctx *fasthttp.RequestCtx, status int, code string, parsed bool, detail string) {
	h := &ctx.Response.Header
	h.Set(ReasonHeader, code)
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	ctx.SetStatusCode(status)
	ctx.SetBodyString(strconv.Itoa(status) + " " + http.StatusText(status) + " (" + code + ")" + detail + "\n")
	ctx.SetConnectionClose()
	var method, host, path string
	if parsed {
		method, host, path = string(ctx.Method()), string(ctx.Host()), string(ctx.Path())
	}
	f.s.frontAnswer(status, code, ctx.RemoteAddr().String(), method, host, path)
}

// frontAnswer counts and logs an answer a front generated before the
// request reached ServeHTTP (an unreadable, oversized or slow request).
func (s *Server) frontAnswer(status int, code, remoteAddr, method, host, path string) {
	s.metrics.generated.WithLabelValues("", code).Inc()
	st := &reqState{s: s, rt: s.rt.Load(), start: s.now(), status: status, code: code}
	if ap, err := netip.ParseAddrPort(remoteAddr); err == nil {
		st.peer = ap.Addr().Unmap()
		st.clientIP = st.peer
	}
	st.finish(&http.Request{Method: method, Host: host, URL: &url.URL{Path: path}})
}

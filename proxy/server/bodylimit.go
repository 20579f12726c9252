package server

import (
	"net/http"
	"strconv"

	"github.com/valyala/fasthttp"
)

// overLimitMark is the request header by which the fasthttp front's
// HeaderReceived hook tells serve that the declared body is over
// Options.MaxBodyBytes. Set only by the hook (it deletes any copy a
// client sent), never forwarded.
const overLimitMark = "X-Sluice-Internal-Body-Over-Limit"

// overBodyLimit reports whether h declares a Content-Length over the body
// limit. Then it marks h and sets its length to 0, so fasthttp reads no
// body (it would otherwise wait for the first 8 KiB before calling the
// handler); overLimit gives the request its declared length back, and
// ServeHTTP answers 413 (reason header, count, access log as on --front
// std) as soon as the head is read and closes the connection.
func (s *Server) overBodyLimit(h *fasthttp.RequestHeader) bool {
	h.Del(overLimitMark)
	n := h.ContentLength()
	if s.maxBody <= 0 || n <= 0 || int64(n) <= s.maxBody {
		return false
	}
	h.Set(overLimitMark, strconv.Itoa(n))
	h.SetContentLength(0)
	return true
}

// overLimit restores the declared length of a request marked by
// overBodyLimit (without a body: none was read) and drops the mark.
func overLimit(hdr http.Header, r *http.Request) {
	v := hdr[overLimitMark]
	if len(v) == 0 {
		return
	}
	delete(hdr, overLimitMark)
	if n, err := strconv.ParseInt(v[0], 10, 64); err == nil {
		r.ContentLength = n
	}
	r.Body = http.NoBody
	r.Close = true
}

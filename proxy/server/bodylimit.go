package server

import (
	"strconv"

	"github.com/valyala/fasthttp"
)

// overLimitMark is the canonical name of the fasthttp front's internal
// over-limit field. A client's field of that name (any letter case:
// fasthttp's parser gives every name its canonical case) is never
// forwarded: reset drops it, handOver deletes it.
const overLimitMark = "X-Sluice-Internal-Body-Over-Limit"

// overLimitRaw is the field by which the HeaderReceived hook tells serve
// that the declared body is over Options.MaxBodyBytes: the mark's name in
// lower case, set without normalizing. No client can send it: fasthttp's
// parser normalizes every field name without a space in it
// (DisableHeaderNamesNormalizing is off), so a client's
// "x-sluice-internal-body-over-limit" arrives as overLimitMark. So the hook
// needs no deletion of a client's copy on every request (fasthttp's Del
// normalizes its key and scans the fields: ~850 instructions a request).
const overLimitRaw = "x-sluice-internal-body-over-limit"

// overBodyLimit reports whether h declares a Content-Length over the body
// limit. Then it marks h (overLimitRaw, the declared length) and sets its
// length to 0, so fasthttp reads no body (it would otherwise wait for the
// first 8 KiB before calling the handler); reset gives the request its
// declared length back, and ServeHTTP answers 413 (reason header, count,
// access log as on --front std) as soon as the head is read and closes the
// connection.
func (s *Server) overBodyLimit(h *fasthttp.RequestHeader) bool {
	n := h.ContentLength()
	if s.maxBody <= 0 || n <= 0 || int64(n) <= s.maxBody {
		return false
	}
	var b [20]byte
	h.SetCanonical(overLimitRawKey, strconv.AppendInt(b[:0], int64(n), 10))
	h.SetContentLength(0)
	return true
}

// overLimitField sorts a request field of reset's by the over-limit mark:
// ours (overLimitRaw: the hook marked the request), a client's copy
// (overLimitMark: dropped), or neither.
func overLimitField(k []byte) (ours, client bool) {
	if len(k) != len(overLimitMark) {
		return false, false
	}
	switch string(k) {
	case overLimitRaw:
		return true, false
	case overLimitMark:
		return false, true
	}
	return false, false
}

// markForHandOver gives a request handed to net/http (handOver) the head
// the client sent: every client copy of the mark deleted and, when the hook
// marked it over the limit, its declared length back and the hook's mark
// gone, so that ServeHTTP answers 413 there as on --front std (the body
// was not read: fasthttp saw a length of 0, so net/http frames it). It
// reads no field through All, which would gather the Cookie fields and
// rewrite them in the head.
func markForHandOver(h *fasthttp.RequestHeader) {
	if ours := h.PeekCanonical(overLimitRawKey); ours != nil {
		n, err := strconv.Atoi(string(ours)) // before Del: ours is a view of the head
		h.DisableNormalizing()
		h.Del(overLimitRaw) // set last by the hook: removed in place, the others keep their order
		h.EnableNormalizing()
		if err == nil {
			h.SetContentLength(n)
		}
	}
	h.Del(overLimitMark)
}

var overLimitRawKey = []byte(overLimitRaw)

package server

import (
	"context"
	"net/http"
	"unsafe"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Head decides the sampling of a new trace before its span starts
// (telemetry.Head, over the TracerProvider's own sampler and ID generator).
type Head interface {
	// Root draws a new trace's ids and reports whether it is sampled.
	Root() (trace.SpanContext, bool)
	// Preset returns ctx in which the provider's next root span takes
	// sc's ids.
	Preset(ctx context.Context, sc trace.SpanContext) context.Context
}

// startTrace starts the request's trace. A request that brings no trace
// context (no traceparent, no baggage) is decided by the head first, when
// there is one: the 99 % it does not sample get no span, no context and no
// propagator — their trace id, new and unsampled, still goes to the backend
// (traceparent, flags 00: what the W3C propagator writes for an unsampled
// span) and into the access line. The rest go through the propagator and
// the provider as before.
func (st *reqState) startTrace(r *http.Request) {
	s := st.s
	var ctx context.Context
	if s.head != nil && len(r.Header["Traceparent"]) == 0 && len(r.Header["Baggage"]) == 0 {
		sc, sampled := s.head.Root()
		if !sampled {
			st.sc = sc
			return
		}
		ctx = s.head.Preset(r.Context(), sc)
	} else {
		ctx = s.prop.Extract(r.Context(), requestCarrier(r.Header))
	}
	st.ctx, st.span = s.tracer.Start(ctx, "sluice.request", serverSpan...)
	st.sc = st.span.SpanContext()
	// Attributes only for sampled requests: building them is most of a
	// span's cost.
	if st.recording = st.span.IsRecording(); st.recording {
		st.span.SetAttributes(attribute.String("http.request.method", r.Method),
			attribute.String("url.path", r.URL.Path), attribute.String("server.address", r.Host),
			attribute.String("client.address", st.clientIP.String()))
	}
}

// inject writes the trace context of ctx (the server span's or the
// attempt's) into an outbound request's header; for the head's unsampled
// requests, their traceparent.
func (st *reqState) inject(ctx context.Context, c propagation.TextMapCarrier) {
	if st.span != nil {
		st.s.prop.Inject(ctx, c)
		return
	}
	if st.traceparent == "" { // once per request, whatever the attempts
		if st.reuse {
			// The fast path: nothing outlives the state (its extra
			// headers are in it too), so the text is the state's own.
			appendTraceparent(st.tp[:0], st.sc)
			st.traceparent = unsafe.String(&st.tp[0], len(st.tp))
		} else {
			st.traceparent = traceparent(st.sc)
		}
	}
	c.Set("traceparent", st.traceparent)
}

// traceparent is the W3C traceparent header of sc, as
// propagation.TraceContext writes it.
func traceparent(sc trace.SpanContext) string {
	var b [traceparentLen]byte
	return string(appendTraceparent(b[:0], sc))
}

const traceparentLen = 55

// appendTraceparent writes traceparent(sc) into b's array, of at least
// traceparentLen bytes.
func appendTraceparent(b []byte, sc trace.SpanContext) []byte {
	b = b[:traceparentLen]
	b[0], b[1], b[2], b[35], b[52], b[53], b[54] = '0', '0', '-', '-', '-', '0', '0'
	tid, sid := sc.TraceID(), sc.SpanID()
	th, sh := (*[32]byte)(b[3:35]), (*[16]byte)(b[36:52])
	for i, v := range tid {
		th[2*i], th[2*i+1] = hexPairs[v][0], hexPairs[v][1]
	}
	for i, v := range sid {
		sh[2*i], sh[2*i+1] = hexPairs[v][0], hexPairs[v][1]
	}
	if sc.IsSampled() {
		b[54] = '1'
	}
	return b
}

// hexPairs are the two lower-case hex digits of every byte.
var hexPairs = func() (t [256][2]byte) {
	for i := range t {
		t[i] = [2]byte{hexDigits[i>>4], hexDigits[i&0xF]}
	}
	return t
}()

package telemetry

import (
	"context"
	"encoding/binary"
	"math/rand/v2"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Head decides a new trace's sampling before any span starts: Root draws
// the trace and span ids and asks the provider's own root sampler (the
// ratio of Options.SampleRatio) about them. A request Root says no to needs
// no span at all — the server carries its ids to the backend and the access
// line itself; one it says yes to starts its span in Preset's context, and
// the provider's ID generator (this Head) then gives that span those very
// ids, so the sampler, deciding again, agrees. It implements server.Head.
type Head struct {
	root sdktrace.Sampler // the ratio sampler under ParentBased
}

// presetKey is the context key of the ids a root span is to take.
type presetKey struct{}

type presetIDs struct {
	tid trace.TraceID
	sid trace.SpanID
}

// Root returns a new trace's span context (ids only: no flags, no state)
// and whether the root sampler samples it.
func (h *Head) Root() (trace.SpanContext, bool) {
	tid, sid := h.NewIDs(context.Background())
	res := h.root.ShouldSample(sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: tid,
		Name: "sluice.request", Kind: trace.SpanKindServer})
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}), res.Decision == sdktrace.RecordAndSample
}

// Preset returns ctx carrying sc's ids: the next root span started in it
// takes them.
func (h *Head) Preset(ctx context.Context, sc trace.SpanContext) context.Context {
	return context.WithValue(ctx, presetKey{}, presetIDs{tid: sc.TraceID(), sid: sc.SpanID()})
}

// NewIDs is sdktrace.IDGenerator's: the preset ids when ctx has them, else
// random ones (never all zero: an invalid id).
func (h *Head) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if p, ok := ctx.Value(presetKey{}).(presetIDs); ok {
		return p.tid, p.sid
	}
	var tid trace.TraceID
	for !tid.IsValid() {
		binary.NativeEndian.PutUint64(tid[:8], rand.Uint64())
		binary.NativeEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, h.NewSpanID(ctx, tid)
}

// NewSpanID is sdktrace.IDGenerator's: a random span id, never zero.
func (h *Head) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.NativeEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}

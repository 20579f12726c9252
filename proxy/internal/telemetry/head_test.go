package telemetry

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// The head and the provider agree: a root the head samples, started in
// Preset's context, is a sampled span with the head's very ids; one it
// does not sample would not have been sampled by the provider either
// (its ratio sampler, asked about the same trace id). At ratio 0.5 over
// 400 roots both answers occur.
func TestHeadAgreesWithTheProvider(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tel, err := Setup(context.Background(), Options{ServiceName: "x", Exporter: ExporterNone, SampleRatio: 0.5,
		SpanProcessor: sdktrace.NewSimpleSpanProcessor(exp)})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	tr := tel.TracerProvider.Tracer("test")
	ratio := sdktrace.TraceIDRatioBased(0.5)
	var yes, no int
	for i := 0; i < 400; i++ {
		sc, sampled := tel.Head.Root()
		if !sc.TraceID().IsValid() || !sc.SpanID().IsValid() || sc.IsSampled() {
			t.Fatalf("root %v: want valid ids, no flags", sc)
		}
		want := ratio.ShouldSample(sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: sc.TraceID()}).Decision == sdktrace.RecordAndSample
		if sampled != want {
			t.Fatalf("head says sampled=%v for trace %s, the ratio sampler %v", sampled, sc.TraceID(), want)
		}
		if !sampled {
			no++
			continue
		}
		yes++
		_, sp := tr.Start(tel.Head.Preset(context.Background(), sc), "sluice.request")
		got := sp.SpanContext()
		sp.End()
		if !got.IsSampled() || got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() {
			t.Fatalf("span %v started with the head's ids %v: want those ids, sampled", got, sc)
		}
	}
	if yes == 0 || no == 0 || len(exp.GetSpans()) != yes {
		t.Fatalf("%d sampled, %d not, %d spans exported: want both kinds, a span per sampled root", yes, no, len(exp.GetSpans()))
	}
	// Without a preset the provider draws its own ids, new each time.
	_, a := tr.Start(context.Background(), "a")
	_, b := tr.Start(context.Background(), "b")
	if a.SpanContext().TraceID() == b.SpanContext().TraceID() || !a.SpanContext().TraceID().IsValid() {
		t.Fatalf("trace ids %s, %s: want two valid, different ones", a.SpanContext().TraceID(), b.SpanContext().TraceID())
	}
	a.End()
	b.End()
}

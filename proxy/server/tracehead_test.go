package server

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/proxy/internal/forward"
	"github.com/sluicelb/sluice/proxy/internal/telemetry"
	"github.com/sluicelb/sluice/testkit/poll"
)

// headProxy is a proxy traced as lbproxy is (telemetry.Setup: the head, the
// W3C propagator) at ratio, spans to an in-memory exporter, access lines to
// buf; and its backend.
func headProxy(t *testing.T, ratio float64, buf *syncBuffer) (*proxy, *backend, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{ServiceName: "lbproxy",
		Exporter: telemetry.ExporterNone, SampleRatio: ratio, SpanProcessor: sdktrace.NewSimpleSpanProcessor(exp)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tel.Shutdown(context.Background()) })
	b := newBackend(t, "b", nil)
	p := newProxy(t, testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}},
		map[string]int{"SC1": 100}, nil)), proxyOpts{opts: Options{TracerProvider: tel.TracerProvider,
		Propagator: tel.Propagator, Head: tel.Head, AccessLogWriter: buf}})
	return p, b, exp
}

var unsampledParent = regexp.MustCompile(`^00-([0-9a-f]{32})-[0-9a-f]{16}-00$`)

// A request the head leaves unsampled starts no span, yet carries a new
// trace id, unsampled, to the backend and into its access line; a client's
// sampled traceparent still goes through the provider and is continued.
func TestHeadUnsampledRequestCarriesItsTraceID(t *testing.T) {
	var buf syncBuffer
	p, b, exp := headProxy(t, 0, &buf)
	c := client(t)
	for i := 0; i < 2; i++ {
		if res, _ := get(t, c, p.url+"/untraced", nil); res.StatusCode != 200 {
			t.Fatalf("status %d", res.StatusCode)
		}
		poll.EventuallyTrue(t, 20e9, "access line", func() bool { return len(buf.lines(t)) == i+1 })
		tp := b.last().Header.Get("Traceparent")
		m := unsampledParent.FindStringSubmatch(tp)
		if m == nil || m[1] == "00000000000000000000000000000000" {
			t.Fatalf("backend traceparent %q: want a new trace, not sampled", tp)
		}
		if got := buf.lines(t)[i]["trace_id"]; got != m[1] {
			t.Fatalf("access line trace_id %v, want the backend's %s", got, m[1])
		}
		if n := len(exp.GetSpans()); n != 0 {
			t.Fatalf("%d spans exported for an unsampled request, want 0", n)
		}
	}
	if l := buf.lines(t); l[0]["trace_id"] == l[1]["trace_id"] {
		t.Fatalf("two requests, one trace id %v", l[0]["trace_id"])
	}

	getInClientTrace(t, c, p.url+"/in-trace", exp)
	if tp := b.last().Header.Get("Traceparent"); len(tp) != 55 || tp[3:35] != clientTrace || tp[52:] != "-01" {
		t.Fatalf("backend traceparent %q: want the client's trace %s, sampled", tp, clientTrace)
	}
}

// A request the head samples gets its span, with the ids the head drew:
// the server span's trace id is the access line's and the backend's, and
// the backend's parent is the forward span.
func TestHeadSampledRequestIsTraced(t *testing.T) {
	var buf syncBuffer
	p, b, exp := headProxy(t, 1, &buf)
	if res, _ := get(t, client(t), p.url+"/traced", nil); res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
	poll.EventuallyTrue(t, 20e9, "spans and access line", func() bool {
		return len(buf.lines(t)) == 1 && len(exp.GetSpans()) >= 3 // request, pick or forward
	})
	var root, fwd sdktrace.ReadOnlySpan
	for _, s := range exp.GetSpans().Snapshots() {
		switch s.Name() {
		case "sluice.request":
			root = s
		case "sluice.forward":
			fwd = s
		}
	}
	if root == nil || fwd == nil {
		t.Fatalf("spans %v: want sluice.request and sluice.forward", exp.GetSpans())
	}
	id := root.SpanContext().TraceID().String()
	want := "00-" + id + "-" + fwd.SpanContext().SpanID().String() + "-01"
	if tp := b.last().Header.Get("Traceparent"); tp != want {
		t.Fatalf("backend traceparent %q, want %q", tp, want)
	}
	if got := buf.lines(t)[0]["trace_id"]; got != id {
		t.Fatalf("access line trace_id %v, want the span's %s", got, id)
	}
}

// traceparent writes what the W3C propagator writes, sampled or not.
func TestTraceparentIsThePropagators(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		var cfg trace.SpanContextConfig
		for k := range cfg.TraceID {
			cfg.TraceID[k] = byte(rnd.IntN(256))
		}
		for k := range cfg.SpanID {
			cfg.SpanID[k] = byte(rnd.IntN(256))
		}
		cfg.TraceID[0], cfg.SpanID[0] = 1, 1 // valid
		if i%2 == 0 {
			cfg.TraceFlags = trace.FlagsSampled
		}
		sc := trace.NewSpanContext(cfg)
		h := http.Header{}
		propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), propagation.HeaderCarrier(h))
		if got, want := traceparent(sc), h.Get("Traceparent"); got != want {
			t.Fatalf("traceparent(%v) = %q, want %q", sc, got, want)
		}
	}
}

// BenchmarkTraceUnsampled is an unsampled request's tracing, as
// ServeHTTP, an attempt and finish do it: start, inject into the
// outbound header, end. sdk: through the propagator and the provider (no
// head; main before the head); head: the head's decision (startTrace).
func BenchmarkTraceUnsampled(b *testing.B) {
	for _, withHead := range []bool{false, true} {
		b.Run(map[bool]string{false: "sdk", true: "head"}[withHead], func(b *testing.B) {
			tel, err := telemetry.Setup(context.Background(), telemetry.Options{ServiceName: "lbproxy",
				Exporter: telemetry.ExporterNone, SampleRatio: 0,
				SpanProcessor: sdktrace.NewBatchSpanProcessor(tracetest.NewNoopExporter())})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { tel.Shutdown(context.Background()) })
			s := &Server{tracer: tel.TracerProvider.Tracer("bench"), tracing: true, prop: tel.Propagator}
			if withHead {
				s.head = tel.Head
			}
			r := httptest.NewRequest(http.MethodGet, "http://demo.test/", nil)
			r.Header.Set("User-Agent", "bench")
			var fr forward.Request
			st := &reqState{}
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				*st = reqState{s: s, ctx: r.Context()}
				st.startTrace(r)
				fr.Extra = fr.Extra[:0]
				st.inject(st.ctx, extraCarrier{&fr})
				if st.span != nil {
					st.span.End()
				}
				if len(fr.Extra) != 1 || st.traceID() == "" {
					b.Fatalf("extra %v, trace %q", fr.Extra, st.traceID())
				}
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

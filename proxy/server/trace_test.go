package server

import (
	"net/http"
	"sort"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/testkit/poll"
)

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// A request whose first attempt fails to connect in SC1 and is retried once
// in SC2 produces: server span → pick, forward (failed), retry, pick (cross),
// forward (200), with the decision attributes, and the backend receives the
// second forward span's W3C traceparent.
func TestTraceOfCrossSubclusterRetry(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { tp.Shutdown(t.Context()) })
	dead := deadAddr(t)
	b := newBackend(t, "sc2", nil)
	snap := testSnapshot(7, testCluster(map[string][]config.Instance{"SC1": {inst(dead, 1)}, "SC2": {inst(b.addr, 1)}},
		map[string]int{"SC1": 100, "SC2": 0}, func(p *config.Policy) { p.Retry.RetryMax, p.Retry.CrossRetry = 0, 1 }))
	p := newProxy(t, snap, proxyOpts{opts: Options{TracerProvider: tp}})
	res, _ := get(t, client(t), p.url+"/traced", nil)
	if res.StatusCode != 200 {
		t.Fatalf("status %d, want 200 after the cross retry", res.StatusCode)
	}
	poll.EventuallyTrue(t, 20e9, "server span exported", func() bool {
		for _, s := range exp.GetSpans().Snapshots() {
			if s.Name() == "sluice.request" {
				return true
			}
		}
		return false
	})
	spans := exp.GetSpans().Snapshots()
	sort.Slice(spans, func(i, j int) bool { return spans[i].StartTime().Before(spans[j].StartTime()) })
	var names []string
	for _, s := range spans {
		names = append(names, s.Name())
	}
	want := []string{"sluice.request", "sluice.pick", "sluice.forward", "sluice.retry", "sluice.pick", "sluice.forward"}
	if len(names) != len(want) {
		t.Fatalf("spans %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("spans %v, want %v", names, want)
		}
	}
	root := spans[0]
	if root.SpanKind() != trace.SpanKindServer || root.Parent().IsValid() {
		t.Fatalf("root span kind %v parent %v", root.SpanKind(), root.Parent())
	}
	for _, s := range spans[1:] {
		if s.Parent().SpanID() != root.SpanContext().SpanID() || s.SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Fatalf("span %s is not a child of the server span", s.Name())
		}
	}
	check := func(s sdktrace.ReadOnlySpan, key string, want any) {
		t.Helper()
		v, ok := attrs(s)[attribute.Key(key)]
		if !ok {
			t.Fatalf("span %s lacks %s", s.Name(), key)
		}
		if got := v.AsInterface(); got != want {
			t.Fatalf("span %s: %s = %v, want %v", s.Name(), key, got, want)
		}
	}
	pick1, fwd1, retry, pick2, fwd2 := spans[1], spans[2], spans[3], spans[4], spans[5]
	check(pick1, "sluice.subcluster", "SC1")
	check(pick1, "sluice.instance", dead.String())
	check(pick1, "sluice.attempt", int64(1))
	check(pick1, "sluice.snapshot.version", int64(7))
	check(pick1, "sluice.algorithm", "wrr")
	check(fwd1, "sluice.error_code", CodeConnect)
	if fwd1.SpanKind() != trace.SpanKindClient || fwd2.SpanKind() != trace.SpanKindClient {
		t.Fatal("forward spans must be client spans")
	}
	check(retry, "sluice.attempt", int64(2))
	check(pick2, "sluice.subcluster", "SC2")
	check(pick2, "sluice.pick.reason", "cross-retry")
	check(pick2, "sluice.attempt", int64(2))
	check(fwd2, "sluice.instance", b.addr.String())
	check(fwd2, "http.response.status_code", int64(200))
	check(root, "sluice.route", "demo/all")
	check(root, "sluice.cluster", "main")
	check(root, "sluice.subcluster", "SC2")
	check(root, "sluice.attempt", int64(2))
	check(root, "sluice.pick.reason", "cross-retry")

	// The backend got the second forward span's context.
	tp2 := b.last().Header.Get("Traceparent")
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(t.Context(),
		propagation.HeaderCarrier(http.Header{"Traceparent": {tp2}})))
	if !sc.IsValid() || sc.TraceID() != root.SpanContext().TraceID() || sc.SpanID() != fwd2.SpanContext().SpanID() {
		t.Fatalf("backend traceparent %q: want trace %s span %s", tp2, root.SpanContext().TraceID(), fwd2.SpanContext().SpanID())
	}
}

// A client's sampled traceparent is continued (parent-based sampling):
// the server span is in the client's trace, its child, and the backend
// gets that trace; a request without one and not sampled still carries a
// new trace id, unsampled, to the backend and into the access line.
func TestTraceContinuesTheClientsTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
	t.Cleanup(func() { tp.Shutdown(t.Context()) })
	b := newBackend(t, "b", nil)
	var buf syncBuffer
	p := newProxy(t, testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}},
		map[string]int{"SC1": 100}, nil)), proxyOpts{opts: Options{TracerProvider: tp, AccessLogWriter: &buf,
		Propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}})
	getInClientTrace(t, client(t), p.url+"/in-trace", exp)
	backendTrace := func() (trace.SpanContext, string) {
		tp := b.last().Header.Get("Traceparent")
		return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(t.Context(),
			propagation.HeaderCarrier(http.Header{"Traceparent": {tp}}))), tp
	}
	if sc, raw := backendTrace(); sc.TraceID().String() != clientTrace || !sc.IsSampled() {
		t.Fatalf("backend traceparent %q: want the client's trace %s, sampled", raw, clientTrace)
	}

	if res, _ := get(t, client(t), p.url+"/untraced", nil); res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
	sc, raw := backendTrace()
	if !sc.IsValid() || sc.IsSampled() || sc.TraceID().String() == clientTrace {
		t.Fatalf("backend traceparent %q: want a new trace, not sampled", raw)
	}
	lines := buf.lines(t)
	if len(lines) != 2 || lines[0]["trace_id"] != clientTrace || lines[1]["trace_id"] != sc.TraceID().String() {
		t.Fatalf("access lines %v: want trace ids %s and %s", lines, clientTrace, sc.TraceID())
	}
}

// Client's trace: a request in it (sampled) is served in it — the server
// span is in the client's trace, its child.
const clientTrace, clientSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"

func getInClientTrace(t *testing.T, c *http.Client, url string, exp *tracetest.InMemoryExporter) {
	t.Helper()
	if res, _ := get(t, c, url, map[string]string{"Traceparent": "00-" + clientTrace + "-" + clientSpan + "-01"}); res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
	poll.EventuallyTrue(t, 20e9, "server span exported", func() bool { return len(exp.GetSpans()) >= 2 })
	var root sdktrace.ReadOnlySpan
	for _, s := range exp.GetSpans().Snapshots() {
		if s.Name() == "sluice.request" {
			root = s
		}
	}
	if root == nil || root.SpanContext().TraceID().String() != clientTrace || root.Parent().SpanID().String() != clientSpan {
		t.Fatalf("server span %v: want trace %s, parent %s", root, clientTrace, clientSpan)
	}
}

// An answer is counted under the sub-cluster that gave it: SC2's after a
// retry moved there from SC1, whose pick is counted and whose answers are
// not (finish reuses the first pick's metrics only for that sub-cluster).
func TestAnswerCountedUnderTheAnsweringSubcluster(t *testing.T) {
	dead := deadAddr(t)
	b := newBackend(t, "sc2", nil)
	snap := testSnapshot(7, testCluster(map[string][]config.Instance{"SC1": {inst(dead, 1)}, "SC2": {inst(b.addr, 1)}},
		map[string]int{"SC1": 100, "SC2": 0}, func(p *config.Policy) { p.Retry.RetryMax, p.Retry.CrossRetry = 0, 1 }))
	reg := prometheus.NewRegistry()
	p := newProxy(t, snap, proxyOpts{opts: Options{UpstreamClient: UpstreamFast, Metrics: reg}})
	for i := 0; i < 3; i++ {
		if res, _ := get(t, client(t), p.url+"/", nil); res.StatusCode != 200 {
			t.Fatalf("status %d, want 200 after the cross retry", res.StatusCode)
		}
	}
	m := p.s.metrics
	for _, c := range []struct {
		what string
		got  float64
		want float64
	}{
		{"SC1 picks", testutil.ToFloat64(m.picks.WithLabelValues("main", "SC1")), 3},
		{"SC1 2xx", testutil.ToFloat64(m.requests.WithLabelValues("main", "SC1", "2xx")), 0},
		{"SC2 2xx", testutil.ToFloat64(m.requests.WithLabelValues("main", "SC2", "2xx")), 3},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
}

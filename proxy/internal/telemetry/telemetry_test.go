package telemetry

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStdoutExporterPrintsSampledSpans(t *testing.T) {
	var buf bytes.Buffer
	tel, err := Setup(context.Background(), Options{ServiceName: "lbproxy", ServiceInstance: "p1", Exporter: ExporterStdout, SampleRatio: 1, Stdout: &buf})
	if err != nil {
		t.Fatal(err)
	}
	_, sp := tel.TracerProvider.Tracer("test").Start(context.Background(), "sluice.request")
	sp.End()
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{`"Name":"sluice.request"`, `"Value":"lbproxy"`, `"Value":"p1"`} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout export lacks %s:\n%s", want, out)
		}
	}
}

func TestZeroRatioSamplesNothingButFollowsParents(t *testing.T) {
	var buf bytes.Buffer
	tel, err := Setup(context.Background(), Options{ServiceName: "x", Exporter: ExporterStdout, SampleRatio: 0, Stdout: &buf})
	if err != nil {
		t.Fatal(err)
	}
	_, sp := tel.TracerProvider.Tracer("test").Start(context.Background(), "root")
	if sp.SpanContext().IsSampled() {
		t.Error("a root span was sampled at ratio 0")
	}
	sp.End()
	tel.Shutdown(context.Background())
	if strings.Contains(buf.String(), "root") {
		t.Errorf("unsampled span exported: %s", buf.String())
	}
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, the automatic choice exports OTLP
// over HTTP when the protocol says so.
func TestAutoExporterUsesOTLPFromEnvironment(t *testing.T) {
	var got atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/v1/traces" && r.Header.Get("Content-Type") == "application/x-protobuf" {
			got.Add(1)
		}
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	tel, err := Setup(context.Background(), Options{ServiceName: "lbproxy", SampleRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, sp := tel.TracerProvider.Tracer("test").Start(context.Background(), "sluice.request")
	sp.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if got.Load() == 0 {
		t.Fatal("no OTLP/HTTP export reached the collector")
	}
}

func TestSetupRejectsBadOptions(t *testing.T) {
	cases := []struct {
		o    Options
		env  map[string]string
		want string
	}{
		{Options{SampleRatio: 1.5}, nil, "sample ratio 1.5 is outside 0..1"},
		{Options{Exporter: "zipkin"}, nil, `exporter "zipkin"`},
		{Options{Exporter: ExporterOTLP}, map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "thrift"}, `OTEL_EXPORTER_OTLP_PROTOCOL "thrift"`},
	}
	for _, c := range cases {
		c.o.Getenv = func(k string) string { return c.env[k] }
		if _, err := Setup(context.Background(), c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want %q", c.o, err, c.want)
		}
	}
}

func TestNoExporterIsNoop(t *testing.T) {
	tel, err := Setup(context.Background(), Options{Getenv: func(string) string { return "" }, SampleRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, sp := tel.TracerProvider.Tracer("t").Start(context.Background(), "x")
	if sp.IsRecording() {
		t.Error("span records with no exporter configured")
	}
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

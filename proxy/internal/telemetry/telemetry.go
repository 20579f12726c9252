// Package telemetry sets up OpenTelemetry tracing for a Sluice process: the
// exporter chosen by the standard OTEL_* environment variables (or stdout for
// local use), a parent-based ratio sampler, and W3C trace-context propagation.
// Nothing here is global: Setup returns the providers and the caller passes
// them on, so tests can run several set-ups side by side.
//
// The scheduler and the agent can copy this package's shape: one Setup call at
// start, one Shutdown at exit.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Exporter names accepted by Options.Exporter.
const (
	ExporterAuto   = ""       // OTLP when OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set, else none
	ExporterNone   = "none"   // spans are not recorded at all
	ExporterStdout = "stdout" // pretty JSON spans on Options.Stdout (local use)
	ExporterOTLP   = "otlp"   // OTLP; protocol from OTEL_EXPORTER_OTLP_PROTOCOL (grpc default, http/protobuf)
)

// Options configure Setup.
type Options struct {
	// ServiceName is the resource's service.name (e.g. "lbproxy").
	ServiceName string
	// ServiceInstance is service.instance.id (the proxy id).
	ServiceInstance string
	// Version is service.version.
	Version string
	// Exporter is one of the Exporter* names.
	Exporter string
	// SampleRatio is the share of root traces sampled, 0..1; a sampled
	// parent is always followed (parent-based). Default 0 (only traces whose
	// caller sampled them).
	SampleRatio float64
	// Stdout receives the stdout exporter's output; nil means os.Stdout.
	Stdout io.Writer
	// SpanProcessor, when set, is added to the provider (tests use an
	// in-memory exporter with a synchronous processor).
	SpanProcessor sdktrace.SpanProcessor
	// Getenv reads environment variables; nil means os.Getenv.
	Getenv func(string) string
}

// Telemetry is a configured tracer provider and propagator. Safe for
// concurrent use.
type Telemetry struct {
	// TracerProvider is a noop provider when nothing is exported.
	TracerProvider trace.TracerProvider
	// Propagator is W3C trace context plus baggage.
	Propagator propagation.TextMapPropagator
	// Head decides new traces before their spans start (head.go); nil
	// when nothing is exported.
	Head *Head
	sdk  *sdktrace.TracerProvider
}

// Setup builds the tracer provider. Exporters dial lazily, so Setup does no
// network I/O.
func Setup(ctx context.Context, o Options) (*Telemetry, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if o.SampleRatio < 0 || o.SampleRatio > 1 {
		return nil, fmt.Errorf("telemetry: sample ratio %v is outside 0..1", o.SampleRatio)
	}
	t := &Telemetry{Propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}
	exp := o.Exporter
	if exp == ExporterAuto {
		exp = ExporterNone
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
			exp = ExporterOTLP
		}
		if getenv("OTEL_TRACES_EXPORTER") == "none" {
			exp = ExporterNone
		}
	}
	var opts []sdktrace.TracerProviderOption
	switch exp {
	case ExporterNone:
		if o.SpanProcessor == nil {
			t.TracerProvider = noop.NewTracerProvider()
			return t, nil
		}
	case ExporterStdout:
		w := o.Stdout
		if w == nil {
			w = os.Stdout
		}
		e, err := stdouttrace.New(stdouttrace.WithWriter(w))
		if err != nil {
			return nil, fmt.Errorf("telemetry: stdout exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(e))
	case ExporterOTLP:
		proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
		if proto == "" {
			proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		var (
			e   sdktrace.SpanExporter
			err error
		)
		switch strings.ToLower(proto) {
		case "", "grpc":
			e, err = otlptracegrpc.New(ctx)
		case "http/protobuf", "http":
			e, err = otlptracehttp.New(ctx)
		default:
			return nil, fmt.Errorf("telemetry: OTEL_EXPORTER_OTLP_PROTOCOL %q: want grpc or http/protobuf", proto)
		}
		if err != nil {
			return nil, fmt.Errorf("telemetry: otlp exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(e))
	default:
		return nil, fmt.Errorf("telemetry: exporter %q: want none, stdout or otlp", o.Exporter)
	}
	if o.SpanProcessor != nil {
		opts = append(opts, sdktrace.WithSpanProcessor(o.SpanProcessor))
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", o.ServiceName)}
	if o.ServiceInstance != "" {
		attrs = append(attrs, attribute.String("service.instance.id", o.ServiceInstance))
	}
	if o.Version != "" {
		attrs = append(attrs, attribute.String("service.version", o.Version))
	}
	t.Head = &Head{root: sdktrace.TraceIDRatioBased(o.SampleRatio)}
	opts = append(opts,
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
		sdktrace.WithSampler(sdktrace.ParentBased(t.Head.root)),
		sdktrace.WithIDGenerator(t.Head),
	)
	t.sdk = sdktrace.NewTracerProvider(opts...)
	t.TracerProvider = t.sdk
	return t, nil
}

// Shutdown flushes and stops the exporter; ctx bounds the flush.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t == nil || t.sdk == nil {
		return nil
	}
	if err := t.sdk.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("telemetry: shutdown: %w", err)
	}
	return nil
}

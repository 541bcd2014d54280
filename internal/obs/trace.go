package obs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/debug"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/stats"

	"github.com/warden-ai/warden/config"
)

// TracingOption adjusts SetupTracing.
type TracingOption func(*tracingOptions)

type tracingOptions struct {
	stdout  io.Writer
	version string
	ratio   *LiveRatio // nil: the fixed cfg.SampleRatio
}

// WithStdoutWriter sends the stdout exporter's spans to w instead of
// os.Stdout.
func WithStdoutWriter(w io.Writer) TracingOption {
	return func(o *tracingOptions) { o.stdout = w }
}

// WithServiceVersion sets the service.version resource attribute; by
// default it is the main module's version from the build information.
func WithServiceVersion(v string) TracingOption {
	return func(o *tracingOptions) { o.version = v }
}

// SetupTracing builds the tracer provider cfg describes, for the service
// serviceName (e.g. "warden-gateway"):
//
//   - exporter none: a no-op provider;
//   - stdout: spans as JSON lines on standard output (WithStdoutWriter);
//   - otlp: OTLP over HTTP (protobuf) to cfg.Endpoint with cfg.Headers; a
//     URL endpoint without a path posts to /v1/traces, and http:// or
//     cfg.Insecure with a host:port endpoint sends without TLS.
//
// Spans are batched; new traces are sampled at cfg.SampleRatio (or by
// WithLiveRatio's sampler, which a reload can change) and child
// spans follow their parent's decision. The resource carries
// service.name, service.version, the SDK's attributes and
// OTEL_RESOURCE_ATTRIBUTES. No global is set (see InstallGlobal). The
// returned shutdown flushes pending spans; call it before exit.
func SetupTracing(ctx context.Context, cfg config.Tracing, serviceName string, opts ...TracingOption) (trace.TracerProvider, func(context.Context) error, error) {
	o := tracingOptions{stdout: os.Stdout, version: buildVersion()}
	for _, opt := range opts {
		opt(&o)
	}
	if !(cfg.SampleRatio >= 0 && cfg.SampleRatio <= 1) {
		return nil, nil, fmt.Errorf("obs: sample ratio %g not in [0, 1]", cfg.SampleRatio)
	}
	var exp sdktrace.SpanExporter
	switch cfg.Exporter {
	case config.ExporterNone, "":
		return tracenoop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	case config.ExporterStdout:
		var err error
		if exp, err = stdouttrace.New(stdouttrace.WithWriter(o.stdout)); err != nil {
			return nil, nil, fmt.Errorf("obs: stdout exporter: %w", err)
		}
	case config.ExporterOTLP:
		httpOpts, err := otlpOptions(cfg)
		if err != nil {
			return nil, nil, err
		}
		if exp, err = otlptracehttp.New(ctx, httpOpts...); err != nil {
			return nil, nil, fmt.Errorf("obs: otlp exporter: %w", err)
		}
	default:
		return nil, nil, fmt.Errorf("obs: unknown trace exporter %q (want none, stdout or otlp)", cfg.Exporter)
	}
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
		// Last, so that the environment cannot rename the service.
		resource.WithAttributes(semconv.ServiceName(serviceName), semconv.ServiceVersion(o.version)),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, nil, fmt.Errorf("obs: resource: %w", err)
	}
	var root sdktrace.Sampler = sdktrace.TraceIDRatioBased(cfg.SampleRatio)
	if o.ratio != nil {
		root = o.ratio
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(root)),
	)
	return tp, tp.Shutdown, nil
}

// otlpOptions translates the endpoint forms of config.Tracing.
func otlpOptions(cfg config.Tracing) ([]otlptracehttp.Option, error) {
	u, isURL, err := config.ParseOTLPEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("obs: otlp endpoint: %w", err)
	}
	var opts []otlptracehttp.Option
	if isURL {
		path := u.Path
		if path == "" || path == "/" {
			path = "/v1/traces"
		}
		opts = append(opts, otlptracehttp.WithEndpoint(u.Host), otlptracehttp.WithURLPath(path))
		if u.Scheme == "http" {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
	} else {
		opts = append(opts, otlptracehttp.WithEndpoint(cfg.Endpoint))
		if cfg.Insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
	}
	if len(cfg.Headers) > 0 {
		opts = append(opts, otlptracehttp.WithHeaders(cfg.Headers))
	}
	return opts, nil
}

// buildVersion is the main module's version, "(devel)" for local builds.
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// Propagator returns the W3C Trace Context propagator warden uses between
// its processes. Baggage is deliberately not propagated: it would carry
// client-chosen data into workers.
func Propagator() propagation.TextMapPropagator {
	return propagation.TraceContext{}
}

// InstallGlobal makes tp and Propagator the OpenTelemetry globals, for
// libraries that read only those. warden's own packages take the provider
// explicitly.
func InstallGlobal(tp trace.TracerProvider) {
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(Propagator())
}

// HTTPServerOptions configures otelhttp for the gateway's public API:
// spans go to tp, and a client's traceparent is treated as cfg.Incoming
// says: follow continues the client's trace, link starts a new trace
// linked to it, ignore starts a new trace without looking at it. (The
// gateway's own calls to workers always propagate, with Propagator.)
func HTTPServerOptions(cfg config.Tracing, tp trace.TracerProvider) []otelhttp.Option {
	opts := []otelhttp.Option{
		otelhttp.WithTracerProvider(tp),
		// warden's metrics are Prometheus; keep otelhttp off the global
		// meter provider.
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
	}
	switch cfg.Incoming {
	case config.IncomingLink:
		opts = append(opts,
			otelhttp.WithPropagators(Propagator()),
			otelhttp.WithPublicEndpointFn(func(*http.Request) bool { return true }))
	case config.IncomingIgnore:
		// A propagator with no members extracts nothing.
		opts = append(opts, otelhttp.WithPropagators(propagation.NewCompositeTextMapPropagator()))
	default:
		opts = append(opts, otelhttp.WithPropagators(Propagator()))
	}
	return opts
}

// GRPCServerHandler traces a gRPC server's calls with tp (workers: one
// span per control RPC, continuing the gateway's trace from the call's
// metadata).
func GRPCServerHandler(tp trace.TracerProvider) stats.Handler {
	return otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(Propagator()),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()))
}

// GRPCClientHandler traces a gRPC client's calls with tp and propagates
// the trace in the calls' metadata (the gateway's calls to workers).
func GRPCClientHandler(tp trace.TracerProvider) stats.Handler {
	return otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(Propagator()),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()))
}

// Traceparent returns the W3C traceparent of the span in ctx ("" when
// there is none), for protocol fields that carry it explicitly.
func Traceparent(ctx context.Context) string {
	carrier := propagation.MapCarrier{}
	Propagator().Inject(ctx, carrier)
	return carrier.Get("traceparent")
}

// WithRemoteParent returns ctx with the span context traceparent names as
// its remote parent, unless ctx already carries a valid span context (the
// one propagated in the call's metadata wins) or traceparent is empty or
// malformed.
func WithRemoteParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" || trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	return Propagator().Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

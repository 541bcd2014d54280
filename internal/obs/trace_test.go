package obs

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/warden-ai/warden/config"
)

func tracing(exporter config.Exporter, endpoint string) config.Tracing {
	return config.Tracing{Exporter: exporter, Endpoint: endpoint, SampleRatio: 1, Incoming: config.IncomingFollow}
}

func TestSetupTracingNone(t *testing.T) {
	tp, shutdown, err := SetupTracing(context.Background(), tracing(config.ExporterNone, ""), "warden-test")
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("t").Start(context.Background(), "op")
	if span.IsRecording() || span.SpanContext().IsValid() {
		t.Error("the none exporter records spans")
	}
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

func TestSetupTracingStdout(t *testing.T) {
	var buf bytes.Buffer
	tp, shutdown, err := SetupTracing(context.Background(), tracing(config.ExporterStdout, ""), "warden-test",
		WithStdoutWriter(&buf), WithServiceVersion("v1.2.3"))
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("t").Start(context.Background(), "gateway.admit")
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{`"Name":"gateway.admit"`, `"Value":"warden-test"`, `"Value":"v1.2.3"`, span.SpanContext().TraceID().String()} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout export lacks %s:\n%s", want, out)
		}
	}
}

// otlpCollector records the export requests it receives.
func otlpCollector(t *testing.T) (*httptest.Server, <-chan *http.Request, <-chan *coltracepb.ExportTraceServiceRequest) {
	t.Helper()
	reqs := make(chan *http.Request, 16)
	bodies := make(chan *coltracepb.ExportTraceServiceRequest, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		data, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		msg := &coltracepb.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(data, msg); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		reqs <- r
		bodies <- msg
		resp, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
	}))
	t.Cleanup(srv.Close)
	return srv, reqs, bodies
}

func TestSetupTracingOTLP(t *testing.T) {
	srv, reqs, bodies := otlpCollector(t)
	hostPort := strings.TrimPrefix(srv.URL, "http://")

	for name, cfg := range map[string]config.Tracing{
		"url endpoint": tracing(config.ExporterOTLP, srv.URL),
		"host:port endpoint, insecure": func() config.Tracing {
			c := tracing(config.ExporterOTLP, hostPort)
			c.Insecure = true
			return c
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			cfg.Headers = map[string]string{"x-api-key": "k-123"}
			tp, shutdown, err := SetupTracing(context.Background(), cfg, "warden-gateway", WithServiceVersion("v9"))
			if err != nil {
				t.Fatal(err)
			}
			_, span := tp.Tracer("t").Start(context.Background(), "request")
			span.End()
			// Shutdown flushes the batch: the export has arrived when it returns.
			if err := shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			var r *http.Request
			var msg *coltracepb.ExportTraceServiceRequest
			select {
			case r = <-reqs:
				msg = <-bodies
			default:
				t.Fatal("no export request arrived")
			}
			if r.URL.Path != "/v1/traces" || r.Header.Get("x-api-key") != "k-123" || r.Method != http.MethodPost {
				t.Errorf("%s %s, x-api-key %q", r.Method, r.URL.Path, r.Header.Get("x-api-key"))
			}
			rs := msg.GetResourceSpans()
			if len(rs) != 1 || len(rs[0].GetScopeSpans()) != 1 || len(rs[0].GetScopeSpans()[0].GetSpans()) != 1 {
				t.Fatalf("want one span, got %v", msg)
			}
			got := rs[0].GetScopeSpans()[0].GetSpans()[0]
			if got.GetName() != "request" || trace.TraceID(got.GetTraceId()) != span.SpanContext().TraceID() {
				t.Errorf("span %q trace %x", got.GetName(), got.GetTraceId())
			}
			attrs := map[string]string{}
			for _, kv := range rs[0].GetResource().GetAttributes() {
				attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
			}
			if attrs["service.name"] != "warden-gateway" || attrs["service.version"] != "v9" {
				t.Errorf("resource attributes %v", attrs)
			}
		})
	}
}

func TestSetupTracingSampling(t *testing.T) {
	cfg := tracing(config.ExporterStdout, "")
	cfg.SampleRatio = 0
	tp, shutdown, err := SetupTracing(context.Background(), cfg, "warden-test", WithStdoutWriter(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = shutdown(context.Background()) }()
	tr := tp.Tracer("t")
	_, root := tr.Start(context.Background(), "root")
	if root.SpanContext().IsSampled() {
		t.Error("ratio 0 sampled a new trace")
	}
	root.End()
	parent, _ := spanContext(t) // a sampled remote parent
	_, child := tr.Start(trace.ContextWithRemoteSpanContext(parent, trace.SpanContextFromContext(parent)), "child")
	if !child.SpanContext().IsSampled() {
		t.Error("a sampled parent was not followed")
	}
	child.End()
}

func TestSetupTracingErrors(t *testing.T) {
	bad := []config.Tracing{
		tracing("jaeger", ""),
		tracing(config.ExporterOTLP, "not an endpoint"),
		{Exporter: config.ExporterStdout, SampleRatio: 2},
	}
	for _, cfg := range bad {
		if _, _, err := SetupTracing(context.Background(), cfg, "x"); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

func TestHTTPServerOptionsIncomingPolicy(t *testing.T) {
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	const clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	for _, tc := range []struct {
		policy     config.IncomingTrace
		sameTrace  bool
		linkedBack bool
	}{
		{config.IncomingFollow, true, false},
		{config.IncomingLink, false, true},
		{config.IncomingIgnore, false, false},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			cfg := tracing(config.ExporterNone, "")
			cfg.Incoming = tc.policy
			h := otelhttp.NewHandler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), "api", HTTPServerOptions(cfg, tp)...)
			req := httptest.NewRequest(http.MethodPost, "/v1/completions", nil)
			req.Header.Set("traceparent", traceparent)
			h.ServeHTTP(httptest.NewRecorder(), req)

			spans := rec.Ended()
			if len(spans) != 1 {
				t.Fatalf("%d spans", len(spans))
			}
			s := spans[0]
			if got := s.SpanContext().TraceID().String() == clientTrace; got != tc.sameTrace {
				t.Errorf("continues the client's trace: %v, want %v", got, tc.sameTrace)
			}
			linked := len(s.Links()) == 1 && s.Links()[0].SpanContext.TraceID().String() == clientTrace
			if linked != tc.linkedBack {
				t.Errorf("linked to the client's span: %v, want %v", linked, tc.linkedBack)
			}
		})
	}
}

func TestTraceparentRoundTrip(t *testing.T) {
	if got := Traceparent(context.Background()); got != "" {
		t.Errorf("traceparent without a span: %q", got)
	}
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("t").Start(context.Background(), "gateway")
	defer span.End()
	tpHeader := Traceparent(ctx)
	sc := span.SpanContext()
	if want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"; tpHeader != want {
		t.Fatalf("Traceparent = %q, want %q", tpHeader, want)
	}
	// A worker whose call carried no trace metadata takes the field.
	got := trace.SpanContextFromContext(WithRemoteParent(context.Background(), tpHeader))
	if got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsRemote() || !got.IsSampled() {
		t.Errorf("remote parent %v, want %v", got, sc)
	}
	// The metadata's context wins over the field; garbage is ignored.
	_, other := tp.Tracer("t").Start(context.Background(), "other")
	defer other.End()
	octx := trace.ContextWithSpanContext(context.Background(), other.SpanContext())
	if got := trace.SpanContextFromContext(WithRemoteParent(octx, tpHeader)); got.SpanID() != other.SpanContext().SpanID() {
		t.Errorf("the traceparent field replaced the propagated context")
	}
	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-0000000000000000-01"} {
		if got := trace.SpanContextFromContext(WithRemoteParent(context.Background(), bad)); got.IsValid() {
			t.Errorf("WithRemoteParent(%q) = %v", bad, got)
		}
	}
}

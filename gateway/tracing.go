package gateway

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/internal/obs"
)

// tracerName is the instrumentation scope of the gateway's own spans.
const tracerName = "github.com/warden-ai/warden/gateway"

// Attributes of the request span naming the workers a request was routed
// to (the workers' own spans carry obs.AttrWorkerID).
const (
	attrDecodeWorker  = attribute.Key("warden.decode.worker_id")
	attrPrefillWorker = attribute.Key("warden.prefill.worker_id")
)

// apiRoutes are the API routes traced, by path; the span of one is named
// "METHOD path". Probes and scrapes (/healthz, /readyz, /metrics) are not
// traced, and an unknown path never names a span (bounded span names).
var apiRoutes = map[string]bool{"/v1/chat/completions": true, "/v1/completions": true, "/v1/models": true}

// apiTraceOptions configure the API's HTTP server spans: named after the
// route, for /v1/ paths only.
func apiTraceOptions() []otelhttp.Option {
	return []otelhttp.Option{
		otelhttp.WithFilter(func(r *http.Request) bool { return len(r.URL.Path) > 4 && r.URL.Path[:4] == "/v1/" }),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			if apiRoutes[r.URL.Path] {
				return r.Method + " " + r.URL.Path
			}
			return r.Method
		}),
	}
}

// startRequestSpan starts the span covering a request's lifecycle, named
// "{operation} {model}" as the GenAI conventions have it, as a child of
// the HTTP server span in ctx. The lifecycle records each state
// transition on it as an event; endRequestSpan ends it.
func (g *Gateway) startRequestSpan(ctx context.Context, req *api.GenerateRequest, tenant string) (context.Context, trace.Span) {
	op := obs.OperationCompletion
	if req.Kind == api.KindChat {
		op = obs.OperationChat
	}
	attrs := append(obs.RequestAttrs(req.RequestID, tenant, lifecycle.Epoch),
		obs.AttrOperation.String(op), obs.AttrModel.String(req.Model))
	start := req.ReceivedAt
	if start.IsZero() {
		start = time.Now()
	}
	return g.tracer.Start(ctx, op+" "+req.Model, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(start), trace.WithAttributes(attrs...))
}

// endRequestSpan ends a request's span with its outcome and usage (I7):
// an error status for failed requests; rejected and aborted ones carry
// their cause (the events say where).
func endRequestSpan(span trace.Span, s lifecycle.Snapshot) {
	span.SetAttributes(
		obs.AttrOutcome.String(s.State.String()), obs.AttrCause.String(s.Cause), obs.AttrStage.String(s.Stage.String()),
		obs.AttrInputTokens.Int64(s.PromptTokens), obs.AttrOutputTokens.Int64(s.CompletionTokens))
	if s.State == lifecycle.Failed {
		span.SetStatus(codes.Error, s.Cause)
	}
	span.End(trace.WithTimestamp(s.Finished))
}

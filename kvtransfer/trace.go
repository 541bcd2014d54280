package kvtransfer

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/warden-ai/warden/kvtransfer/internal/wire"
)

// traceContextOf is the span context in ctx in the Hello's form (zero
// when ctx carries none).
func traceContextOf(ctx context.Context) wire.TraceContext {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return wire.TraceContext{}
	}
	return wire.TraceContext{TraceID: sc.TraceID(), SpanID: sc.SpanID(), Flags: uint8(sc.TraceFlags())}
}

// spanContextOf turns a Hello's trace context back into a remote span
// context; an absent or malformed one is the invalid zero value.
func spanContextOf(tc wire.TraceContext) trace.SpanContext {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    tc.TraceID,
		SpanID:     tc.SpanID,
		TraceFlags: trace.TraceFlags(tc.Flags) & trace.FlagsSampled,
		Remote:     true,
	})
	if !sc.IsValid() {
		return trace.SpanContext{}
	}
	return sc
}

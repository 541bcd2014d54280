// Package obs sets up what gateway and workers share for observability:
// structured logs (log/slog) that carry the request's identity and trace,
// and OpenTelemetry tracing with the exporter the configuration names.
//
// Nothing here touches process-wide state unless asked: SetupTracing
// returns a provider for the caller to pass on, and InstallGlobal exists
// for libraries that only read the OpenTelemetry globals.
package obs

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// Attribute keys added to every log record whose context carries them.
const (
	KeyTraceID   = "trace_id"
	KeySpanID    = "span_id"
	KeyRequestID = "request_id"
	KeyTenant    = "tenant"
)

// NewLogger returns a logger writing to w at level (debug, info, warn,
// error, or any form slog.Level.UnmarshalText accepts) in format json or
// text. Its records carry trace_id, span_id, request_id and tenant from
// the context passed to the logging call (see ContextHandler). In JSON,
// durations are seconds (a number), not Go's nanoseconds.
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	lvl, err := ParseLevel(level)
	if err != nil {
		return nil, err
	}
	var v slog.LevelVar
	v.Set(lvl)
	return NewLoggerVar(w, &v, format)
}

// ParseLevel parses a log level name (debug, info, warn, error, or any
// form slog.Level.UnmarshalText accepts).
func ParseLevel(level string) (slog.Level, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return 0, fmt.Errorf("obs: log level %q: want debug, info, warn or error", level)
	}
	return lvl, nil
}

// NewLoggerVar is NewLogger with a level the caller may change while the
// logger runs (a configuration reload).
func NewLoggerVar(w io.Writer, level *slog.LevelVar, format string) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch strings.ToLower(format) {
	case "json":
		opts.ReplaceAttr = durationSeconds
		h = slog.NewJSONHandler(w, opts)
	case "text":
		h = slog.NewTextHandler(w, opts)
	default:
		return nil, fmt.Errorf("obs: log format %q: want json or text", format)
	}
	return slog.New(NewContextHandler(h)), nil
}

// durationSeconds writes duration attributes as seconds, the unit log
// queries and Prometheus use, instead of JSON's nanoseconds.
func durationSeconds(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.Float64Value(a.Value.Duration().Seconds())
	}
	return a
}

// requestKey is the context key of requestInfo.
type requestKey struct{}

// requestInfo identifies the request a context belongs to.
type requestInfo struct {
	requestID, tenant string
}

// WithRequest returns a context whose log records carry request_id and
// tenant. Empty values are left out; tenant may be added later with
// WithTenant, once the caller is authenticated.
func WithRequest(ctx context.Context, requestID, tenant string) context.Context {
	return context.WithValue(ctx, requestKey{}, requestInfo{requestID: requestID, tenant: tenant})
}

// WithTenant returns a context whose log records carry tenant, keeping
// the request ID already set.
func WithTenant(ctx context.Context, tenant string) context.Context {
	info, _ := ctx.Value(requestKey{}).(requestInfo)
	info.tenant = tenant
	return context.WithValue(ctx, requestKey{}, info)
}

// RequestFromContext returns what WithRequest and WithTenant stored
// ("" when unset).
func RequestFromContext(ctx context.Context) (requestID, tenant string) {
	info, _ := ctx.Value(requestKey{}).(requestInfo)
	return info.requestID, info.tenant
}

// contextAttrs returns the attributes ctx contributes to a record.
func contextAttrs(ctx context.Context) []slog.Attr {
	if ctx == nil {
		return nil
	}
	var attrs []slog.Attr
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		attrs = append(attrs, slog.String(KeyTraceID, sc.TraceID().String()), slog.String(KeySpanID, sc.SpanID().String()))
	}
	info, _ := ctx.Value(requestKey{}).(requestInfo)
	if info.requestID != "" {
		attrs = append(attrs, slog.String(KeyRequestID, info.requestID))
	}
	if info.tenant != "" {
		attrs = append(attrs, slog.String(KeyTenant, info.tenant))
	}
	return attrs
}

// ContextHandler wraps a slog.Handler and adds the context's trace_id,
// span_id, request_id and tenant to every record, at the top level even
// when the logger has opened groups (so that log queries find them in
// one place).
type ContextHandler struct {
	// pre is the wrapped handler with the attributes added before the
	// first group; ops replays later WithAttrs/WithGroup calls on top of
	// it, so context attributes can be inserted before any group.
	pre   slog.Handler
	ops   []func(slog.Handler) slog.Handler
	inner slog.Handler // pre with ops applied: the no-context fast path
}

var _ slog.Handler = (*ContextHandler)(nil)

// NewContextHandler wraps h.
func NewContextHandler(h slog.Handler) *ContextHandler {
	return &ContextHandler{pre: h, inner: h}
}

// Enabled implements slog.Handler.
func (h *ContextHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.inner.Enabled(ctx, level)
}

// Handle implements slog.Handler.
func (h *ContextHandler) Handle(ctx context.Context, r slog.Record) error {
	attrs := contextAttrs(ctx)
	switch {
	case len(attrs) == 0:
		return h.inner.Handle(ctx, r)
	case len(h.ops) == 0:
		r.AddAttrs(attrs...)
		return h.inner.Handle(ctx, r)
	}
	out := h.pre.WithAttrs(attrs)
	for _, op := range h.ops {
		out = op(out)
	}
	return out.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h *ContextHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	if len(h.ops) == 0 {
		next := h.pre.WithAttrs(attrs)
		return &ContextHandler{pre: next, inner: next}
	}
	return h.with(func(x slog.Handler) slog.Handler { return x.WithAttrs(attrs) })
}

// WithGroup implements slog.Handler.
func (h *ContextHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return h.with(func(x slog.Handler) slog.Handler { return x.WithGroup(name) })
}

func (h *ContextHandler) with(op func(slog.Handler) slog.Handler) *ContextHandler {
	return &ContextHandler{
		pre:   h.pre,
		ops:   append(h.ops[:len(h.ops):len(h.ops)], op),
		inner: op(h.inner),
	}
}

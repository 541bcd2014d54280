package obs

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// spanContext returns a context carrying a fixed, valid span context.
func spanContext(t *testing.T) (context.Context, trace.SpanContext) {
	t.Helper()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	return trace.ContextWithSpanContext(context.Background(), sc), sc
}

// lines decodes JSON log lines.
func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not JSON: %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func TestLoggerAddsContextAttributes(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger(&buf, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	ctx, sc := spanContext(t)
	ctx = WithRequest(ctx, "req-123", "acme")

	log.InfoContext(ctx, "admitted", "prompt_tokens", 42)
	log.With("worker", "w1").WithGroup("kv").InfoContext(ctx, "reserved", "pages", 3)
	log.Info("no context")
	log.DebugContext(ctx, "below the level")

	got := lines(t, &buf)
	if len(got) != 3 {
		t.Fatalf("got %d lines, want 3: %v", len(got), got)
	}
	for i, l := range got[:2] {
		if l[KeyTraceID] != sc.TraceID().String() || l[KeySpanID] != sc.SpanID().String() ||
			l[KeyRequestID] != "req-123" || l[KeyTenant] != "acme" {
			t.Errorf("line %d lacks the context attributes at top level: %v", i, l)
		}
	}
	if got[0]["prompt_tokens"] != float64(42) || got[0]["msg"] != "admitted" {
		t.Errorf("record attributes lost: %v", got[0])
	}
	if got[1]["worker"] != "w1" {
		t.Errorf("WithAttrs lost: %v", got[1])
	}
	if kv, ok := got[1]["kv"].(map[string]any); !ok || kv["pages"] != float64(3) || len(kv) != 1 {
		t.Errorf("group should hold only the record's attributes: %v", got[1])
	}
	for _, k := range []string{KeyTraceID, KeySpanID, KeyRequestID, KeyTenant} {
		if _, ok := got[2][k]; ok {
			t.Errorf("a record without context has %s: %v", k, got[2])
		}
	}
}

func TestWithTenantKeepsRequestID(t *testing.T) {
	ctx := WithRequest(context.Background(), "req-1", "")
	if id, tenant := RequestFromContext(ctx); id != "req-1" || tenant != "" {
		t.Errorf("got %q, %q", id, tenant)
	}
	ctx = WithTenant(ctx, "acme")
	if id, tenant := RequestFromContext(ctx); id != "req-1" || tenant != "acme" {
		t.Errorf("got %q, %q", id, tenant)
	}
	var buf bytes.Buffer
	log, _ := NewLogger(&buf, "debug", "json")
	log.DebugContext(WithRequest(context.Background(), "req-2", ""), "x")
	l := lines(t, &buf)[0]
	if l[KeyRequestID] != "req-2" {
		t.Errorf("request_id missing: %v", l)
	}
	if _, ok := l[KeyTenant]; ok {
		t.Errorf("empty tenant logged: %v", l)
	}
}

func TestNestedGroupsAndAttrsAfterGroups(t *testing.T) {
	var buf bytes.Buffer
	log, _ := NewLogger(&buf, "info", "json")
	ctx := WithRequest(context.Background(), "req-9", "t9")
	log.WithGroup("a").With("x", 1).WithGroup("b").InfoContext(ctx, "m", "y", 2)
	l := lines(t, &buf)[0]
	if l[KeyRequestID] != "req-9" || l[KeyTenant] != "t9" {
		t.Errorf("context attributes not at top level: %v", l)
	}
	a, _ := l["a"].(map[string]any)
	b, _ := a["b"].(map[string]any)
	if a["x"] != float64(1) || b["y"] != float64(2) {
		t.Errorf("groups wrong: %v", l)
	}
}

func TestTextFormatAndErrors(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger(&buf, "WARN", "text")
	if err != nil {
		t.Fatal(err)
	}
	ctx := WithRequest(context.Background(), "req-7", "acme")
	log.InfoContext(ctx, "dropped")
	log.WarnContext(ctx, "kept")
	out := buf.String()
	if strings.Contains(out, "dropped") || !strings.Contains(out, "msg=kept") ||
		!strings.Contains(out, "request_id=req-7") || !strings.Contains(out, "tenant=acme") {
		t.Errorf("text output %q", out)
	}
	if _, err := NewLogger(&buf, "loud", "json"); err == nil {
		t.Error("bad level accepted")
	}
	if _, err := NewLogger(&buf, "info", "xml"); err == nil {
		t.Error("bad format accepted")
	}
}

func TestContextHandlerIsEnabledLikeItsInner(t *testing.T) {
	h := NewContextHandler(slog.NewJSONHandler(&bytes.Buffer{}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if h.Enabled(context.Background(), slog.LevelInfo) || !h.Enabled(context.Background(), slog.LevelError) {
		t.Error("Enabled does not follow the inner handler")
	}
}

// BenchmarkLogger compares a plain slog JSON handler (baseline) with the
// ContextHandler-wrapped logger, with and without request context and
// with an open group (the slow path that replays handler operations).
func BenchmarkLogger(b *testing.B) {
	ctx := WithRequest(context.Background(), "req-123", "acme")
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx = trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
	plain := slog.New(slog.NewJSONHandler(io.Discard, nil))
	wrapped, err := NewLogger(io.Discard, "info", "json")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("baseline-plain-attrs-in-call", func(b *testing.B) {
		for b.Loop() {
			plain.InfoContext(ctx, "admitted", "prompt_tokens", 42,
				KeyTraceID, tid.String(), KeySpanID, sid.String(), KeyRequestID, "req-123", KeyTenant, "acme")
		}
	})
	b.Run("wrapped-from-context", func(b *testing.B) {
		for b.Loop() {
			wrapped.InfoContext(ctx, "admitted", "prompt_tokens", 42)
		}
	})
	b.Run("wrapped-no-context", func(b *testing.B) {
		for b.Loop() {
			wrapped.InfoContext(context.Background(), "admitted", "prompt_tokens", 42)
		}
	})
	grouped := wrapped.WithGroup("kv")
	b.Run("wrapped-from-context-in-group", func(b *testing.B) {
		for b.Loop() {
			grouped.InfoContext(ctx, "admitted", "prompt_tokens", 42)
		}
	})
}

// TestJSONDurationsInSeconds: JSON records carry durations as seconds (a
// number), at the top level and in groups; text keeps Go's notation.
func TestJSONDurationsInSeconds(t *testing.T) {
	var buf bytes.Buffer
	logger, err := NewLogger(&buf, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	logger.Info("done", "duration", 1500*time.Millisecond, slog.Group("phase", "queue", 250*time.Millisecond))
	got := lines(t, &buf)
	if len(got) != 1 || got[0]["duration"] != 1.5 || got[0]["phase"].(map[string]any)["queue"] != 0.25 {
		t.Fatalf("record %v, want duration 1.5 and phase.queue 0.25", got)
	}
	buf.Reset()
	if logger, err = NewLogger(&buf, "info", "text"); err != nil {
		t.Fatal(err)
	}
	logger.Info("done", "duration", 1500*time.Millisecond)
	if !strings.Contains(buf.String(), "duration=1.5s") {
		t.Fatalf("text record %q, want duration=1.5s", buf.String())
	}
}

package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/internal/faults"
	"github.com/warden-ai/warden/internal/obs"
	"github.com/warden-ai/warden/internal/syncbuf"
	"github.com/warden-ai/warden/worker"
)

// traced is one recorder shared by the tracer providers of several
// in-process services (gateway, workers), each provider with its own
// service.name, as separate processes would export to one collector.
type traced struct {
	t   *testing.T
	rec *tracetest.SpanRecorder
}

func newTraced(t *testing.T) *traced { return &traced{t: t, rec: tracetest.NewSpanRecorder()} }

// provider returns a provider sampling every trace into the recorder.
func (tr *traced) provider(service string) trace.TracerProvider {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tr.rec), sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName(service))))
	tr.t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

// spans returns the ended spans of trace id.
func (tr *traced) spans(id trace.TraceID) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tr.rec.Ended() {
		if s.SpanContext().TraceID() == id {
			out = append(out, s)
		}
	}
	return out
}

// one returns the only span of spans with name, kind and service, waiting
// for it to end.
func (tr *traced) one(id trace.TraceID, service, name string, kind trace.SpanKind) sdktrace.ReadOnlySpan {
	tr.t.Helper()
	var found []sdktrace.ReadOnlySpan
	waitFor(tr.t, "span "+name+" on "+service, func() bool {
		found = found[:0]
		for _, s := range tr.spans(id) {
			if s.Name() == name && s.SpanKind() == kind && serviceOf(s) == service {
				found = append(found, s)
			}
		}
		return len(found) > 0
	})
	if len(found) != 1 {
		tr.t.Fatalf("%d spans %s on %s in trace %s, want 1", len(found), name, service, id)
	}
	return found[0]
}

func serviceOf(s sdktrace.ReadOnlySpan) string {
	v, _ := s.Resource().Set().Value(semconv.ServiceNameKey)
	return v.AsString()
}

func attr(s sdktrace.ReadOnlySpan, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// childOf fails unless child's parent is parent (same trace, parent span).
func childOf(t *testing.T, child, parent sdktrace.ReadOnlySpan) {
	t.Helper()
	if child.SpanContext().TraceID() != parent.SpanContext().TraceID() || child.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("span %s (%s) is not a child of %s (%s)", child.Name(), serviceOf(child), parent.Name(), serviceOf(parent))
	}
}

// events returns the names of span's events in order.
func events(s sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, e := range s.Events() {
		out = append(out, e.Name)
	}
	return out
}

// logLines returns the JSON log records in logs.
func logLines(t *testing.T, logs *syncbuf.Buffer) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", sc.Text())
		}
		out = append(out, m)
	}
	return out
}

// TestTraceFollowsRequest serves one P/D request and one that the client
// abandons mid-decode, with a tracer provider per process recording into
// one recorder, and checks each request's trace: one trace ID (the
// client's traceparent is followed) across gateway → prefill → transfer →
// decode, with
//
//	POST /v1/chat/completions (gateway HTTP server)
//	└ chat tiny (request span; lifecycle events)
//	  ├ Worker/Reserve, Worker/Generate (gRPC client) → server (decode) → warden.decode
//	  └ Worker/Prefill (gRPC client) → server (prefill) → warden.prefill → warden.kv.send
//	                                                        └ warden.kv.receive (decode)
//
// the lifecycle transitions as events in order, the abort event with its
// cause and stage, and the abort fan-out joining the trace. The logs of
// both requests carry request_id, tenant and trace_id, and hold neither
// prompt nor output text.
func TestTraceFollowsRequest(t *testing.T) {
	tr := newTraced(t)
	var logs syncbuf.Buffer
	logger, err := obs.NewLogger(&logs, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	tg := startGatewayWith(t, testConfig(), WithTracerProvider(tr.provider("warden-gateway")), WithLogger(logger))
	reg := tg.RegistryAddr().String()
	d := startReal(t, workerConfig(t, "decode-traced", config.RoleDecode, config.TransferTCP, reg),
		worker.WithTracerProvider(tr.provider("warden-decode")), worker.WithLogger(logger)).attach(tg)
	p := startReal(t, workerConfig(t, "prefill-traced", config.RolePrefill, config.TransferTCP, reg),
		worker.WithTracerProvider(tr.provider("warden-prefill")), worker.WithLogger(logger)).attach(tg)

	// 1. A completed request whose client sent a traceparent.
	clientTrace, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	clientSpan, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	body, _ := json.Marshal(map[string]any{"model": "tiny", "max_tokens": 12, "temperature": 0,
		"messages": []map[string]string{{"role": "user", "content": realPrompt}}})
	req, _ := http.NewRequest(http.MethodPost, tg.base+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tg.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Traceparent", "00-"+clientTrace.String()+"-"+clientSpan.String()+"-01")
	resp, err := tg.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var chat struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Usage struct {
			Prompt     int64 `json:"prompt_tokens"`
			Completion int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(out, &chat) != nil || len(chat.Choices) != 1 || chat.Usage.Completion == 0 {
		t.Fatalf("request: %s %s", resp.Status, out)
	}
	requestID := resp.Header.Get("X-Request-Id")

	api := tr.one(clientTrace, "warden-gateway", "POST /v1/chat/completions", trace.SpanKindServer)
	if api.Parent().SpanID() != clientSpan || !api.Parent().IsRemote() {
		t.Errorf("the HTTP span's parent is %v, want the client's span %v", api.Parent(), clientSpan)
	}
	rs := tr.one(clientTrace, "warden-gateway", "chat tiny", trace.SpanKindInternal)
	childOf(t, rs, api)
	if got := attr(api, obs.AttrRequestID).AsString(); got != requestID {
		t.Errorf("HTTP span request ID %q, want %q", got, requestID)
	}
	for key, want := range map[attribute.Key]attribute.Value{
		obs.AttrRequestID:    attribute.StringValue(requestID),
		obs.AttrTenant:       attribute.StringValue("acme"),
		obs.AttrModel:        attribute.StringValue("tiny"),
		obs.AttrOperation:    attribute.StringValue(obs.OperationChat),
		obs.AttrEpoch:        attribute.Int64Value(int64(lifecycle.Epoch)),
		obs.AttrInputTokens:  attribute.Int64Value(chat.Usage.Prompt),
		obs.AttrOutputTokens: attribute.Int64Value(chat.Usage.Completion),
		obs.AttrOutcome:      attribute.StringValue("completed"),
		attrDecodeWorker:     attribute.StringValue(d.id),
		attrPrefillWorker:    attribute.StringValue(p.id),
	} {
		if got := attr(rs, key); got != want {
			t.Errorf("request span %s = %v, want %v", key, got.Emit(), want.Emit())
		}
	}
	checkLifecycle(t, events(rs), "completed")

	const method = "warden.control.v1.Worker/"
	gwPrefill := tr.one(clientTrace, "warden-gateway", method+"Prefill", trace.SpanKindClient)
	gwGenerate := tr.one(clientTrace, "warden-gateway", method+"Generate", trace.SpanKindClient)
	gwReserve := tr.one(clientTrace, "warden-gateway", method+"Reserve", trace.SpanKindClient)
	for _, s := range []sdktrace.ReadOnlySpan{gwPrefill, gwGenerate, gwReserve} {
		childOf(t, s, rs)
	}
	prefillRPC := tr.one(clientTrace, "warden-prefill", method+"Prefill", trace.SpanKindServer)
	childOf(t, prefillRPC, gwPrefill)
	prefill := tr.one(clientTrace, "warden-prefill", "warden.prefill", trace.SpanKindInternal)
	childOf(t, prefill, prefillRPC)
	send := tr.one(clientTrace, "warden-prefill", "warden.kv.send", trace.SpanKindProducer)
	childOf(t, send, prefill)
	receive := tr.one(clientTrace, "warden-decode", "warden.kv.receive", trace.SpanKindConsumer)
	childOf(t, receive, send)
	if !receive.Parent().IsRemote() {
		t.Error("the receive span's parent did not come over the transfer connection")
	}
	reserveRPC := tr.one(clientTrace, "warden-decode", method+"Reserve", trace.SpanKindServer)
	childOf(t, reserveRPC, gwReserve)
	generateRPC := tr.one(clientTrace, "warden-decode", method+"Generate", trace.SpanKindServer)
	childOf(t, generateRPC, gwGenerate)
	decode := tr.one(clientTrace, "warden-decode", "warden.decode", trace.SpanKindInternal)
	childOf(t, decode, generateRPC)
	for s, worker := range map[sdktrace.ReadOnlySpan]string{prefill: p.id, send: p.id, receive: d.id, decode: d.id} {
		if got := attr(s, obs.AttrWorkerID).AsString(); got != worker {
			t.Errorf("%s: worker %q, want %q", s.Name(), got, worker)
		}
		if got := attr(s, obs.AttrRequestID).AsString(); got != requestID {
			t.Errorf("%s: request %q, want %q", s.Name(), got, requestID)
		}
	}
	if got := attr(decode, obs.AttrOutputTokens).AsInt64(); got != chat.Usage.Completion {
		t.Errorf("decode span: %d output tokens, the client got %d", got, chat.Usage.Completion)
	}
	if b := attr(receive, obs.AttrBytes).AsInt64(); b == 0 || b != attr(send, obs.AttrBytes).AsInt64() {
		t.Errorf("transfer bytes: sent %d, received %d", attr(send, obs.AttrBytes).AsInt64(), b)
	}

	// 2. A request whose client goes away once decoding started.
	hold := func(ctx context.Context) { <-ctx.Done() }
	tg.hooks.afterReady.Store(&hold)
	ctx, cancel := context.WithCancel(context.Background())
	stream := tg.api().chatStream(ctx, realChat(64))
	if !stream.Next() {
		t.Fatalf("no first chunk: %v", stream.Err())
	}
	var aborted lifecycle.Snapshot
	for _, s := range tg.table.List() {
		if s.ID != requestID {
			aborted = s
		}
	}
	cancel()
	stream.Close()
	aborted = tg.finished(aborted.ID)
	tg.hooks.afterReady.Store(nil)
	var rs2 sdktrace.ReadOnlySpan
	waitFor(t, "the aborted request's span", func() bool {
		for _, s := range tr.rec.Ended() {
			if s.Name() == "chat tiny" && attr(s, obs.AttrRequestID).AsString() == aborted.ID {
				rs2 = s
				return true
			}
		}
		return false
	})
	abortTrace := rs2.SpanContext().TraceID()
	checkLifecycle(t, events(rs2), "aborted")
	last := rs2.Events()[len(rs2.Events())-1]
	wantAttrs := map[attribute.Key]string{obs.AttrCause: lifecycle.CauseClientDisconnect, obs.AttrStage: "decoding"}
	for _, kv := range last.Attributes {
		if w, ok := wantAttrs[kv.Key]; ok && kv.Value.AsString() == w {
			delete(wantAttrs, kv.Key)
		}
	}
	if len(wantAttrs) > 0 {
		t.Errorf("abort event %v lacks %v", last.Attributes, wantAttrs)
	}
	// The fan-out's Abort reaches both workers inside the request's trace.
	decodeAbort := tr.one(abortTrace, "warden-decode", method+"Abort", trace.SpanKindServer)
	prefillAbort := tr.one(abortTrace, "warden-prefill", method+"Abort", trace.SpanKindServer)
	calls := map[trace.SpanID]bool{}
	waitFor(t, "the gateway's two Abort calls", func() bool {
		for _, s := range tr.spans(abortTrace) {
			if s.Name() == method+"Abort" && s.SpanKind() == trace.SpanKindClient && !calls[s.SpanContext().SpanID()] {
				childOf(t, s, rs2)
				calls[s.SpanContext().SpanID()] = true
			}
		}
		return len(calls) >= 2
	})
	if !calls[decodeAbort.Parent().SpanID()] || !calls[prefillAbort.Parent().SpanID()] || len(calls) != 2 {
		t.Errorf("the workers' Abort spans are not children of the gateway's two Abort calls")
	}
	tr.one(abortTrace, "warden-decode", "warden.decode", trace.SpanKindInternal)
	d.poolQuiet()
	p.poolQuiet()

	// 3. The logs: request-scoped lines carry the request's identity and
	// trace, and no line carries the prompt or the generated text.
	traces := map[string]string{requestID: clientTrace.String(), aborted.ID: abortTrace.String()}
	scoped := map[string]int{}
	for _, m := range logLines(t, &logs) {
		id, _ := m[obs.KeyRequestID].(string)
		want, ours := traces[id]
		if !ours {
			continue
		}
		scoped[id]++
		if m[obs.KeyTenant] != "acme" || m[obs.KeyTraceID] != want {
			t.Errorf("log line of %s without its tenant or trace: %v", id, m)
		}
	}
	if scoped[aborted.ID] == 0 {
		t.Errorf("no log line about the aborted request %s:\n%s", aborted.ID, logs.String())
	}
	all := logs.String()
	if strings.Contains(all, realPrompt) || (chat.Choices[0].Message.Content != "" && strings.Contains(all, chat.Choices[0].Message.Content)) {
		t.Errorf("a log line carries prompt or output text:\n%s", all)
	}
}

// checkLifecycle checks the request span's events: the lifecycle's states
// in order (transferring only when prefill's answer beat decode's Ready),
// ending in terminal.
func checkLifecycle(t *testing.T, got []string, terminal string) {
	t.Helper()
	want := []string{"received", "admitted", "reserved", "prefilling", "transferring", "decoding", terminal}
	i := 0
	for _, name := range got {
		for i < len(want) && want[i] != name && want[i] == "transferring" {
			i++ // optional
		}
		if i == len(want) || want[i] != name {
			t.Errorf("lifecycle events %v, want %v in order", got, want)
			return
		}
		i++
	}
	if i != len(want) {
		t.Errorf("lifecycle events %v, want %v", got, want)
	}
}

// TestVerifiedTransferOutlivesTheRequest: decode holds back its verdict
// on a transfer it verified (as a slow connection or a descheduled
// goroutine would) until it has generated the whole answer and the
// gateway has its Done. The gateway, done with the request, does not
// cancel the Prefill call still waiting for that verdict — which would
// abort prefill's stream and record the verified transfer as failed — so
// the answer equals the reference and prefill's send span carries the
// bytes decode received, without an error.
func TestVerifiedTransferOutlivesTheRequest(t *testing.T) {
	const maxTokens = 8
	ref := runReference(t, chatTokens(t, realPrompt), maxTokens)
	tr := newTraced(t)
	held := faults.New(faults.Rule{Point: faults.SendResult, Action: faults.Stall})
	t.Cleanup(held.Release)
	tg := startGatewayWith(t, testConfig(), WithTracerProvider(tr.provider("warden-gateway")))
	reg := tg.RegistryAddr().String()
	d := startReal(t, workerConfig(t, "decode-held", config.RoleDecode, config.TransferTCP, reg),
		worker.WithTracerProvider(tr.provider("warden-decode")), worker.WithTransferFaults(held)).attach(tg)
	p := startReal(t, workerConfig(t, "prefill-held", config.RolePrefill, config.TransferTCP, reg),
		worker.WithTracerProvider(tr.provider("warden-prefill"))).attach(tg)

	type answer struct {
		resp *chatCompletion
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := tg.api().chat(context.Background(), chatCompletionRequest{
			Model: "tiny", Messages: []chatMessage{userMessage(realPrompt)},
			MaxTokens: new(int64(maxTokens)), Temperature: new(0.0),
		})
		answered <- answer{resp, err}
	}()
	<-held.Stalled()
	ended := func(service, name string) sdktrace.ReadOnlySpan {
		for _, s := range tr.rec.Ended() {
			if s.Name() == name && serviceOf(s) == service {
				return s
			}
		}
		return nil
	}
	waitFor(t, "decode's generation", func() bool { return ended("warden-decode", "warden.decode") != nil })
	held.Release()
	a := <-answered
	if a.err != nil {
		t.Fatal(a.err)
	}
	if got := a.resp.Choices[0].Message.Content; got != ref.text || a.resp.Usage.CompletionTokens != ref.completion {
		t.Fatalf("answer %q (%d tokens), reference %q (%d)", got, a.resp.Usage.CompletionTokens, ref.text, ref.completion)
	}
	var send, receive sdktrace.ReadOnlySpan
	waitFor(t, "the transfer's spans", func() bool {
		send, receive = ended("warden-prefill", "warden.kv.send"), ended("warden-decode", "warden.kv.receive")
		return send != nil && receive != nil
	})
	if send.Status().Code == otelcodes.Error {
		t.Errorf("prefill's send span failed: %s", send.Status().Description)
	}
	if b := attr(receive, obs.AttrBytes).AsInt64(); b == 0 || b != attr(send, obs.AttrBytes).AsInt64() {
		t.Errorf("transfer bytes: sent %d, received %d", attr(send, obs.AttrBytes).AsInt64(), b)
	}
	d.poolQuiet()
	p.poolQuiet()
}

package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/tenant/memstore"
)

const fakeReply = "Hello, wörld 🌍!"

func chatParams(maxTokens int64) chatCompletionRequest {
	p := chatCompletionRequest{
		Model:       "tiny",
		Messages:    []chatMessage{userMessage("Say hello.")},
		Temperature: new(0.0),
	}
	if maxTokens > 0 {
		p.MaxTokens = &maxTokens
	}
	return p
}

// chatPromptTokens is the prompt of chatParams as the gateway tokenizes it.
func chatPromptTokens(t testing.TB, tg *testGateway) int64 {
	t.Helper()
	mt := tg.tokenizers.get("tiny")
	ids, err := mt.tok.ApplyChatTemplate([]tokenizer.Message{{Role: "user", Content: "Say hello."}}, true)
	if err != nil {
		t.Fatal(err)
	}
	return int64(len(ids))
}

func TestSingleNodeChatAndCompletion(t *testing.T) {
	tg := startGateway(t, testConfig())
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 256, nil).start()
	client := tg.api()
	ctx := context.Background()
	prompt := chatPromptTokens(t, tg)
	replyTokens := int64(len(fakeReply))

	resp, err := client.chat(ctx, chatParams(64))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].Message.Content; got != fakeReply || resp.Choices[0].FinishReason != "stop" {
		t.Fatalf("chat = %q/%s, want %q/stop", got, resp.Choices[0].FinishReason, fakeReply)
	}
	// Honest usage: the prompt as tokenized, and every generated token
	// including the EOS the worker counted but did not send.
	if resp.Usage.PromptTokens != prompt || resp.Usage.CompletionTokens != replyTokens+1 {
		t.Errorf("usage %d/%d, want %d/%d", resp.Usage.PromptTokens, resp.Usage.CompletionTokens, prompt, replyTokens+1)
	}
	s := tg.finished("req_" + strings.TrimPrefix(resp.ID, "chatcmpl-"))
	if s.State != lifecycle.Completed || s.PromptTokens != prompt || len(s.Workers) != 1 || s.Workers[0].ID != w.id {
		t.Fatalf("request %+v", s)
	}

	stream := client.chatStream(ctx, chatParams(64))
	var text string
	for stream.Next() {
		for _, c := range stream.Current().Choices {
			text += c.Delta.Content
		}
	}
	if err := stream.Err(); err != nil || text != fakeReply {
		t.Fatalf("stream = %q, %v", text, err)
	}

	// Completions get BOS before the prompt (the preset's config does not
	// turn add_bos_token off).
	cresp, err := client.completions(ctx, completionRequest{
		Model: "tiny", Prompt: "Once upon", MaxTokens: new(int64(5)), Temperature: new(0.0),
	})
	if err != nil {
		t.Fatal(err)
	}
	bos, _ := tg.tokenizers.get("tiny").tok.BOS()
	ids, _ := tg.tokenizers.get("tiny").tok.Encode("Once upon")
	if cresp.Choices[0].Text != fakeReply[:5] || cresp.Choices[0].FinishReason != "length" ||
		cresp.Usage.PromptTokens != int64(len(ids)+1) || cresp.Usage.CompletionTokens != 5 {
		t.Fatalf("completion %q/%s usage %+v (bos %d)", cresp.Choices[0].Text, cresp.Choices[0].FinishReason, cresp.Usage, bos)
	}
	tg.waitMetric("warden_requests_total", map[string]string{"model": "tiny", "outcome": "completed", "code": "200"}, 3)
	tg.waitMetric("warden_tokens_total", map[string]string{"kind": "completion", "tenant": "acme"}, float64(2*(replyTokens+1)+5))
	waitFor(t, "pages back", func() bool { return w.freePages() == 256 })
	// Billing and TPM use the reported usage (I7).
	usage, err := tg.Store().Usage(ctx, "acme", time.Now().Add(-time.Hour), time.Now())
	if err != nil || len(usage) != 1 || usage[0].Requests != 3 || usage[0].CompletionTokens != 2*(replyTokens+1)+5 {
		t.Fatalf("store usage %+v, %v", usage, err)
	}
}

func TestPrefillDecodeFlow(t *testing.T) {
	tg := startGateway(t, testConfig())
	fab := &fabric{}
	decode := newFake(tg, controlpb.Role_ROLE_DECODE, 256, fab).start()
	prefill := newFake(tg, controlpb.Role_ROLE_PREFILL, 256, fab).start()
	resp, err := tg.api().chat(context.Background(), chatParams(100))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != fakeReply {
		t.Fatalf("P/D reply %q", resp.Choices[0].Message.Content)
	}
	id := "req_" + strings.TrimPrefix(resp.ID, "chatcmpl-")
	s := tg.finished(id)
	if s.State != lifecycle.Completed {
		t.Fatalf("state %s", s.State)
	}
	for _, st := range []lifecycle.State{lifecycle.Admitted, lifecycle.Reserved, lifecycle.Prefilling, lifecycle.Decoding, lifecycle.Completed} {
		if s.Entered[st].IsZero() {
			t.Errorf("request never entered %s", st)
		}
	}
	var order []string
	for _, c := range decode.requestCalls() {
		order = append(order, c.method)
	}
	if strings.Join(order, ",") != "Reserve,Generate" {
		t.Errorf("decode calls %v, want Reserve then Generate", order)
	}
	if pc := prefill.requestCalls(); len(pc) != 1 || pc[0].method != "Prefill" || pc[0].request != id {
		t.Errorf("prefill calls %+v", pc)
	}
	if len(decode.aborts(id))+len(prefill.aborts(id)) != 0 {
		t.Error("a completed request sent aborts")
	}
	v := requestView(s)
	if v.PrefillWorker != prefill.id || v.DecodeWorker != decode.id || v.State != "completed" {
		t.Errorf("admin view %+v", v)
	}
}

func TestEffectiveContextFollowsWorkers(t *testing.T) {
	t.Parallel() // waits on timers, failovers and heartbeats: it overlaps with the others
	cfg := testConfig()
	cfg.Models = append(cfg.Models, config.Model{Name: "strict", ContextLength: 2048, ContextPolicy: config.ContextRefuse})
	tg := startGateway(t, cfg)
	models := func() map[string][2]int64 {
		code, body := tg.get("/v1/models")
		if code != 200 {
			t.Fatalf("/v1/models: %d %s", code, body)
		}
		var list struct {
			Data []struct {
				ID         string `json:"id"`
				Context    int64  `json:"context_length"`
				Configured int64  `json:"configured_context_length"`
			} `json:"data"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			t.Fatal(err)
		}
		out := map[string][2]int64{}
		for _, m := range list.Data {
			out[m.ID] = [2]int64{m.Context, m.Configured}
		}
		return out
	}
	gauge := func(model, kind string) float64 {
		return tg.metric("warden_model_context_tokens", map[string]string{"model": model, "kind": kind})
	}
	if m := models(); len(m) != 0 {
		t.Fatalf("models without workers: %v", m)
	}
	if tg.Ready() == nil {
		t.Fatal("ready without workers")
	}

	big := newFake(tg, controlpb.Role_ROLE_BOTH, 1000, nil).start() // 16000 tokens
	if m := models(); m["tiny"] != [2]int64{2048, 2048} {
		t.Fatalf("after a large pool: %v", m)
	}
	// The model's metadata names the workers' weight dtype, and the admin
	// API how each worker sized its pool.
	if code, body := tg.get("/v1/models/tiny"); code != 200 || !strings.Contains(string(body), `"dtype":"f16"`) {
		t.Fatalf("/v1/models/tiny: %d %s", code, body)
	}
	adminCode, adminBody := tg.admin(http.MethodGet, "/admin/v1/models")
	var views struct {
		Data []adminclient.ModelView `json:"data"`
	}
	if err := json.Unmarshal(adminBody, &views); adminCode != 200 || err != nil || len(views.Data) == 0 {
		t.Fatalf("admin models: %d %v %s", adminCode, err, adminBody)
	}
	for _, m := range views.Data {
		for _, w := range m.Workers {
			want := adminclient.MemoryPlan{Source: "cgroup v2", LimitBytes: 1 << 30, AvailableBytes: 700 << 20,
				HeadroomBytes: 256 << 20, WeightsBytes: 100 << 20, BudgetBytes: 300 << 20}
			if w.WeightsDType != "f16" || w.Memory == nil || *w.Memory != want {
				t.Fatalf("admin models: worker %s reports dtype %q memory %+v", w.ID, w.WeightsDType, w.Memory)
			}
		}
	}
	if tg.metric("warden_model_context_agreement", map[string]string{"model": "tiny"}) != 1 {
		t.Fatal("agreement gauge wrong")
	}
	// "strict" has no worker yet: the gateway is still starting.
	if err := tg.Ready(); !errors.Is(err, errStarting) || !strings.Contains(err.Error(), "model strict: no healthy worker serves it") {
		t.Fatalf("ready with a model still waiting for its workers: %v", err)
	}

	small := newFake(tg, controlpb.Role_ROLE_BOTH, 64, nil).start() // 1024 tokens: clamp
	if m := models(); m["tiny"] != [2]int64{1024, 2048} {
		t.Fatalf("after a small pool registered: %v", m)
	}
	if gauge("tiny", "effective") != 1024 || gauge("tiny", "configured") != 2048 ||
		tg.metric("warden_model_context_agreement", map[string]string{"model": "tiny"}) != 0 {
		t.Fatal("context gauges did not follow the clamp")
	}

	// A strict model refuses to serve while a pool disagrees.
	strict := newFake(tg, controlpb.Role_ROLE_BOTH, 64, nil)
	strict.model = "strict"
	strict.start()
	// Every model has its workers: the gateway has started, and is ready
	// while "tiny" is served.
	if err := tg.Ready(); err != nil {
		t.Fatalf("not ready once every model has its workers: %v", err)
	}
	if _, ok := models()["strict"]; ok {
		t.Fatal("a refused model is listed")
	}
	code, _, body := tg.post("/v1/completions", map[string]any{"model": "strict", "prompt": "hi"})
	if e := decodeEnvelope(t, body); code != 503 || str(e.Error.Code) != "model_unavailable" ||
		!strings.Contains(e.Error.Message, "context_policy refuse") || strings.Contains(e.Error.Message, strict.id) ||
		strings.Contains(e.Error.Message, "1024") {
		t.Fatalf("refused model: %d %s", code, body)
	}
	// The details are for operators: the admin API has them.
	if code, body := tg.admin(http.MethodGet, "/admin/v1/models"); code != http.StatusOK ||
		!strings.Contains(string(body), "configured context 2048 exceeds KV pool capacity 1024 of worker "+strict.id) {
		t.Fatalf("admin models: %d %s", code, body)
	}
	if n := len(strict.requestCalls()); n != 0 {
		t.Fatalf("a refused model's worker got %d request RPCs", n)
	}

	// Loss: the small pool goes silent, the window grows back.
	small.stopHeartbeats()
	waitFor(t, "the small worker to be lost", func() bool { return models()["tiny"] == [2]int64{2048, 2048} })
	if gauge("tiny", "effective") != 2048 {
		t.Fatal("effective gauge did not follow the loss")
	}
	if tg.metric("warden_workers", map[string]string{"role": "both", "state": "down"}) != 1 {
		t.Error("warden_workers{down} not 1")
	}
	// Capacity change by heartbeat.
	big.mu.Lock()
	big.total, big.free = 100, 100 // 1600 tokens
	big.mu.Unlock()
	waitFor(t, "the capacity change", func() bool { return models()["tiny"] == [2]int64{1600, 2048} })
	_ = big
}

func TestContextLengthExceededReachesNoWorker(t *testing.T) {
	tg := startGateway(t, testConfig())
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 64, nil).start() // effective 1024
	prompt := chatPromptTokens(t, tg)
	long := strings.Repeat("x", 2000) // 2000 byte tokens at least: more than the window

	cases := []struct {
		name  string
		path  string
		body  map[string]any
		param string
		has   []string
	}{
		{"max_tokens too large", "/v1/chat/completions",
			map[string]any{"model": "tiny", "messages": []map[string]string{{"role": "user", "content": "Say hello."}}, "max_tokens": 1024 - prompt + 1},
			"max_tokens", []string{"maximum context length is 1024 tokens", fmt.Sprintf("%d in the prompt", prompt), fmt.Sprintf("%d for the completion", 1024-prompt+1)}},
		{"chat prompt too long", "/v1/chat/completions",
			map[string]any{"model": "tiny", "messages": []map[string]string{{"role": "user", "content": long}}, "max_tokens": 10},
			"messages", []string{"maximum context length is 1024 tokens", "10 for the completion"}},
		{"completion prompt too long, no max_tokens", "/v1/completions",
			map[string]any{"model": "tiny", "prompt": long}, "prompt", []string{"1 for the completion"}},
	}
	for _, c := range cases {
		code, h, body := tg.post(c.path, c.body)
		e := decodeEnvelope(t, body)
		if code != 400 || str(e.Error.Code) != "context_length_exceeded" || str(e.Error.Param) != c.param {
			t.Errorf("%s: %d %s", c.name, code, body)
			continue
		}
		for _, s := range c.has {
			if !strings.Contains(e.Error.Message, s) {
				t.Errorf("%s: message %q lacks %q", c.name, e.Error.Message, s)
			}
		}
		if h.Get("Retry-After") != "" || h.Get("X-Request-Id") == "" {
			t.Errorf("%s: headers %v", c.name, h)
		}
		s := tg.finished(h.Get("X-Request-Id"))
		if s.State != lifecycle.Rejected || s.Cause != "context_length_exceeded" || len(s.Workers) != 0 {
			t.Errorf("%s: request %+v", c.name, s)
		}
	}
	// I1: not one request RPC reached the worker.
	if calls := w.requestCalls(); len(calls) != 0 {
		t.Fatalf("rejected requests reached the worker: %+v", calls)
	}
	if n := tg.metric("warden_admission_rejections_total", map[string]string{"reason": "context_length_exceeded"}); n != 3 {
		t.Errorf("rejections metric %v, want 3", n)
	}

	// The largest request that fits goes through, with max_tokens
	// defaulted to what fits.
	code, _, body := tg.post("/v1/chat/completions", map[string]any{"model": "tiny",
		"messages": []map[string]string{{"role": "user", "content": "Say hello."}}})
	if code != 200 {
		t.Fatalf("default max_tokens: %d %s", code, body)
	}
	w.mu.Lock()
	seen := append([]int32(nil), w.maxSeen...)
	w.mu.Unlock()
	if len(seen) != 1 || int64(seen[0]) != 1024-prompt {
		t.Fatalf("worker got max_tokens %v, want %d (what fits)", seen, 1024-prompt)
	}
}

func TestDefaultMaxTokensCappedByModel(t *testing.T) {
	cfg := testConfig()
	cfg.Models[0].MaxOutputTokens = 7
	tg := startGateway(t, cfg)
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 256, nil).start()
	resp, err := tg.api().chat(context.Background(), chatParams(0))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != fakeReply[:7] || resp.Choices[0].FinishReason != "length" {
		t.Fatalf("got %q/%s", resp.Choices[0].Message.Content, resp.Choices[0].FinishReason)
	}
	if w.maxSeen[0] != 7 {
		t.Fatalf("max_tokens %d, want 7", w.maxSeen[0])
	}
	code, _, body := tg.post("/v1/completions", map[string]any{"model": "tiny", "prompt": "hi", "max_tokens": 8})
	if e := decodeEnvelope(t, body); code != 400 || str(e.Error.Param) != "max_tokens" {
		t.Fatalf("max_tokens above the cap: %d %s", code, body)
	}
}

// TestSpeculativeReachesWorker: the "speculative" extension field, sent
// beside a chat request's OpenAI fields, reaches the worker's sampling
// parameters as given (absent stays absent: the worker's setting applies);
// a non-boolean is a 400 naming it.
func TestSpeculativeReachesWorker(t *testing.T) {
	tg := startGateway(t, testConfig())
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 256, nil).start()
	for _, extra := range []map[string]any{nil, {"speculative": true}, {"speculative": false}} {
		params := chatParams(5)
		params.Extra = extra
		resp, err := tg.api().chat(context.Background(), params)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Choices[0].Message.Content != fakeReply[:5] {
			t.Fatalf("got %q", resp.Choices[0].Message.Content)
		}
	}
	w.mu.Lock()
	seen := append([]*bool(nil), w.specSeen...)
	w.mu.Unlock()
	if len(seen) != 3 || seen[0] != nil || seen[1] == nil || !*seen[1] || seen[2] == nil || *seen[2] {
		t.Fatalf("the worker saw speculative %v, want absent, true, false", seen)
	}
	code, _, body := tg.post("/v1/completions", map[string]any{"model": "tiny", "prompt": "hi", "max_tokens": 2, "speculative": "yes"})
	if e := decodeEnvelope(t, body); code != 400 || str(e.Error.Param) != "speculative" {
		t.Fatalf("speculative \"yes\": %d %s", code, body)
	}
}

func TestStopStringEndsGeneration(t *testing.T) {
	tg := startGateway(t, testConfig())
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 256, nil)
	w.reply = "Hello world. END more text after"
	w.start()
	resp, err := tg.api().completions(context.Background(), completionRequest{
		Model: "tiny", Prompt: "x", Stop: "END", MaxTokens: new(int64(100)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Text != "Hello world. " || resp.Choices[0].FinishReason != "stop" {
		t.Fatalf("got %q/%s", resp.Choices[0].Text, resp.Choices[0].FinishReason)
	}
	id := "req_" + strings.TrimPrefix(resp.ID, "cmpl-")
	s := tg.finished(id)
	// Billed for the tokens received up to the match (chunks of 3).
	if s.State != lifecycle.Completed || s.Cause != lifecycle.CauseStop || resp.Usage.CompletionTokens != 18 || s.CompletionTokens != 18 {
		t.Fatalf("request %+v, usage %+v", s, resp.Usage)
	}
	waitFor(t, "the stop abort", func() bool { return len(w.aborts(id)) == 1 })
	if got := w.aborts(id); got[0] != lifecycle.CauseStop {
		t.Fatalf("aborts %v", got)
	}
}

func TestTransientShortageWaitsThenServes(t *testing.T) {
	tg := startGateway(t, testConfig())
	fab := &fabric{}
	decode := newFake(tg, controlpb.Role_ROLE_DECODE, 64, fab).start()
	newFake(tg, controlpb.Role_ROLE_PREFILL, 64, fab).start()
	decode.setFree(1) // fits the pool, not the free pages now
	type result struct {
		resp *chatCompletion
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := tg.api().chat(context.Background(), chatParams(100))
		done <- result{resp, err}
	}()
	waitFor(t, "the request to wait in the queue", func() bool { return tg.queue.Len() == 1 })
	// No reservation is held while it waits.
	if decode.freePages() != 1 {
		t.Fatalf("a waiting request holds pages: %d free", decode.freePages())
	}
	decode.setFree(64) // the next heartbeat shows the pages
	r := <-done
	if r.err != nil || r.resp.Choices[0].Message.Content != fakeReply {
		t.Fatalf("after waiting: %v", r.err)
	}
	waitFor(t, "pages back", func() bool { return decode.freePages() == 64 })
}

// TestRequestViewNamesOnlyPlacedWorkers: the admin request view names a
// worker only once the request holds a reservation there. A request whose
// decode worker refused its Reserve for capacity waits in the queue with
// no worker named, and still none once aborted through the admin API; a
// placed request names its prefill and decode workers.
func TestRequestViewNamesOnlyPlacedWorkers(t *testing.T) {
	tg := startGateway(t, testConfig())
	fab := &fabric{}
	decode := newFake(tg, controlpb.Role_ROLE_DECODE, 64, fab).start()
	prefill := newFake(tg, controlpb.Role_ROLE_PREFILL, 64, fab).start()
	decode.setFree(1) // fits the pool, not the free pages now
	view := func(id string) adminclient.RequestView {
		t.Helper()
		code, body := tg.admin(http.MethodGet, "/admin/v1/requests/"+id)
		var v adminclient.RequestView
		if code != http.StatusOK || json.Unmarshal(body, &v) != nil {
			t.Fatalf("request view of %s: %d %s", id, code, body)
		}
		return v
	}
	done := make(chan error, 1)
	go func() {
		_, err := tg.api().chat(context.Background(), chatParams(100))
		done <- err
	}()
	var id string
	waitFor(t, "a Reserve refused and the request waiting in the queue", func() bool {
		for _, c := range decode.requestCalls() {
			if c.method == "Reserve" {
				id = c.request
			}
		}
		return id != "" && tg.queue.Len() == 1
	})
	if v := view(id); v.State != "admitted" || v.PrefillWorker != "" || v.DecodeWorker != "" {
		t.Fatalf("waiting request: %+v, want no worker", v)
	}
	if code, err := adminAbort(tg, id); err != nil || code != http.StatusOK {
		t.Fatalf("admin abort: %d %v", code, err)
	}
	if err := <-done; err == nil {
		t.Fatal("the aborted request succeeded")
	}
	if v := view(id); v.State != "aborted" || v.PrefillWorker != "" || v.DecodeWorker != "" {
		t.Fatalf("request aborted while waiting: %+v, want no worker", v)
	}

	decode.setFree(64)
	resp, err := tg.api().chat(context.Background(), chatParams(100))
	if err != nil {
		t.Fatal(err)
	}
	if v := view("req_" + strings.TrimPrefix(resp.ID, "chatcmpl-")); v.State != "completed" ||
		v.PrefillWorker != prefill.id || v.DecodeWorker != decode.id {
		t.Fatalf("placed request: %+v, want prefill %s and decode %s", v, prefill.id, decode.id)
	}
}

func TestQueueTimeoutIs429AndHoldsNothing(t *testing.T) {
	cfg := testConfig()
	cfg.Gateway.Queue.MaxWait = 300 * time.Millisecond
	tg := startGateway(t, cfg)
	fab := &fabric{}
	decode := newFake(tg, controlpb.Role_ROLE_DECODE, 64, fab).start()
	prefill := newFake(tg, controlpb.Role_ROLE_PREFILL, 64, fab).start()
	decode.setFree(2)
	code, h, body := tg.post("/v1/chat/completions", map[string]any{"model": "tiny", "max_tokens": 200,
		"messages": []map[string]string{{"role": "user", "content": "hi"}}})
	e := decodeEnvelope(t, body)
	if code != 429 || h.Get("Retry-After") == "" || str(e.Error.Code) != "rate_limit_exceeded" {
		t.Fatalf("queue timeout: %d %v %s", code, h, body)
	}
	id := h.Get("X-Request-Id")
	s := tg.finished(id)
	if s.State != lifecycle.Rejected || s.Cause != "queue_timeout" {
		t.Fatalf("request %+v", s)
	}
	if decode.freePages() != 2 {
		t.Fatalf("a partial reservation was left: %d free", decode.freePages())
	}
	for _, c := range append(decode.requestCalls(), prefill.requestCalls()...) {
		if c.method != "Reserve" && c.method != "Abort" {
			t.Errorf("unexpected call %+v", c)
		}
	}

	// A full queue answers 429 at once.
	cfg2 := testConfig()
	cfg2.Gateway.Queue.MaxWaiting = 0
	tg2 := startGateway(t, cfg2)
	w := newFake(tg2, controlpb.Role_ROLE_BOTH, 64, nil).start()
	w.setFree(0)
	waitFor(t, "the heartbeat", func() bool {
		wk, _ := tg2.reg.Get(w.id)
		return wk.Snapshot().Pool.FreePages == 0
	})
	code, h, body = tg2.post("/v1/completions", map[string]any{"model": "tiny", "prompt": "hi", "max_tokens": 5})
	if code != 429 || h.Get("Retry-After") == "" {
		t.Fatalf("full queue: %d %s", code, body)
	}
	if s := tg2.finished(h.Get("X-Request-Id")); s.Cause != "queue_full" {
		t.Fatalf("cause %q", s.Cause)
	}
	if n := len(w.requestCalls()); n != 0 {
		t.Fatalf("worker got %d calls", n)
	}
}

func TestPrefillFailureFailsTheRequestEverywhere(t *testing.T) {
	for _, c := range []struct {
		name   string
		err    error
		status int
		cause  string
	}{
		{"data loss", status.Error(codes.DataLoss, "kv transfer: checksum mismatch"), 500, causeDataLoss},
		{"decode unreachable", status.Error(codes.Unavailable, "kv transfer: dial"), 503, causeWorkerGone},
	} {
		t.Run(c.name, func(t *testing.T) {
			tg := startGateway(t, testConfig())
			fab := &fabric{}
			decode := newFake(tg, controlpb.Role_ROLE_DECODE, 64, fab).start()
			prefill := newFake(tg, controlpb.Role_ROLE_PREFILL, 64, fab)
			prefill.failPrefill = c.err
			prefill.start()
			code, h, body := tg.post("/v1/chat/completions", map[string]any{"model": "tiny", "max_tokens": 20,
				"messages": []map[string]string{{"role": "user", "content": "hi"}}})
			if code != c.status {
				t.Fatalf("status %d, want %d: %s", code, c.status, body)
			}
			decodeEnvelope(t, body)
			id := h.Get("X-Request-Id")
			s := tg.finished(id)
			if s.State != lifecycle.Failed || s.Cause != c.cause || s.Stage != lifecycle.Prefilling {
				t.Fatalf("request %+v", s)
			}
			waitFor(t, "aborts to both workers", func() bool {
				return len(decode.aborts(id)) == 1 && len(prefill.aborts(id)) == 1
			})
			waitFor(t, "decode pages back", func() bool { return decode.freePages() == 64 })
			if c.cause == causeDataLoss {
				tg.waitMetric("warden_integrity_failures_total", map[string]string{"kind": causeDataLoss}, 1)
			}
		})
	}
}

func TestOwnerViolationMidStreamIsAnErrorEvent(t *testing.T) {
	tg := startGateway(t, testConfig())
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 64, nil)
	w.failGenerate = status.Error(codes.Internal, "kv owner violation: page 3 belongs to another request")
	w.start()
	stream := tg.api().chatStream(context.Background(), chatParams(50))
	var text string
	for stream.Next() {
		for _, c := range stream.Current().Choices {
			text += c.Delta.Content
		}
	}
	err := stream.Err()
	if err == nil || !strings.Contains(err.Error(), "internal_error") {
		t.Fatalf("stream ended with %v after %q; want an internal error event", err, text)
	}
	if text != fakeReply[:3] {
		t.Errorf("text before the failure %q", text)
	}
	s := tg.only()
	s = tg.finished(s.ID)
	if s.State != lifecycle.Failed || s.Cause != causeOwnerViolation || s.Stage != lifecycle.Decoding || s.CompletionTokens != 3 {
		t.Fatalf("request %+v", s)
	}
	tg.waitMetric("warden_integrity_failures_total", map[string]string{"kind": causeOwnerViolation}, 1)
}

func TestClientDisconnectAbortsEverywhere(t *testing.T) {
	tg := startGateway(t, testConfig())
	fab := &fabric{}
	decode := newFake(tg, controlpb.Role_ROLE_DECODE, 64, fab)
	decode.holdTokens = make(chan struct{})
	decode.start()
	prefill := newFake(tg, controlpb.Role_ROLE_PREFILL, 64, fab).start()
	ctx, cancel := context.WithCancel(context.Background())
	stream := tg.api().chatStream(ctx, chatParams(50))
	if !stream.Next() { // the role chunk: the request is decoding
		t.Fatalf("no first chunk: %v", stream.Err())
	}
	s := tg.only()
	cancel()
	stream.Close()
	s = tg.finished(s.ID)
	if s.State != lifecycle.Aborted || s.Cause != lifecycle.CauseClientDisconnect || s.Stage != lifecycle.Decoding {
		t.Fatalf("request %+v", s)
	}
	waitFor(t, "aborts to both workers", func() bool {
		return len(decode.aborts(s.ID)) == 1 && len(prefill.aborts(s.ID)) == 1
	})
	if got := decode.aborts(s.ID)[0]; got != lifecycle.CauseClientDisconnect {
		t.Fatalf("cause %q", got)
	}
	waitFor(t, "decode pages back", func() bool { return decode.freePages() == 64 })
	tg.waitMetric("warden_aborts_total", map[string]string{"stage": "decoding", "cause": "client_disconnect"}, 1)
}

func TestDeadlineAbort(t *testing.T) {
	cfg := testConfig()
	cfg.Gateway.RequestTimeout = 500 * time.Millisecond
	tg := startGateway(t, cfg)
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 64, nil)
	w.holdTokens = make(chan struct{})
	w.start()
	code, h, body := tg.post("/v1/completions", map[string]any{"model": "tiny", "prompt": "hi", "max_tokens": 5})
	// The first event (Ready) committed the 200; the deadline is an error
	// in the body, never a complete-looking response.
	if code == 200 {
		t.Fatalf("deadline gave 200: %s", body)
	}
	if e := decodeEnvelope(t, body); code != http.StatusGatewayTimeout || str(e.Error.Code) != "timeout" {
		t.Fatalf("deadline: %d %s", code, body)
	}
	id := h.Get("X-Request-Id")
	if s := tg.finished(id); s.State != lifecycle.Aborted || s.Cause != lifecycle.CauseDeadline {
		t.Fatalf("request %+v", s)
	}
	waitFor(t, "the deadline abort", func() bool { return len(w.aborts(id)) == 1 })
}

func TestAdminAbortAndViews(t *testing.T) {
	tg := startGateway(t, testConfig())
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 64, nil)
	w.holdTokens = make(chan struct{})
	w.start()
	type res struct {
		code int
		body []byte
	}
	done := make(chan res, 1)
	go func() {
		code, _, body := tg.post("/v1/completions", map[string]any{"model": "tiny", "prompt": "hi", "max_tokens": 5})
		done <- res{code, body}
	}()
	var live lifecycle.Snapshot
	waitFor(t, "a request decoding", func() bool {
		for _, s := range tg.table.List() {
			if s.State == lifecycle.Decoding {
				live = s
				return true
			}
		}
		return false
	})
	code, body := tg.admin(http.MethodGet, "/admin/v1/requests")
	if code != 200 || !strings.Contains(string(body), live.ID) {
		t.Fatalf("admin list: %d %s", code, body)
	}
	code, body = tg.admin(http.MethodPost, "/admin/v1/requests/"+live.ID+"/abort")
	if code != 200 || !strings.Contains(string(body), `"state":"aborted"`) {
		t.Fatalf("admin abort: %d %s", code, body)
	}
	r := <-done
	if r.code != 503 || !strings.Contains(string(r.body), "aborted by an operator") {
		t.Fatalf("client after admin abort: %d %s", r.code, r.body)
	}
	waitFor(t, "the admin abort", func() bool { return len(w.aborts(live.ID)) == 1 })
	if got := w.aborts(live.ID)[0]; got != lifecycle.CauseAdmin {
		t.Fatalf("cause %q", got)
	}
	code, _ = tg.admin(http.MethodPost, "/admin/v1/requests/"+live.ID+"/abort")
	if code != http.StatusConflict {
		t.Fatalf("second abort: %d", code)
	}
	// Admin views of workers and models.
	code, body = tg.admin(http.MethodGet, "/admin/v1/workers")
	if code != 200 || !strings.Contains(string(body), `"id":"`+w.id+`"`) || !strings.Contains(string(body), `"capacity_tokens":1024`) {
		t.Fatalf("admin workers: %d %s", code, body)
	}
	code, body = tg.admin(http.MethodGet, "/admin/v1/models")
	if code != 200 || !strings.Contains(string(body), `"effective_context":1024`) || !strings.Contains(string(body), `"verdict":"clamped"`) {
		t.Fatalf("admin models: %d %s", code, body)
	}
}

func TestWorkerLostAbortsItsRequests(t *testing.T) {
	cfg := testConfig()
	cfg.Gateway.HeartbeatTimeout = 500 * time.Millisecond
	tg := startGateway(t, cfg)
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 64, nil)
	w.holdTokens = make(chan struct{})
	w.start()
	stream := tg.api().chatStream(context.Background(), chatParams(50))
	if !stream.Next() {
		t.Fatalf("no first chunk: %v", stream.Err())
	}
	s := tg.only()
	w.stopHeartbeats() // hung: silent, stream open
	for stream.Next() {
	}
	if err := stream.Err(); err == nil || !strings.Contains(err.Error(), "worker_unavailable") {
		t.Fatalf("stream error %v, want worker_unavailable", err)
	}
	s = tg.finished(s.ID)
	if s.State != lifecycle.Aborted || s.Cause != lifecycle.CauseWorkerLost {
		t.Fatalf("request %+v", s)
	}
	waitFor(t, "the abort to reach the hung worker", func() bool { return len(w.aborts(s.ID)) == 1 })
	// New requests are refused until it comes back.
	code, _, body := tg.post("/v1/completions", map[string]any{"model": "tiny", "prompt": "hi", "max_tokens": 5})
	if code != 503 {
		t.Fatalf("without workers: %d %s", code, body)
	}
}

func TestTokenizerMismatchIsRefused(t *testing.T) {
	tg := startGateway(t, testConfig())
	newFake(tg, controlpb.Role_ROLE_BOTH, 64, nil).start()
	other := newFake(tg, controlpb.Role_ROLE_BOTH, 64, nil)
	other.assets = &controlpb.ModelAssetsResponse{Model: "tiny", TokenizerJson: []byte("{}"), TokenizerSha256: "0000"}
	other.sha = "0000"
	reg := other.registryClient()
	_, err := reg.Register(context.Background(), &controlpb.RegisterRequest{Worker: other.info("127.0.0.1:1"), Pool: other.pool()})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "tokenizer_sha256") {
		t.Fatalf("Register with another tokenizer = %v", err)
	}
	if _, ok := tg.reg.Get(other.id); ok {
		t.Fatal("the mismatched worker was listed")
	}
	// An unknown model is refused too.
	stranger := newFake(tg, controlpb.Role_ROLE_BOTH, 64, nil)
	stranger.model = "nope"
	_, err = reg.Register(context.Background(), &controlpb.RegisterRequest{Worker: stranger.info("127.0.0.1:1"), Pool: stranger.pool()})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "not configured") {
		t.Fatalf("Register for an unknown model = %v", err)
	}
}

func TestTenantLimits(t *testing.T) {
	cfg := testConfig()
	cfg.Tenants.AuthCacheTTL = 0 // limit changes apply at once
	tg := startGateway(t, cfg)
	newFake(tg, controlpb.Role_ROLE_BOTH, 256, nil).start()
	ctx := context.Background()
	if _, err := tg.Store().UpdateTenant(ctx, tenant.Tenant{ID: "acme", Limits: tenant.Limits{RequestsPerMinute: 1, TokensPerMinute: 100000}}); err != nil {
		t.Fatal(err)
	}
	code, h, body := tg.post("/v1/completions", map[string]any{"model": "tiny", "prompt": "hi", "max_tokens": 5})
	if code != 200 || h.Get("X-Ratelimit-Limit-Requests") != "1" || h.Get("X-Ratelimit-Remaining-Requests") != "0" ||
		h.Get("X-Ratelimit-Limit-Tokens") != "100000" {
		t.Fatalf("first request: %d %v %s", code, h, body)
	}
	code, h, body = tg.post("/v1/completions", map[string]any{"model": "tiny", "prompt": "hi", "max_tokens": 5})
	if e := decodeEnvelope(t, body); code != 429 || h.Get("Retry-After") == "" || str(e.Error.Code) != "rate_limit_exceeded" ||
		h.Get("X-Ratelimit-Remaining-Requests") != "0" {
		t.Fatalf("second request: %d %v %s", code, h, body)
	}
	// Not allowed: hidden as not found.
	if _, err := tg.Store().UpdateTenant(ctx, tenant.Tenant{ID: "acme", Limits: tenant.Limits{AllowedModels: []string{"other"}}}); err != nil {
		t.Fatal(err)
	}
	code, _, body = tg.post("/v1/completions", map[string]any{"model": "tiny", "prompt": "hi", "max_tokens": 5})
	if e := decodeEnvelope(t, body); code != 404 || str(e.Error.Code) != "model_not_found" {
		t.Fatalf("model not allowed: %d %s", code, body)
	}
	if _, body := tg.get("/v1/models"); strings.Contains(string(body), `"tiny"`) {
		t.Fatalf("a disallowed model is listed: %s", body)
	}
	// A request larger than the whole token rate can never pass: 400.
	if _, err := tg.Store().UpdateTenant(ctx, tenant.Tenant{ID: "acme", Limits: tenant.Limits{TokensPerMinute: 10}}); err != nil {
		t.Fatal(err)
	}
	code, _, body = tg.post("/v1/completions", map[string]any{"model": "tiny", "prompt": "hi", "max_tokens": 50})
	if code != 400 {
		t.Fatalf("request above the token rate: %d %s", code, body)
	}
}

func TestShutdownAbortsInFlight(t *testing.T) {
	tg := startGateway(t, testConfig())
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 64, nil)
	w.holdTokens = make(chan struct{})
	w.start()
	stream := tg.api().chatStream(context.Background(), chatParams(50))
	if !stream.Next() {
		t.Fatalf("no first chunk: %v", stream.Err())
	}
	s := tg.only()
	go tg.shutdown()
	for stream.Next() {
	}
	if stream.Err() == nil {
		t.Fatal("a stream cut by shutdown looked complete")
	}
	s = tg.finished(s.ID)
	if s.State != lifecycle.Aborted || s.Cause != lifecycle.CauseShutdown {
		t.Fatalf("request %+v", s)
	}
	waitFor(t, "the shutdown abort", func() bool { return len(w.aborts(s.ID)) == 1 })
}

func TestDisabledTenantIsAbortedWithCauseQuota(t *testing.T) {
	store, err := memstore.New([]byte("0123456789abcdef0123456789abcdef"), memstore.WithLeaseTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Tenants.AuthCacheTTL = 0
	tg := startGatewayWith(t, cfg, WithStore(store))
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 64, nil)
	w.holdTokens = make(chan struct{})
	w.start()
	stream := tg.api().chatStream(context.Background(), chatParams(50))
	if !stream.Next() {
		t.Fatalf("no first chunk: %v", stream.Err())
	}
	s := tg.only()
	if _, err := store.UpdateTenant(context.Background(), tenant.Tenant{ID: "acme", Disabled: true}); err != nil {
		t.Fatal(err)
	}
	for stream.Next() {
	}
	if err := stream.Err(); err == nil || !strings.Contains(err.Error(), "insufficient_quota") {
		t.Fatalf("stream error %v", err)
	}
	s = tg.finished(s.ID)
	if s.State != lifecycle.Aborted || s.Cause != lifecycle.CauseQuota {
		t.Fatalf("request %+v", s)
	}
	waitFor(t, "the quota abort", func() bool { return len(w.aborts(s.ID)) == 1 })
	if got := w.aborts(s.ID)[0]; got != lifecycle.CauseQuota {
		t.Fatalf("cause %q", got)
	}
}

// adminSend sends a request with a JSON body to the admin API.
func (tg *testGateway) adminSend(method, path, body string) (int, []byte) {
	tg.t.Helper()
	req, _ := http.NewRequest(method, "https://"+tg.AdminAddr().String()+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := tg.http.Do(req)
	if err != nil {
		tg.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	_, _ = out.ReadFrom(resp.Body)
	return resp.StatusCode, out.Bytes()
}

// TestModelAliases: over HTTPS, a configured alias and one the admin API
// sets are listed in /v1/models beside their targets (metadata.alias_for)
// and serve their target's content; "default" is repointed from one model
// to another while a request to it is in flight, which ends on the old
// model while the next request gets the new one; per-model limits follow
// the target; an unknown or deleted alias is 404 model_not_found.
func TestModelAliases(t *testing.T) {
	cfg := testConfig()
	cfg.Models = []config.Model{
		{Name: "tiny", ContextLength: 2048, ContextPolicy: config.ContextClamp, Aliases: []string{"fast"}},
		{Name: "big", ContextLength: 2048, ContextPolicy: config.ContextClamp},
	}
	tg := startGateway(t, cfg)
	small := newFake(tg, controlpb.Role_ROLE_BOTH, 256, nil)
	small.holdTokens = make(chan struct{})
	small.start()
	large := newFake(tg, controlpb.Role_ROLE_BOTH, 256, nil)
	large.model, large.assets.Model, large.reply = "big", "big", "Big model here."
	large.start()
	client := tg.api()
	ctx := context.Background()
	ask := func(model string) (*chatCompletion, error) {
		p := chatParams(64)
		p.Model = model
		return client.chat(ctx, p)
	}

	if code, body := tg.adminSend(http.MethodPut, "/admin/v1/aliases/default", `{"target": "tiny"}`); code != http.StatusOK ||
		!strings.Contains(string(body), `"source":"admin"`) {
		t.Fatalf("PUT alias: %d %s", code, body)
	}
	page, err := client.models(ctx)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{}
	for _, m := range page.Data {
		listed[m.ID] = m.Metadata.AliasFor
	}
	if want := map[string]string{"tiny": "", "big": "", "fast": "tiny", "default": "tiny"}; fmt.Sprint(listed) != fmt.Sprint(want) {
		t.Fatalf("/v1/models: %v, want %v", listed, want)
	}

	// A request to default, held in flight on tiny.
	type answer struct {
		resp *chatCompletion
		err  error
	}
	held := make(chan answer, 1)
	go func() {
		r, err := ask("default")
		held <- answer{r, err}
	}()
	waitFor(t, "the request to default in flight", func() bool { return tg.table.InFlight() == 1 })

	// Repointed while it runs: the next request gets big.
	if code, body := tg.adminSend(http.MethodPut, "/admin/v1/aliases/default", `{"target": "big"}`); code != http.StatusOK {
		t.Fatalf("repoint: %d %s", code, body)
	}
	r, err := ask("default")
	if err != nil {
		t.Fatal(err)
	}
	if r.Choices[0].Message.Content != "Big model here." || r.Model != "big" {
		t.Fatalf("default after the repoint: %s", r.RawJSON())
	}
	close(small.holdTokens)
	a := <-held
	if a.err != nil {
		t.Fatal(a.err)
	}
	if a.resp.Choices[0].Message.Content != fakeReply || a.resp.Model != "tiny" {
		t.Fatalf("the request in flight during the repoint: %s", a.resp.RawJSON())
	}
	if r, err := ask("fast"); err != nil || r.Choices[0].Message.Content != fakeReply {
		t.Fatalf("configured alias: %v %v", r, err)
	}
	m, err := client.model(ctx, "default")
	if err != nil || !strings.Contains(m.RawJSON(), `"alias_for":"big"`) {
		t.Fatalf("GET /v1/models/default: %v %v", m, err)
	}

	// Per-model limits follow the target: big closed to acme closes default.
	if code, body := tg.adminSend(http.MethodPut, "/admin/v1/model-limits/big", `{"allowed_tenants": ["someone-else"]}`); code != http.StatusOK {
		t.Fatalf("model limits: %d %s", code, body)
	}
	_, direct := ask("big")
	_, viaAlias := ask("default")
	var de, ae *apiError
	if !errors.As(direct, &de) || !errors.As(viaAlias, &ae) || de.StatusCode != ae.StatusCode || de.Code != ae.Code || de.StatusCode < 400 {
		t.Fatalf("big closed to acme: direct %v, via the alias %v", direct, viaAlias)
	}
	if code, body := tg.adminSend(http.MethodDelete, "/admin/v1/model-limits/big", ""); code != http.StatusOK {
		t.Fatalf("delete model limits: %d %s", code, body)
	}

	// Refusals, deletion, unknown aliases.
	for _, tc := range []struct{ path, body, want string }{
		{"/admin/v1/aliases/x", `{"target": "nope"}`, `"param":"target"`},
		{"/admin/v1/aliases/x", `{}`, `"param":"target"`},
		{"/admin/v1/aliases/big", `{"target": "tiny"}`, `"param":"name"`},
		{"/admin/v1/aliases/x", `{"target": "tiny", "extra": 1}`, `"param":"extra"`},
	} {
		if code, body := tg.adminSend(http.MethodPut, tc.path, tc.body); code != http.StatusBadRequest || !strings.Contains(string(body), tc.want) {
			t.Errorf("PUT %s %s: %d %s", tc.path, tc.body, code, body)
		}
	}
	if code, body := tg.adminSend(http.MethodDelete, "/admin/v1/aliases/default", ""); code != http.StatusOK {
		t.Fatalf("DELETE alias: %d %s", code, body)
	}
	if code, _ := tg.adminSend(http.MethodDelete, "/admin/v1/aliases/default", ""); code != http.StatusNotFound {
		t.Fatalf("second DELETE: %d", code)
	}
	if code, body := tg.admin(http.MethodGet, "/admin/v1/aliases"); code != http.StatusOK ||
		string(body) != `{"data":[{"name":"fast","target":"tiny","source":"config"}]}`+"\n" {
		t.Fatalf("GET aliases: %d %s", code, body)
	}
	for _, name := range []string{"default", "nope"} {
		_, err := ask(name)
		var e *apiError
		if !errors.As(err, &e) || e.StatusCode != http.StatusNotFound || e.Code != "model_not_found" {
			t.Errorf("%s: %v, want 404 model_not_found", name, err)
		}
	}
}

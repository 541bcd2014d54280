package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/tenant"
)

// postKey sends a JSON body to the API with the given key.
func (tg *testGateway) postKey(key, path string, body any) (int, http.Header, []byte) {
	tg.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, tg.base+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := tg.http.Do(req)
	if err != nil {
		tg.t.Error(err)
		return 0, nil, nil
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, out
}

// TestPriorityServedFirstAndCappedByTenant: with the worker saturated, a
// priority-1 request of a tenant allowed max_priority 1 is served before
// the priority-0 requests that queued before it (its own tenant's and
// another's), every one of them with the reference reply; priority 2 from
// that tenant, and priority 1 from a tenant left at the default
// max_priority 0, are 403 and reach no worker.
func TestPriorityServedFirstAndCappedByTenant(t *testing.T) {
	if api.MaxPriority != tenant.MaxRequestPriority {
		t.Fatalf("the API's priority ceiling %d differs from the tenant store's %d", api.MaxPriority, tenant.MaxRequestPriority)
	}
	cfg := testConfig()
	cfg.Tenants.AuthCacheTTL = 0
	cfg.Gateway.HeartbeatTimeout = time.Minute // heartbeats are paused below
	tg := startGateway(t, cfg)
	ctx := context.Background()
	if _, err := tg.Store().UpdateTenant(ctx, tenant.Tenant{ID: "acme", Limits: tenant.Limits{MaxPriority: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.Store().CreateTenant(ctx, tenant.Tenant{ID: "bulk"}); err != nil { // max_priority: the default
		t.Fatal(err)
	}
	bulkKey, _, err := tg.Store().IssueKey(ctx, "bulk", "test")
	if err != nil {
		t.Fatal(err)
	}

	// The worker holds exactly one request at a time (the fake serves the
	// tokenizer of modelDir).
	const maxTokens = 32
	prompt := int64(len(chatTokens(t, "Say hello.")))
	pages := (prompt + maxTokens + fakePageTokens - 1) / fakePageTokens
	w := newFake(tg, controlpb.Role_ROLE_BOTH, pages, nil)
	w.holdTokens = make(chan struct{})
	w.releaseBeforeDone = true
	w.start()
	waitFor(t, "the model to be served", func() bool { return tg.Ready() == nil })
	// From here the gateway counts the worker's pages itself: taken when
	// it routes a request there, free again when the request ends.
	w.pauseHeartbeats()

	type result struct {
		name       string
		code       int
		id         string
		body       []byte
		prio, want int
	}
	results := make(chan result, 8)
	send := func(name, key string, priority int) {
		go func() {
			body := map[string]any{"model": "tiny", "max_tokens": maxTokens, "temperature": 0,
				"messages": []map[string]string{{"role": "user", "content": "Say hello."}}}
			if priority > 0 {
				body["priority"] = priority
			}
			code, h, out := tg.postKey(key, "/v1/chat/completions", body)
			results <- result{name: name, code: code, id: h.Get("X-Request-Id"), body: out, prio: priority}
		}()
	}
	send("blocker", tg.key, 0)
	waitFor(t, "the blocker to hold the worker", func() bool {
		for _, s := range tg.table.List() {
			if s.State == lifecycle.Decoding {
				return true
			}
		}
		return false
	})
	// Priority-0 requests queue first, in a known order...
	for i, name := range []string{"bulk-0a", "acme-0", "bulk-0b"} {
		key := bulkKey
		if strings.HasPrefix(name, "acme") {
			key = tg.key
		}
		send(name, key, 0)
		waitFor(t, name+" to queue", func() bool { return tg.queue.Len() == i+1 })
	}
	// ... then acme's priority-1 request.
	send("acme-1", tg.key, 1)
	waitFor(t, "acme-1 to queue", func() bool { return tg.queue.Len() == 4 })

	// Above the tenant's maximum: 403 at admission, while the worker is
	// saturated, without queueing or touching the worker, and without
	// retry-after (retrying cannot help).
	callsBefore := len(w.requestCalls())
	for _, c := range []struct {
		name     string
		key      string
		priority int
		max      string
	}{
		{"acme priority 2", tg.key, 2, "(1)"},
		{"bulk priority 1 (default max_priority 0)", bulkKey, 1, "(0)"},
	} {
		code, h, body := tg.postKey(c.key, "/v1/chat/completions", map[string]any{"model": "tiny", "max_tokens": maxTokens,
			"priority": c.priority, "messages": []map[string]string{{"role": "user", "content": "Say hello."}}})
		e := decodeEnvelope(t, body)
		if code != http.StatusForbidden || str(e.Error.Code) != "forbidden" || str(e.Error.Param) != "priority" ||
			e.Error.Type != api.TypeInvalidRequest || !strings.Contains(e.Error.Message, c.max) {
			t.Errorf("%s: %d %s", c.name, code, body)
		}
		if h.Get("Retry-After") != "" {
			t.Errorf("%s: Retry-After %q on a 403", c.name, h.Get("Retry-After"))
		}
		s := tg.finished(h.Get("X-Request-Id"))
		if s.State != lifecycle.Rejected || s.Cause != "forbidden" || len(s.Workers) != 0 || s.Priority != c.priority {
			t.Errorf("%s: request %+v", c.name, s)
		}
	}
	if n := len(w.requestCalls()); n != callsBefore || tg.queue.Len() != 4 {
		t.Fatalf("a priority above the maximum reached the worker (%d calls, %d before) or the queue (%d waiting)", n, callsBefore, tg.queue.Len())
	}
	if n := tg.metric("warden_admission_rejections_total", map[string]string{"reason": "forbidden"}); n != 2 {
		t.Errorf("forbidden rejections counted %v, want 2", n)
	}

	close(w.holdTokens) // the blocker ends; the queue drains one request at a time
	byID := map[string]result{}
	for range 5 {
		r := <-results
		if r.code != 200 {
			t.Fatalf("%s: %d %s", r.name, r.code, r.body)
		}
		var resp struct {
			Choices []struct {
				Message      struct{ Content string } `json:"message"`
				FinishReason string                   `json:"finish_reason"`
			} `json:"choices"`
			Usage struct {
				PromptTokens     int64 `json:"prompt_tokens"`
				CompletionTokens int64 `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(r.body, &resp); err != nil || len(resp.Choices) != 1 {
			t.Fatalf("%s: %v %s", r.name, err, r.body)
		}
		// Content against the reference: the fake's scripted reply, whole.
		if c := resp.Choices[0]; c.Message.Content != fakeReply || c.FinishReason != "stop" ||
			resp.Usage.PromptTokens != prompt || resp.Usage.CompletionTokens != int64(len(fakeReply))+1 {
			t.Fatalf("%s: %q/%s usage %+v, want %q/stop %d/%d", r.name, c.Message.Content, c.FinishReason, resp.Usage,
				fakeReply, prompt, len(fakeReply)+1)
		}
		byID[r.id] = r
	}
	var order []string
	for _, c := range w.requestCalls() {
		if c.method == "Generate" {
			order = append(order, byID[c.request].name)
		}
	}
	// The blocker ran first; then acme-1 passed every priority-0 request
	// queued before it; those then went in fair order (bulk-0a and acme-0
	// tie on their tags, bulk-0a arrived first; bulk-0b is bulk's second).
	if got, want := strings.Join(order, " "), "blocker acme-1 bulk-0a acme-0 bulk-0b"; got != want {
		t.Fatalf("service order %q, want %q", got, want)
	}
	for id, r := range byID {
		s := tg.finished(id)
		if s.State != lifecycle.Completed || s.Priority != r.prio || requestView(s).Priority != r.prio {
			t.Errorf("%s: request %+v", r.name, s)
		}
	}
	waitFor(t, "pages back", func() bool { return w.freePages() == pages })
}

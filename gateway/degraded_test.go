package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/warden-ai/warden/internal/controlpb"
)

// modelContext returns tiny's context_length on /v1/models (0 when the
// model is not listed).
func (tg *testGateway) modelContext() int64 {
	code, body := tg.get("/v1/models")
	if code != http.StatusOK {
		tg.t.Fatalf("/v1/models: %d %s", code, body)
	}
	var list struct {
		Data []struct {
			ID      string `json:"id"`
			Context int64  `json:"context_length"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		tg.t.Fatal(err)
	}
	for _, m := range list.Data {
		if m.ID == "tiny" {
			return m.Context
		}
	}
	return 0
}

// TestQuarantineLowersTheAdvertisedContext (I12): pages a worker
// quarantines lower the advertised and enforced context to what its pool
// holds now; a request that cannot fit now is a 400 at once with the
// counts (never a wait ending in 429), one that fits is served; the
// degradation is a metric and shows in the admin API; a fully quarantined
// model is not ready; released pages bring the context back.
func TestQuarantineLowersTheAdvertisedContext(t *testing.T) {
	cfg := testConfig() // tiny: context 2048
	tg := startGateway(t, cfg)
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 256, nil).start()
	waitFor(t, "the configured context", func() bool { return tg.modelContext() == 2048 })

	w.quarantine(200) // 56 usable pages: 896 tokens
	waitFor(t, "the context to shrink", func() bool { return tg.modelContext() == 896 })
	if v := tg.metric("warden_model_context_degraded", map[string]string{"model": "tiny"}); v != 1 {
		t.Errorf("warden_model_context_degraded = %v, want 1", v)
	}
	if v := tg.metric("warden_model_usable_context_tokens", map[string]string{"model": "tiny"}); v != 896 {
		t.Errorf("warden_model_usable_context_tokens = %v, want 896", v)
	}
	code, body := tg.admin(http.MethodGet, "/admin/v1/models")
	if code != http.StatusOK || !strings.Contains(string(body), `"degraded":true`) || !strings.Contains(string(body), `"usable_context":896`) {
		t.Errorf("admin models: %d %s", code, body)
	}

	start := time.Now()
	code, hdr, body := tg.post("/v1/completions", map[string]any{"model": "tiny", "prompt": "Say hello.", "max_tokens": 1000})
	e := decodeEnvelope(t, body)
	if code != http.StatusBadRequest || str(e.Error.Code) != "context_length_exceeded" || !strings.Contains(e.Error.Message, "896") ||
		!strings.Contains(e.Error.Message, "1000") || hdr.Get("Retry-After") != "" {
		t.Errorf("a request that cannot fit now: %d %s", code, body)
	}
	if waited := time.Since(start); waited > cfg.Gateway.Queue.MaxWait/2 {
		t.Errorf("the 400 came after %s: it waited", waited)
	}
	resp, err := tg.openai().Chat.Completions.New(context.Background(), chatParams(100))
	if err != nil || resp.Choices[0].Message.Content != fakeReply {
		t.Fatalf("a request that fits: %v", err)
	}
	if err := tg.Ready(); err != nil {
		t.Errorf("not ready with a usable pool: %v", err)
	}

	w.quarantine(56) // nothing usable
	waitFor(t, "the model to stop being served", func() bool { return tg.Ready() != nil })
	code, hdr, body = tg.post("/v1/completions", map[string]any{"model": "tiny", "prompt": "Say hello.", "max_tokens": 5})
	if e := decodeEnvelope(t, body); code != http.StatusServiceUnavailable || str(e.Error.Code) != "model_unavailable" ||
		hdr.Get("Retry-After") == "" || strings.Contains(e.Error.Message, w.id) {
		t.Errorf("a fully quarantined model: %d %v %s", code, hdr, body)
	}

	w.mu.Lock()
	w.free, w.quarantined = w.total, 0
	w.mu.Unlock()
	waitFor(t, "the context to come back", func() bool { return tg.modelContext() == 2048 })
	if v := tg.metric("warden_model_context_degraded", map[string]string{"model": "tiny"}); v != 0 {
		t.Errorf("warden_model_context_degraded = %v after the release, want 0", v)
	}
}

// TestFailoverToAnotherPrefill: a prefill worker whose connection is
// refused is marked suspect at once (long before its heartbeat timeout)
// and the request that found it dead is placed again on the other prefill
// worker with the same ticket: no request fails, every answer is the
// reference reply, and the failover is counted.
func TestFailoverToAnotherPrefill(t *testing.T) {
	cfg := testConfig()
	cfg.Gateway.HeartbeatTimeout = time.Minute // only the refused connection can tell
	tg := startGateway(t, cfg)
	fab := &fabric{}
	newFake(tg, controlpb.Role_ROLE_DECODE, 256, fab).start()
	// The dead one has the smaller ID: picked first on ties (fake IDs
	// count up across the package's tests, "fake-100" < "fake-99").
	dead, alive := newFake(tg, controlpb.Role_ROLE_PREFILL, 256, fab), newFake(tg, controlpb.Role_ROLE_PREFILL, 256, fab)
	dead.id, alive.id = "0-"+dead.id, "1-"+alive.id
	dead.start()
	alive.start()
	dead.kill() // its port now refuses connections

	for i := range 6 {
		resp, err := tg.openai().Chat.Completions.New(context.Background(), chatParams(100))
		if err != nil {
			t.Fatalf("request %d after the prefill worker died: %v", i, err)
		}
		if got := resp.Choices[0].Message.Content; got != fakeReply {
			t.Fatalf("request %d: %q, want %q", i, got, fakeReply)
		}
	}
	if w, ok := tg.reg.Get(dead.id); !ok || w.Snapshot().Healthy {
		t.Errorf("the dead prefill worker is still healthy in routing")
	}
	if v := tg.metric("warden_failovers_total", nil); v < 1 {
		t.Errorf("warden_failovers_total = %v, want ≥ 1", v)
	}
	if n := len(alive.requestCalls()); n != 6 {
		t.Errorf("the live prefill worker served %d requests, want 6", n)
	}
}

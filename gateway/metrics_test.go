package gateway

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/internal/obs/obstest"
	"github.com/warden-ai/warden/worker"
)

// TestMetricsExposition serves a completed, a rejected and an aborted
// request through a P/D pair, then lints the gateway's /metrics and both
// workers' metrics with `promtool check metrics`, checks that every
// warden_ metric is documented in docs/operations.md, and that the
// families the dashboards and alerts use are there.
func TestMetricsExposition(t *testing.T) {
	tg := startGateway(t, testConfig())
	reg := tg.RegistryAddr().String()
	workerRegistry := func() *prometheus.Registry {
		r := prometheus.NewRegistry()
		r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		return r
	}
	dReg, pReg := workerRegistry(), workerRegistry()
	d := startReal(t, workerConfig(t, "decode-m", config.RoleDecode, config.TransferTCP, reg), worker.WithRegistry(dReg)).attach(tg)
	p := startReal(t, workerConfig(t, "prefill-m", config.RolePrefill, config.TransferTCP, reg), worker.WithRegistry(pReg)).attach(tg)

	if _, err := tg.api().chat(context.Background(), realChat(8)); err != nil {
		t.Fatal(err)
	}
	if code, _, body := tg.post("/v1/completions", map[string]any{"model": "tiny", "prompt": strings.Repeat("word ", 3000), "max_tokens": 8}); code != http.StatusBadRequest {
		t.Fatalf("over-long prompt: %d %s", code, body)
	}
	// Rejections before any lifecycle: a bad key (401), a body over the
	// limit (413).
	badKey, _ := http.NewRequest(http.MethodPost, tg.base+"/v1/completions", strings.NewReader(`{"model":"tiny","prompt":"hi"}`))
	badKey.Header.Set("Authorization", "Bearer wdn_not-a-key")
	if resp, err := tg.http.Do(badKey); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("bad key: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if code, _, body := tg.post("/v1/completions", map[string]any{"model": "tiny", "prompt": strings.Repeat("x", 5<<20)}); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized body: %d %s", code, body)
	}
	hold := func(ctx context.Context) { <-ctx.Done() }
	tg.hooks.afterReady.Store(&hold)
	ctx, cancel := context.WithCancel(context.Background())
	stream := tg.api().chatStream(ctx, realChat(32))
	if !stream.Next() {
		t.Fatalf("no first chunk: %v", stream.Err())
	}
	cancel()
	stream.Close()
	tg.waitMetric("warden_aborts_total", map[string]string{"cause": lifecycle.CauseClientDisconnect}, 1)
	tg.hooks.afterReady.Store(nil)
	// The client's disconnect cancels decode's Generate call and the
	// gateway's Abort follows: it finds the request decoding or already
	// torn down.
	waitFor(t, "decode to count the gateway's Abort", func() bool {
		return grepLines(obstest.Exposition(t, dReg), `warden_worker_aborts_total{cause="client_disconnect"`) != ""
	})
	d.poolQuiet()
	p.poolQuiet()

	// The public API does not serve /metrics (it names tenants); the
	// admin listener does, behind the admin token.
	resp, err := tg.http.Get(tg.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	public, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || strings.Contains(string(public), "acme") {
		t.Errorf("unauthenticated /metrics on the API port: %s %s", resp.Status, public)
	}
	resp, err = tg.http.Get("https://" + tg.AdminAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/metrics on the admin listener without the token: %s", resp.Status)
	}
	code, gw := tg.admin(http.MethodGet, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics on the admin listener: %d %s", code, gw)
	}
	expositions := map[string][]byte{"gateway": gw, "decode worker": obstest.Exposition(t, dReg), "prefill worker": obstest.Exposition(t, pReg)}
	for what, e := range expositions {
		obstest.CheckMetrics(t, what, e)
		obstest.CheckDocumented(t, what, e)
	}
	for what, want := range map[string][]string{
		"gateway": {"warden_requests_total", "warden_request_duration_seconds", "warden_time_to_first_token_seconds",
			"warden_time_per_output_token_seconds", "warden_tokens_total", "warden_admission_rejections_total",
			"warden_requests_rejected_total",
			"warden_model_context_tokens", "warden_model_context_agreement", "warden_aborts_total", "warden_workers",
			"warden_worker_kv_pages", "warden_inflight_requests", "warden_queue_waiting_requests"},
		"decode worker": {"warden_kv_pages", "warden_kv_owner_violations_total", "warden_transfer_bytes_total",
			"warden_transfer_duration_seconds", "warden_transfer_checksum_failures_total", "warden_transfer_stale_frames_total",
			"warden_decode_deferred_kv_release_total", "warden_decode_deferred_kv_release_seconds", "warden_worker_aborts_total",
			"warden_worker_info"},
		"prefill worker": {"warden_kv_pages", "warden_transfer_bytes_total", "warden_transfer_duration_seconds", "warden_worker_info"},
	} {
		have := map[string]bool{}
		for _, f := range obstest.Families(expositions[what]) {
			have[f] = true
		}
		for _, f := range want {
			if !have[f] {
				t.Errorf("%s /metrics lacks %s", what, f)
			}
		}
	}
	for _, want := range []string{
		`warden_requests_total{code="200",model="tiny",outcome="completed"} 1`,
		`warden_requests_total{code="400",model="tiny",outcome="rejected"} 1`,
		`warden_admission_rejections_total{reason="context_length_exceeded"} 1`,
		`warden_requests_rejected_total{reason="context_length_exceeded",status="400"} 1`,
		`warden_requests_rejected_total{reason="invalid_api_key",status="401"} 1`,
		`warden_requests_rejected_total{reason="request_too_large",status="413"} 1`,
		`warden_time_to_first_token_seconds_count{model="tiny"}`,
		`warden_request_duration_seconds_count{model="tiny",phase="total"}`,
		`warden_aborts_total{cause="client_disconnect",stage="decoding"} 1`,
		`warden_model_context_agreement{model="tiny"} 1`,
		`warden_worker_kv_pages{role="decode",state="free",worker="decode-m"}`,
	} {
		if !strings.Contains(string(gw), want) {
			t.Errorf("gateway /metrics lacks %s", want)
		}
	}
}

// grepLines returns the lines of b containing s.
func grepLines(b []byte, s string) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"testing"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/test/harness"
)

// TestGatewayReadiness runs a gateway process started before its workers:
// it answers /readyz 503 and API requests 503 not_ready with retry-after
// (not model_unavailable) until a prefill and a decode worker have
// registered, then /readyz 200 and requests equal to the reference. On
// SIGTERM (with gateway.shutdown_delay) /readyz turns 503 at once while
// requests are still served, equal to the reference, with Connection:
// close; a second SIGTERM ends the delay and the process exits 0.
func TestGatewayReadiness(t *testing.T) {
	c := harness.New(t, env, harness.Options{Workers: harness.PD(harness.ModelTiny),
		EditGateway: func(_ int, cfg *config.Config) {
			cfg.Gateway.ShutdownDelay = 4 * harness.WaitTimeout // only the second signal ends it
		}})
	g := c.Gateway()
	if err := g.Process.Start(); err != nil {
		t.Fatal(err)
	}
	status := func(path string) (int, error) {
		resp, err := g.HTTP.Get(g.APIURL + path)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	waitUntil(t, "the gateway to listen", func() error {
		if code, err := status("/healthz"); err != nil || code != http.StatusOK {
			return fmt.Errorf("/healthz %d: %v", code, err)
		}
		return nil
	})
	key := c.NewKey(t, "readiness")
	const prompt, maxTokens = "Once upon a time", 16
	body := map[string]any{"model": harness.ModelTiny, "prompt": prompt, "max_tokens": maxTokens, "temperature": 0}
	complete := func(client *http.Client) (resp *http.Response, out completionOut, err error) {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPost, g.APIURL+"/v1/completions", bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		if resp, err = client.Do(req); err != nil {
			return nil, out, err
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err := json.Unmarshal(data, &out); err != nil {
			return resp, out, fmt.Errorf("%s: %.200s", resp.Status, data)
		}
		return resp, out, nil
	}
	starting := func(when string) {
		t.Helper()
		if code, err := status("/readyz"); err != nil || code != http.StatusServiceUnavailable {
			t.Fatalf("%s: /readyz %d %v, want 503", when, code, err)
		}
		resp, out, err := complete(g.HTTP)
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable || out.Error == nil || out.Error.Code != "not_ready" ||
			resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("%s: %v %+v, want 503 not_ready with retry-after 1", when, err, out.Error)
		}
	}
	starting("no worker")
	prefill, decode := c.Worker(config.RolePrefill, harness.ModelTiny), c.Worker(config.RoleDecode, harness.ModelTiny)
	if err := prefill.Start(); err != nil {
		t.Fatal(err)
	}
	c.WaitWorker(t, prefill.ID, "registered", func(v adminclient.WorkerView, found bool) bool { return found && v.Healthy })
	starting("only the prefill worker")
	if err := decode.Start(); err != nil {
		t.Fatal(err)
	}
	c.WaitReady(t)
	want, err := reference(t, harness.ModelTiny).Completion(context.Background(), prompt, maxTokens)
	if err != nil {
		t.Fatal(err)
	}
	served := func(client *http.Client, when string) *http.Response {
		t.Helper()
		resp, out, err := complete(client)
		if err != nil || resp.StatusCode != http.StatusOK || len(out.Choices) != 1 ||
			out.Choices[0].Text != want.Text || out.Choices[0].FinishReason != want.Finish {
			t.Fatalf("%s: %v %+v, want 200 with the reference %q", when, err, out, want.Text)
		}
		return resp
	}
	served(g.HTTP, "once ready")

	// SIGTERM: unready at once, still serving, Connection: close.
	if err := g.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "/readyz 503 after SIGTERM", func() error {
		if code, err := status("/readyz"); err != nil || code != http.StatusServiceUnavailable {
			return fmt.Errorf("/readyz %d: %v", code, err)
		}
		return nil
	})
	h1, err := c.HTTP1Client()
	if err != nil {
		t.Fatal(err)
	}
	defer h1.CloseIdleConnections()
	if resp := served(h1, "during the shutdown delay"); !resp.Close || resp.ProtoMajor != 1 {
		t.Fatalf("during the shutdown delay: %s without Connection: close", resp.Proto)
	}
	if !g.Running() {
		t.Fatal("the gateway exited during its shutdown delay")
	}
	// Stop sends the second SIGTERM, which ends the delay.
	if err := g.Stop(harness.WaitTimeout); err != nil {
		t.Fatalf("gateway after the second SIGTERM: %v", err)
	}
}

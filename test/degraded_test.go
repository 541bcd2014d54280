package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/test/harness"
)

// TestDegraded runs one cluster of the tiny model with two prefill
// workers and one decode worker, and a long heartbeat timeout, so that
// only the gateway's own failure handling can explain what it sees:
// /metrics is not public, workers that disagree with the model's layout
// are refused and `warden check` names them, and a prefill killed under
// load costs no request that the other one could serve.
func TestDegraded(t *testing.T) {
	tiny := env.Models[harness.ModelTiny]
	endless := env.Models[harness.ModelEndless]
	specs := []harness.WorkerSpec{
		{Role: config.RolePrefill, Model: harness.ModelTiny},
		{Role: config.RolePrefill, Model: harness.ModelTiny},
		{Role: config.RoleDecode, Model: harness.ModelTiny},
		// Started later; each disagrees with the workers above.
		{Role: config.RoleDecode, Model: harness.ModelTiny, ModelDir: tiny, Edit: func(c *config.Config) { c.Worker.KV.PageTokens = 8 }},
		{Role: config.RolePrefill, Model: harness.ModelTiny, ModelDir: endless},
	}
	c := harness.New(t, env, harness.Options{Workers: specs, HeartbeatTimeout: 30 * time.Second})
	g := c.Gateway()
	for _, p := range append([]*harness.Process{g.Process}, c.Workers[0].Process, c.Workers[1].Process, c.Workers[2].Process) {
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitReady(t)
	key := c.NewKey(t, "degraded")

	t.Run("MetricsNotPublic", func(t *testing.T) { testMetricsNotPublic(t, c, key) })
	t.Run("LayoutRefused", func(t *testing.T) { testLayoutRefused(t, c, c.Workers[3], c.Workers[4]) })
	t.Run("PrefillKilledUnderLoad", func(t *testing.T) { testPrefillKilled(t, c, key, c.Workers[0]) })
}

// testMetricsNotPublic: the API listener does not serve /metrics (it
// names tenants) to anyone; the admin listener serves it with the admin
// token only.
func testMetricsNotPublic(t *testing.T, c *harness.Cluster, key string) {
	g := c.Gateway()
	for _, auth := range []string{"", "Bearer " + key} {
		req, _ := http.NewRequest(http.MethodGet, g.APIURL+"/metrics", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := g.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || strings.Contains(string(body), "warden_") || strings.Contains(string(body), "degraded") {
			t.Errorf("GET /metrics on the API port (auth %v): %s %.200s", auth != "", resp.Status, body)
		}
	}
	for _, c := range []struct {
		auth string
		want int
	}{{"", http.StatusUnauthorized}, {"Bearer " + key, http.StatusUnauthorized}, {"Bearer " + c.AdminToken, http.StatusOK}} {
		req, _ := http.NewRequest(http.MethodGet, g.AdminURL+"/metrics", nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := g.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want || (c.want == http.StatusOK) != strings.Contains(string(body), "warden_workers") {
			t.Errorf("GET /metrics on the admin port: %s, want %d", resp.Status, c.want)
		}
	}
}

// testLayoutRefused (I11): a decode worker with another page size and a
// prefill worker with other weights are refused at registration, counted
// and remembered; `warden check` exits 1 naming each and the worker it
// disagrees with; the model is still served by the workers that agree.
func testLayoutRefused(t *testing.T, c *harness.Cluster, badPage, badWeights *harness.Worker) {
	for _, w := range []*harness.Worker{badPage, badWeights} {
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		defer w.Stop(10 * time.Second)
	}
	g := c.Gateway()
	var refused []adminclient.LayoutRefusal
	waitUntil(t, "both registrations to be refused", func() error {
		models, err := g.Admin.Models(context.Background())
		if err != nil {
			return err
		}
		for _, m := range models {
			if m.Name == harness.ModelTiny {
				refused = m.Refused
			}
		}
		if len(refused) != 2 {
			return fmt.Errorf("refusals %+v", refused)
		}
		return nil
	})
	fields := map[string]string{}
	for _, r := range refused {
		fields[r.Worker] = r.Field
		if r.Conflicts == "" || r.Attempts < 1 || !strings.Contains(r.Message, r.Conflicts) {
			t.Errorf("refusal %+v", r)
		}
	}
	if fields[badPage.ID] != "page_tokens" || fields[badWeights.ID] == "" || fields[badWeights.ID] == "page_tokens" {
		t.Errorf("refused fields %v", fields)
	}
	views, err := g.Admin.Workers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range views {
		if v.ID == badPage.ID || v.ID == badWeights.ID {
			t.Errorf("refused worker %s is listed: %+v", v.ID, v)
		}
	}

	out, err := exec.Command(env.Bin, "check", "--url", g.AdminURL, "--token-file", filepath.Join(c.Dir, "admin-token"),
		"--cacert", env.PKI.CACert).CombinedOutput()
	if code := exitCode(err); code != 1 {
		t.Errorf("warden check: exit %d, want 1:\n%s", code, out)
	}
	for _, r := range refused {
		if !strings.Contains(string(out), r.Worker) || !strings.Contains(string(out), r.Conflicts) {
			t.Errorf("warden check does not name %s and %s:\n%s", r.Worker, r.Conflicts, out)
		}
	}
}

// degradedResult is one request of the load in testPrefillKilled.
type degradedResult struct {
	prompt        int
	start         time.Time
	status        int
	retryAfter    string
	text, finish  string
	code, message string
}

// testPrefillKilled: with two prefill workers, kill -9 of one under load
// fails at most the requests that were already on it (503
// worker_unavailable with retry-after); every request sent after the kill
// is served, on the other prefill worker, with the reference text; the
// dead worker is out of routing long before the heartbeat timeout; no
// error body names a worker, an address or a pool.
func testPrefillKilled(t *testing.T, c *harness.Cluster, key string, victim *harness.Worker) {
	g := c.Gateway()
	prompts := []string{"Once upon a time", "The quick brown fox", "a b c d e f"}
	const maxTokens = 16
	want := make([]harness.Output, len(prompts))
	for i, p := range prompts {
		var err error
		if want[i], err = reference(t, harness.ModelTiny).Completion(context.Background(), p, maxTokens); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu      sync.Mutex
		results []degradedResult
		killed  time.Time
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	afterKill := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, r := range results {
			if !killed.IsZero() && r.start.After(killed) {
				n++
			}
		}
		return n
	}
	for i := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := degradedResult{prompt: i, start: time.Now()}
				resp, err := g.Post(context.Background(), key, "/v1/completions",
					map[string]any{"model": harness.ModelTiny, "prompt": prompts[i], "max_tokens": maxTokens, "temperature": 0})
				if err != nil {
					r.message = err.Error()
				} else {
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					r.status, r.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
					var v completionOut
					if jerr := json.Unmarshal(body, &v); jerr != nil {
						r.message = string(body)
					} else if v.Error != nil {
						r.code, r.message = v.Error.Code, v.Error.Message
					} else if len(v.Choices) == 1 {
						r.text, r.finish = v.Choices[0].Text, v.Choices[0].FinishReason
					}
				}
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		}()
	}
	waitUntil(t, "some requests before the kill", func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(results) < 3 {
			return errors.New("too few")
		}
		return nil
	})
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	killed = time.Now()
	mu.Unlock()
	waitUntil(t, "requests after the kill", func() error {
		if afterKill() < 9 {
			return errors.New("too few")
		}
		return nil
	})
	close(stop)
	wg.Wait()
	// Long before the heartbeat timeout (30 s): the refused connection told.
	waitDown(t, c, victim)
	if since := time.Since(killed); since > 20*time.Second {
		t.Errorf("the killed worker left routing %s after the kill", since)
	}

	workers, err := g.Admin.Workers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var internals []string
	for _, w := range workers {
		internals = append(internals, w.ID, w.ControlAddr)
		if w.TransferAddr != "" {
			internals = append(internals, w.TransferAddr)
		}
	}
	var inFlight, failedInFlight int
	for _, r := range results {
		before := r.start.Before(killed)
		if r.status == http.StatusOK {
			if r.text != want[r.prompt].Text || r.finish != want[r.prompt].Finish {
				t.Errorf("prompt %d: %q (%s), want the reference %q (%s)", r.prompt, r.text, r.finish, want[r.prompt].Text, want[r.prompt].Finish)
			}
			continue
		}
		for _, s := range internals {
			if strings.Contains(r.message, s) {
				t.Errorf("an error body names %q: %s", s, r.message)
			}
		}
		if before {
			failedInFlight++
			if r.status != http.StatusServiceUnavailable || r.code != "worker_unavailable" || r.retryAfter == "" {
				t.Errorf("a request in flight at the kill: %d %s %q (retry-after %q), want 503 worker_unavailable with retry-after",
					r.status, r.code, r.message, r.retryAfter)
			}
			continue
		}
		t.Errorf("a request sent after the kill failed: %d %s %q", r.status, r.code, r.message)
	}
	for _, r := range results {
		if r.start.Before(killed) {
			inFlight++
		}
	}
	t.Logf("%d requests, %d sent before the kill (%d failed), %d after", len(results), inFlight, failedInFlight, len(results)-inFlight)
}

package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/test/harness"
)

// fleetResult is one request of TestFleetFailures' load.
type fleetResult struct {
	tenant, id    string
	prompt        int
	start         time.Time
	status        int
	retryAfter    string
	code, message string
	text, finish  string
	// view is the gateway's record of a failed request, read at once: the
	// gateway keeps a bounded number of finished requests.
	view    adminclient.RequestView
	viewErr error
}

// TestFleetFailures (issue 17): three prefill and three decode workers
// over tcp, steady load from two tenants with prompts of their own, and
// workers failing under it: one prefill killed with SIGKILL (and started
// again), one decode stopped with SIGSTOP past the heartbeat timeout (and
// continued), one prefill stopped with SIGTERM (it drains; started
// again). It shows:
//   - no foreign content: every answer is the reference of its own
//     tenant's prompt (the two tenants' references all differ);
//   - no request fails that could have been placed elsewhere: each
//     failure is 503 worker_unavailable with retry-after, and the
//     gateway's record of it names a failed worker;
//   - serving resumes at once: no request sent after a failed worker
//     shows healthy again fails;
//   - pool identities hold after recovery: every pool ends all free.
func TestFleetFailures(t *testing.T) {
	var specs []harness.WorkerSpec
	for range 3 {
		specs = append(specs, harness.PD(harness.ModelTiny)...)
	}
	for i := range specs {
		specs[i].Edit = func(c *config.Config) { c.Worker.DrainTimeout = harness.WaitTimeout }
	}
	c := harness.Start(t, env, harness.Options{Workers: specs})
	g := c.Gateway()
	keys := map[string]string{"fleet-a": c.NewKey(t, "fleet-a"), "fleet-b": c.NewKey(t, "fleet-b")}
	prompts := map[string][]string{
		"fleet-a": {"Once upon a time", "The quick brown fox"},
		"fleet-b": {"a b c d e f", "In the beginning"},
	}
	const maxTokens = 16
	want := map[string][]harness.Output{}
	var all []string
	for tenant, ps := range prompts {
		for _, p := range ps {
			out, err := reference(t, harness.ModelTiny).Completion(context.Background(), p, maxTokens)
			if err != nil {
				t.Fatal(err)
			}
			want[tenant] = append(want[tenant], out)
			if slices.Contains(all, out.Text) {
				t.Fatalf("two prompts share the reference %q: foreign content would go unseen", out.Text)
			}
			all = append(all, out.Text)
		}
	}

	var (
		mu      sync.Mutex
		results []fleetResult
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	for tenant, ps := range prompts {
		for i := range 2 * len(ps) {
			wg.Go(func() {
				p := i % len(ps)
				for {
					select {
					case <-stop:
						return
					default:
					}
					r := fleetRequest(g, keys[tenant], ps[p])
					r.tenant, r.prompt = tenant, p
					if r.status != http.StatusOK && r.id != "" {
						r.view, r.viewErr = g.Admin.Request(context.Background(), r.id)
					}
					mu.Lock()
					results = append(results, r)
					mu.Unlock()
				}
			})
		}
	}
	served := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		var n int64
		for _, r := range results {
			if r.status == http.StatusOK {
				n++
			}
		}
		return n
	}
	servedSince := func(what string, n int64) { waitServed(t, what, served, n) }
	servedSince("load before the failures", 6)

	victims := map[string]bool{}
	var healthyAgain time.Time // the last failed worker shown healthy again
	// kill -9 a prefill worker under load, then start it again.
	killed := c.Workers[0]
	victims[killed.ID] = true
	if err := killed.Kill(); err != nil {
		t.Fatal(err)
	}
	waitDown(t, c, killed)
	servedSince("load without the killed prefill", 6)
	c.RestartWorker(t, killed)
	healthyAgain = time.Now()
	servedSince("load after the prefill's restart", 6)

	// SIGSTOP a decode worker past the heartbeat timeout, then continue it.
	stopped := c.Workers[3]
	victims[stopped.ID] = true
	if err := stopped.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitDown(t, c, stopped)
	servedSince("load without the stopped decode", 6)
	if err := stopped.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	c.WaitWorker(t, stopped.ID, "healthy again", func(v adminclient.WorkerView, _ bool) bool { return v.Healthy })
	healthyAgain = time.Now()
	servedSince("load after the decode continued", 6)

	// SIGTERM another prefill worker: it drains (its requests finish, none
	// fails), then it starts again.
	drained := c.Workers[4]
	if err := drained.Stop(harness.WaitTimeout); err != nil {
		t.Fatalf("%s after SIGTERM: %v", drained.ID, err)
	}
	servedSince("load without the drained prefill", 6)
	c.RestartWorker(t, drained)
	servedSince("load after the drained prefill's restart", 6)

	close(stop)
	wg.Wait()
	var failed int
	for _, r := range results {
		if r.status == http.StatusOK {
			if w := want[r.tenant][r.prompt]; r.text != w.Text || r.finish != w.Finish {
				t.Errorf("%s prompt %d: %q (%s), want its reference %q (%s)", r.tenant, r.prompt, r.text, r.finish, w.Text, w.Finish)
			}
			continue
		}
		failed++
		if r.status != http.StatusServiceUnavailable || r.code != "worker_unavailable" || r.retryAfter == "" {
			t.Errorf("%s request %s: %d %s %q (retry-after %q), want 503 worker_unavailable with retry-after",
				r.tenant, r.id, r.status, r.code, r.message, r.retryAfter)
		}
		rv := r.view
		if r.start.After(healthyAgain) {
			logged := "(no request ID)"
			if r.id != "" {
				logged = g.LogLines(r.id)
			}
			t.Errorf("%s request %s sent %v after every failed worker was healthy again failed: %d %s %q (prefill %s, decode %s); the gateway logged:\n%s",
				r.tenant, r.id, r.start.Sub(healthyAgain), r.status, r.code, r.message, rv.PrefillWorker, rv.DecodeWorker, logged)
		}
		if r.id == "" {
			continue
		}
		if r.viewErr != nil {
			t.Errorf("request %s: %v", r.id, r.viewErr)
			continue
		}
		if !victims[rv.PrefillWorker] && !victims[rv.DecodeWorker] {
			t.Errorf("request %s failed on healthy workers (prefill %s, decode %s): it could have been served", r.id, rv.PrefillWorker, rv.DecodeWorker)
		}
	}
	t.Logf("%d requests, %d failed (each on a failed worker)", len(results), failed)
	c.WaitPoolsFree(t)
}

// fleetRequest sends one completion and records what came back.
func fleetRequest(g *harness.Gateway, key, prompt string) fleetResult {
	r := fleetResult{start: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), 2*harness.WaitTimeout)
	defer cancel()
	resp, err := g.Post(ctx, key, "/v1/completions",
		map[string]any{"model": harness.ModelTiny, "prompt": prompt, "max_tokens": 16, "temperature": 0})
	if err != nil {
		r.message = err.Error()
		return r
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	r.status, r.retryAfter, r.id = resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("X-Request-Id")
	var v completionOut
	switch {
	case json.Unmarshal(body, &v) != nil:
		r.message = string(body)
	case v.Error != nil:
		r.code, r.message = v.Error.Code, v.Error.Message
	case len(v.Choices) == 1:
		r.text, r.finish = v.Choices[0].Text, v.Choices[0].FinishReason
	}
	return r
}

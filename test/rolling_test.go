package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/test/harness"
)

// TestRollingRestart restarts every process of a P/D cluster, one at a
// time, under steady load, for the tcp and the shm transfer: each worker
// is replaced as a rolling deploy does it (the replacement starts and
// registers, then the old one gets SIGTERM and drains itself), and one of
// the two gateways is stopped with SIGTERM (it drains) and started again.
// No request is lost: every request is answered 200 with the reference
// text. The test's client stands for a load balancer: it sends each
// request to a gateway in rotation and retries on the other one only a
// request that was never accepted, which the contract allows and no other:
// a connection refused, or 503 shutting_down (a draining gateway's answer
// before it admits anything). A gateway leaves the rotation when its
// drain begins and rejoins once /readyz says it is ready, as a load
// balancer's readiness check does.
func TestRollingRestart(t *testing.T) {
	for _, backend := range []config.TransferBackend{config.TransferTCP, config.TransferSHM} {
		t.Run(string(backend), func(t *testing.T) { testRollingRestart(t, backend) })
	}
}

func testRollingRestart(t *testing.T, backend config.TransferBackend) {
	drain := func(c *config.Config) { c.Worker.DrainTimeout = harness.WaitTimeout }
	spec := func(role config.Role) harness.WorkerSpec {
		return harness.WorkerSpec{Role: role, Model: harness.ModelTiny, Transfer: backend, Edit: drain}
	}
	// Workers 0 and 1 run first; 2 and 3 replace them.
	specs := []harness.WorkerSpec{spec(config.RolePrefill), spec(config.RoleDecode), spec(config.RolePrefill), spec(config.RoleDecode)}
	c := harness.New(t, env, harness.Options{Workers: specs, Gateways: 2, Redis: true,
		EditGateway: func(_ int, cfg *config.Config) { cfg.Gateway.DrainTimeout = harness.WaitTimeout }})
	for _, p := range []*harness.Process{c.Gateways[0].Process, c.Gateways[1].Process, c.Workers[0].Process, c.Workers[1].Process} {
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitReady(t)
	key := c.NewKey(t, "rolling")

	prompts := []string{"Once upon a time", "The quick brown fox", "a b c d e f", "In the beginning"}
	const maxTokens = 24
	want := make([]harness.Output, len(prompts))
	for i, p := range prompts {
		var err error
		if want[i], err = reference(t, harness.ModelTiny).Completion(context.Background(), p, maxTokens); err != nil {
			t.Fatal(err)
		}
	}
	lb := &rotation{gateways: c.Gateways, in: []bool{true, true}}
	var (
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		served  atomic.Int64
		retries atomic.Int64
		mu      sync.Mutex
		lost    []string
	)
	for i := range 3 * len(prompts) {
		wg.Go(func() {
			p := i % len(prompts)
			body := map[string]any{"model": harness.ModelTiny, "prompt": prompts[p], "max_tokens": maxTokens, "temperature": 0}
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				text, finish, retried, err := lb.complete(key, body, n)
				retries.Add(int64(retried))
				if err == nil && (text != want[p].Text || finish != want[p].Finish) {
					err = fmt.Errorf("%q (%s), want the reference %q (%s)", text, finish, want[p].Text, want[p].Finish)
				}
				if err != nil {
					mu.Lock()
					lost = append(lost, fmt.Sprintf("prompt %d: %v", p, err))
					mu.Unlock()
					continue
				}
				served.Add(1)
			}
		})
	}
	servedSince := func(what string, n int64) { waitServed(t, what, served.Load, n) }
	servedSince("load before the restarts", 8)

	for i, old := range c.Workers[:2] {
		repl := c.Workers[i+2]
		if err := repl.Start(); err != nil {
			t.Fatal(err)
		}
		c.WaitReady(t)
		// SIGTERM while the old worker has work of this gateway in flight,
		// so that the drain has something to finish.
		c.WaitWorker(t, old.ID, "busy", func(v adminclient.WorkerView, _ bool) bool { return v.Assigned > 0 })
		if err := old.Stop(harness.WaitTimeout); err != nil {
			t.Fatalf("%s after SIGTERM: %v", old.ID, err)
		}
		log := old.Log()
		if !strings.Contains(log, "worker draining") || !strings.Contains(log, "worker drained: every request in flight finished") {
			t.Errorf("%s did not drain:\n%s", old.ID, old.LogTail(30))
		}
		for _, g := range c.Gateways {
			// The gateway hears it from the draining heartbeat or, when a
			// placement got there first, from the worker's refusal.
			if !strings.Contains(g.Log(), "worker draining:") {
				t.Errorf("%s did not hear that %s drains", g.Name, old.ID)
			}
		}
		servedSince("load after replacing "+old.ID, 8)
	}

	// The gateway: out of the rotation as its drain begins (a load
	// balancer sees /readyz fail), stopped, started, back when ready.
	g := c.Gateways[0]
	lb.set(0, false)
	if err := g.Stop(harness.WaitTimeout); err != nil {
		t.Fatalf("%s after SIGTERM: %v", g.Name, err)
	}
	if log := g.Log(); strings.Contains(log, "drain timeout passed") || strings.Contains(log, "aborting requests in flight") {
		t.Errorf("%s aborted requests in flight instead of draining them:\n%s", g.Name, g.LogTail(30))
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	c.WaitGatewayReady(t, g)
	lb.set(0, true)
	servedSince("load after restarting "+g.Name, 8)

	close(stop)
	wg.Wait()
	for _, l := range lost {
		t.Errorf("lost request: %s", l)
	}
	t.Logf("%s: %d requests served, %d lost, %d retried on the other gateway (never accepted)", backend, served.Load(), len(lost), retries.Load())
	c.WaitPoolsFree(t)
}

// rotation is the test's load balancer over the gateways in it.
type rotation struct {
	gateways []*harness.Gateway
	mu       sync.Mutex
	in       []bool
}

func (r *rotation) set(i int, in bool) {
	r.mu.Lock()
	r.in[i] = in
	r.mu.Unlock()
}

// pick returns the gateways to try for the n-th request of a client: the
// ones in rotation, starting at n's.
func (r *rotation) pick(n int) []*harness.Gateway {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*harness.Gateway
	for k := range r.gateways {
		if i := (n + k) % len(r.gateways); r.in[i] {
			out = append(out, r.gateways[i])
		}
	}
	return out
}

// errNotAccepted marks an answer that says the request was never
// accepted, which the client may retry elsewhere.
var errNotAccepted = errors.New("never accepted")

// complete sends a completion through the rotation: to the n-th gateway,
// then to the next on a refusal that says the request was never accepted.
// It returns the text, the finish reason and how often it retried.
func (r *rotation) complete(key string, body map[string]any, n int) (text, finish string, retried int, err error) {
	for _, g := range r.pick(n) {
		text, finish, err = completeOn(g, key, body)
		if !errors.Is(err, errNotAccepted) {
			return text, finish, retried, err
		}
		retried++
	}
	return "", "", retried, fmt.Errorf("every gateway refused: %w", err)
}

func completeOn(g *harness.Gateway, key string, body map[string]any) (text, finish string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*harness.WaitTimeout)
	defer cancel()
	resp, err := g.Post(ctx, key, "/v1/completions", body)
	if err != nil {
		if strings.Contains(err.Error(), "connection refused") {
			return "", "", fmt.Errorf("%w: %v", errNotAccepted, err)
		}
		return "", "", err
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var v completionOut
	if jerr := json.Unmarshal(data, &v); jerr != nil {
		return "", "", fmt.Errorf("%s: %.200s", resp.Status, data)
	}
	switch {
	case resp.StatusCode == http.StatusServiceUnavailable && v.Error != nil && v.Error.Code == "shutting_down" &&
		resp.Header.Get("Retry-After") != "":
		return "", "", fmt.Errorf("%w: %s", errNotAccepted, v.Error.Message)
	case resp.StatusCode != http.StatusOK || v.Error != nil || len(v.Choices) != 1:
		return "", "", fmt.Errorf("%s: %.300s", resp.Status, data)
	}
	return v.Choices[0].Text, v.Choices[0].FinishReason, nil
}

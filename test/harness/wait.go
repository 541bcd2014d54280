package harness

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/warden-ai/warden/internal/adminclient"
)

// WaitReady waits until every gateway answers /readyz, lists every
// running worker healthy, and serves every model that has a running
// worker.
func (c *Cluster) WaitReady(t testing.TB) {
	t.Helper()
	c.waitFor(t, "the cluster to be ready", func(ctx context.Context) error {
		for _, g := range c.Gateways {
			if err := g.ready(ctx, c.runningWorkers()); err != nil {
				return fmt.Errorf("%s: %w", g.Name, err)
			}
		}
		return nil
	})
}

// ready checks one gateway: /readyz, the workers, the models.
func (g *Gateway) ready(ctx context.Context, workers []*Worker) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.APIURL+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := g.HTTP.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	views, err := g.Admin.Workers(ctx)
	if err != nil {
		return err
	}
	healthy := map[string]bool{}
	for _, v := range views {
		healthy[v.ID] = v.Healthy
	}
	models := map[string]bool{}
	for _, w := range workers {
		if !healthy[w.ID] {
			return fmt.Errorf("worker %s not healthy", w.ID)
		}
		models[w.Model] = true
	}
	ms, err := g.Admin.Models(ctx)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if models[m.Name] && !m.Serving {
			return fmt.Errorf("model %s not served (%s)", m.Name, m.Verdict)
		}
	}
	return nil
}

// WaitServing waits until the first gateway answers a one-token
// completion of model with key 200: the client's view of readiness.
func (c *Cluster) WaitServing(t testing.TB, key, model string) {
	t.Helper()
	body := map[string]any{"model": model, "prompt": "ping", "max_tokens": 1, "temperature": 0}
	c.waitFor(t, "the gateway to serve "+model, func(ctx context.Context) error {
		resp, err := c.Gateway().Post(ctx, key, "/v1/completions", body)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", resp.Status, data)
		}
		return nil
	})
}

// WaitWorker waits until cond holds for the first gateway's view of
// worker id (found is false when the gateway does not list it).
func (c *Cluster) WaitWorker(t testing.TB, id, what string, cond func(v adminclient.WorkerView, found bool) bool) adminclient.WorkerView {
	t.Helper()
	var last adminclient.WorkerView
	c.waitFor(t, "worker "+id+" to be "+what, func(ctx context.Context) error {
		views, err := c.Gateway().Admin.Workers(ctx)
		if err != nil {
			return err
		}
		for _, v := range views {
			if v.ID == id {
				last = v
				if cond(v, true) {
					return nil
				}
				return fmt.Errorf("now %+v", v)
			}
		}
		if cond(adminclient.WorkerView{}, false) {
			return nil
		}
		return fmt.Errorf("not listed")
	})
	return last
}

// WaitPoolsFree waits until every running worker reports, through the
// first gateway, every KV page free and no sequence running or waiting
// (pool accounting back to all-free after the test's requests).
func (c *Cluster) WaitPoolsFree(t testing.TB) {
	t.Helper()
	c.waitFor(t, "every worker's KV pool to be all free", func(ctx context.Context) error {
		views, err := c.Gateway().Admin.Workers(ctx)
		if err != nil {
			return err
		}
		byID := map[string]adminclient.WorkerView{}
		for _, v := range views {
			byID[v.ID] = v
		}
		for _, w := range c.runningWorkers() {
			v, ok := byID[w.ID]
			p := v.Pool
			switch {
			case !ok:
				return fmt.Errorf("worker %s not listed", w.ID)
			case p.FreePages != p.TotalPages || p.ReservedPages+p.InUsePages+p.QuarantinedPages != 0 || v.Running+v.Waiting != 0:
				return fmt.Errorf("worker %s: pool %+v, running %d, waiting %d", w.ID, p, v.Running, v.Waiting)
			}
		}
		return nil
	})
}

// Terminal lifecycle states.
var terminalStates = map[string]bool{"completed": true, "rejected": true, "aborted": true, "failed": true}

// WaitRequestDone waits until request id reaches a terminal state on the
// first gateway and returns it.
func (c *Cluster) WaitRequestDone(t testing.TB, id string) adminclient.RequestView {
	t.Helper()
	var rv adminclient.RequestView
	c.waitFor(t, "request "+id+" to finish", func(ctx context.Context) error {
		var err error
		if rv, err = c.Gateway().Admin.Request(ctx, id); err != nil {
			return err
		}
		if !terminalStates[rv.State] {
			return fmt.Errorf("state %s", rv.State)
		}
		return nil
	})
	return rv
}

// WaitRequestState waits until the first gateway lists a request of
// tenant in flight in state, and returns it.
func (c *Cluster) WaitRequestState(t testing.TB, tenantID, state string) adminclient.RequestView {
	t.Helper()
	var rv adminclient.RequestView
	c.waitFor(t, "a request of "+tenantID+" in state "+state, func(ctx context.Context) error {
		rs, err := c.Gateway().Admin.Requests(ctx, adminclient.RequestFilter{Tenant: tenantID})
		if err != nil {
			return err
		}
		var states []string
		for _, r := range rs {
			if r.State == state {
				rv = r
				return nil
			}
			states = append(states, r.State)
		}
		return fmt.Errorf("in flight: %s", strings.Join(states, ", "))
	})
	return rv
}

// waitFor polls check until it returns nil, failing the test after
// WaitTimeout or as soon as a process of the cluster ended that was not
// stopped or killed through Process.Stop or Process.Kill.
func (c *Cluster) waitFor(t testing.TB, what string, check func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	var last error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		last = check(ctx)
		cancel()
		if last == nil {
			return
		}
		for _, p := range c.processes() {
			if p.crashed() {
				t.Fatalf("waiting for %s: %s exited (%v); log tail:\n%s", what, p.Name, p.ExitErr(), p.LogTail(30))
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: gave up after %v: %v", what, WaitTimeout, last)
		}
		time.Sleep(pollInterval)
	}
}

// WaitGatewayReady waits until gateway g answers /readyz and lists every
// running worker of the cluster healthy, e.g. after g was restarted.
func (c *Cluster) WaitGatewayReady(t testing.TB, g *Gateway) {
	t.Helper()
	c.waitFor(t, g.Name+" to be ready", func(ctx context.Context) error { return g.ready(ctx, c.runningWorkers()) })
}

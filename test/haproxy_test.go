package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warden-ai/warden/cmd/warden/bench/rolling"
	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/haproxyrun"
	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/test/harness"
)

// startHAProxy runs HAProxy (internal/haproxyrun) in front of gateways.
// It is skipped when haproxy is missing, except under CI (scripts/test.sh
// installs Debian's package).
func startHAProxy(t *testing.T, gateways []*harness.Gateway, caFile string) *haproxyrun.Proxy {
	t.Helper()
	bin, err := haproxyrun.Find("")
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skip(err)
		}
		t.Fatalf("%v; scripts/test.sh installs it", err)
	}
	var servers []string
	for _, g := range gateways {
		servers = append(servers, strings.TrimPrefix(g.APIURL, "https://"))
	}
	lb, err := haproxyrun.Start(haproxyrun.Options{Bin: bin, Dir: t.TempDir(), Servers: servers, CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		lb.Close()
		if t.Failed() {
			out, _ := os.ReadFile(lb.LogPath)
			t.Logf("haproxy log:\n%s", out)
		}
	})
	return lb
}

// waitHAProxyUp waits until HAProxy sees every gateway UP.
func waitHAProxyUp(t *testing.T, lb *haproxyrun.Proxy) {
	t.Helper()
	waitUntil(t, "haproxy to see every gateway up", lb.AllUp)
}

// TestRollingRestartHAProxy puts HAProxy with /readyz health checks in
// front of two gateways and restarts every process under 8 streaming
// clients: each worker is replaced (the replacement registers, then the
// old one gets SIGTERM and drains), then each gateway gets SIGTERM
// (unready at once, serving with Connection: close for
// gateway.shutdown_delay, then draining) and is started again, the next
// one only once HAProxy has the restarted one back. Every stream
// completes and equals the reference: 0 lost, 0 cut mid-stream. The
// clients follow the documented retry rules (docs/operations.md,
// "Zero-downtime operations") and nothing more (rolling.Stream, the
// client of `warden bench rolling`): they retry a 503 with retry-after
// whose code says the request was never admitted, a refused connection,
// and a reused connection closed before any byte of the answer.
func TestRollingRestartHAProxy(t *testing.T) {
	drain := func(c *config.Config) { c.Worker.DrainTimeout = harness.WaitTimeout }
	spec := func(role config.Role) harness.WorkerSpec {
		return harness.WorkerSpec{Role: role, Model: harness.ModelTiny, Transfer: config.TransferTCP, Edit: drain}
	}
	specs := []harness.WorkerSpec{spec(config.RolePrefill), spec(config.RoleDecode), spec(config.RolePrefill), spec(config.RoleDecode)}
	c := harness.New(t, env, harness.Options{Workers: specs, Gateways: 2, Redis: true,
		EditGateway: func(_ int, cfg *config.Config) {
			cfg.Gateway.ShutdownDelay = 3 * time.Second // 3 × (2 failed checks 500ms apart)
			cfg.Gateway.DrainTimeout = harness.WaitTimeout
		}})
	for _, p := range []*harness.Process{c.Gateways[0].Process, c.Gateways[1].Process, c.Workers[0].Process, c.Workers[1].Process} {
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitReady(t)
	lb := startHAProxy(t, c.Gateways, c.Gateways[0].Config.Cluster.CAFile)
	waitHAProxyUp(t, lb)
	key := c.NewKey(t, "haproxy")

	prompts := []string{"Tell me a story.", "Count to ten.", "Name three colours.", "Say hello."}
	const maxTokens = 24
	want := make([]harness.Output, len(prompts))
	for i, p := range prompts {
		var err error
		if want[i], err = reference(t, harness.ModelTiny).Chat(context.Background(), []tokenizer.Message{{Role: "user", Content: p}}, maxTokens); err != nil {
			t.Fatal(err)
		}
	}
	client, err := c.HTTP1Client()
	if err != nil {
		t.Fatal(err)
	}
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = 8
	defer client.CloseIdleConnections()
	url := "https://" + lb.Addr + "/v1/chat/completions"

	var (
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		served  atomic.Int64
		retries = map[string]int{} // why → count
		mu      sync.Mutex
		lost    []string
	)
	for i := range 8 {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				p := (i + n) % len(prompts)
				ctx, cancel := context.WithTimeout(context.Background(), 2*harness.WaitTimeout)
				o := rolling.Stream(ctx, client, url, key, rolling.ChatBody(harness.ModelTiny, prompts[p], maxTokens))
				cancel()
				mu.Lock()
				for _, w := range o.Retries {
					retries[w]++
				}
				mu.Unlock()
				var err error
				switch {
				case o.Cut:
					err = errors.New("cut mid-stream")
				case o.Error != "":
					err = errors.New(o.Error)
				case o.Text != want[p].Text || o.Finish != want[p].Finish:
					err = fmt.Errorf("%q (%s), want the reference %q (%s)", o.Text, o.Finish, want[p].Text, want[p].Finish)
				}
				if err != nil {
					mu.Lock()
					lost = append(lost, fmt.Sprintf("client %d, prompt %d: %v", i, p, err))
					mu.Unlock()
					continue
				}
				served.Add(1)
			}
		})
	}
	servedSince := func(what string, n int64) { waitServed(t, what, served.Load, n) }
	servedSince("load before the restarts", 16)

	for i, old := range c.Workers[:2] {
		if err := c.Workers[i+2].Start(); err != nil {
			t.Fatal(err)
		}
		c.WaitReady(t)
		if err := old.Stop(harness.WaitTimeout); err != nil {
			t.Fatalf("%s after SIGTERM: %v", old.ID, err)
		}
		servedSince("load after replacing "+old.ID, 16)
	}
	for _, g := range c.Gateways {
		if err := g.Stop(harness.WaitTimeout); err != nil {
			t.Fatalf("%s after SIGTERM: %v", g.Name, err)
		}
		if log := g.Log(); !strings.Contains(log, "gateway leaving") || strings.Contains(log, "drain timeout passed") {
			t.Errorf("%s did not leave and drain cleanly:\n%s", g.Name, g.LogTail(30))
		}
		if err := g.Start(); err != nil {
			t.Fatal(err)
		}
		c.WaitGatewayReady(t, g)
		waitHAProxyUp(t, lb)
		servedSince("load after restarting "+g.Name, 16)
	}
	close(stop)
	wg.Wait()
	for _, l := range lost {
		t.Errorf("lost request: %s", l)
	}
	t.Logf("%d streams served through haproxy, %d lost, retried (never admitted, or a reused connection closed before any answer): %v",
		served.Load(), len(lost), retries)
}

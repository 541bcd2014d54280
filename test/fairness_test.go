package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/internal/errenvelope"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/test/harness"
)

// Shape of the fairness test's load: every request is the same greedy
// completion of the endless model, so every request costs the same to
// the fair queue and runs to fairMaxTokens.
const (
	fairPrompt    = "Tell me a long story."
	fairMaxTokens = 96
	// fairSlots is how many requests the worker's KV pool holds at once:
	// the rest wait in the gateway's fair queue.
	fairSlots = 2
	// endlessTokenBytes is the KV of one token of the endless model:
	// K and V, 4 layers, 4 KV heads of 32 float32.
	endlessTokenBytes = 2 * 4 * 4 * 32 * 4
	pageTokens        = 16
)

// TestFairness: while one tenant floods a saturated worker, the fair
// queue serves another tenant's requests within the turns its weight
// promises, and tenants that both flood get turns in proportion to their
// weights.
//
// The bound, from self-clocked fair queuing with equal costs c: a tenant
// with weight wb whose request arrives while a tenant of weight wa is
// backlogged gets its turn after at most ceil(wa/wb) of the other's turns
// (finish tags V + c/wa, V + 2c/wa, ... against V + c/wb; a tie goes to
// the earlier arrival). A turn is one freed slot, i.e. one completion, so
// with weights 1:1 a request of the trickling tenant waits for at most 2
// completions (the other's and its own): it gets at least 1/2 of the
// turns while it asks. Two flooding tenants with weights 3:1 get 3/4 and
// 1/4 of the turns.
func TestFairness(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	want, err := reference(t, harness.ModelEndless).Completion(ctx, fairPrompt, fairMaxTokens)
	if err != nil {
		t.Fatal(err)
	}
	if want.Finish != "length" {
		t.Fatalf("the endless model stopped: %+v", want)
	}
	pages := (want.PromptTokens + fairMaxTokens + pageTokens - 1) / pageTokens
	capacity := int64(fairSlots * pages * pageTokens)
	c := harness.Start(t, env, harness.Options{Redis: true,
		// Waits are tens of turns long: no queue timeout, and no worker
		// declared lost, on a slow machine.
		EditGateway:      func(_ int, cfg *config.Config) { cfg.Gateway.Queue.MaxWait = 5 * time.Minute },
		HeartbeatTimeout: 6 * time.Second,
		Workers: []harness.WorkerSpec{{
			Role: config.RoleBoth, Model: harness.ModelEndless,
			Edit: func(cfg *config.Config) {
				cfg.Worker.KV.PageTokens = pageTokens
				cfg.Worker.KV.MemoryBytes = config.ByteSize(capacity * endlessTokenBytes)
			},
		}}})
	ws, err := c.Gateway().Admin.Workers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 || ws[0].Pool.CapacityTokens != capacity {
		t.Fatalf("workers %+v; the test needs one pool of %d tokens (%d requests)", ws, capacity, fairSlots)
	}
	flooder := newTenant(t, c, 0, "flooder", 0, tenant.Limits{}).Key
	other := newTenant(t, c, 0, "other", 0, tenant.Limits{}).Key
	body := map[string]any{"model": harness.ModelEndless, "prompt": fairPrompt, "max_tokens": fairMaxTokens,
		"temperature": 0, "stream": true}

	t.Run("1:1 flood and trickle", func(t *testing.T) {
		// The other's turns and the flooder's queue waits: a flooder's
		// request waits about 40 turns, so its waits need a window longer
		// than that.
		l := runLoad(t, c, body, want, map[string]int{"flooder": 40, "other": 1},
			map[string]string{"flooder": flooder, "other": other}, func(l *load) error {
				if o, f := len(l.turnsWaited("other")), len(l.waits("flooder")); o < 3 || f < 10 {
					return fmt.Errorf("%d requests of the other, %d of the flooder (want 3 and 10)", o, f)
				}
				return nil
			})
		turn := l.turnPeriod()
		a, b := l.waits("flooder"), l.waits("other")
		turns := l.turnsWaited("other")
		asked := 0
		for _, n := range turns {
			asked += n
		}
		share := float64(len(turns)) / float64(max(asked, 1))
		t.Logf("window %v: %d completions of the flooder, %d of the other; a turn every %v; service %v",
			l.window, l.completed("flooder"), l.completed("other"), turn.Round(time.Millisecond), l.service().Round(time.Millisecond))
		t.Logf("queue wait (to the first byte): flooder median %v p90 %v; other median %v p90 %v",
			median(a).Round(time.Millisecond), pct(a, 90).Round(time.Millisecond), median(b).Round(time.Millisecond), pct(b, 90).Round(time.Millisecond))
		t.Logf("other: turns waited per request %v; it got %d of the %d turns while it asked (%.2f; bound 1/2)",
			turns, len(turns), asked, share)
		// Margins for noise: a completion seen by the client around the
		// other's admission can count one turn too many.
		if share < 0.35 {
			t.Errorf("the other tenant got %.2f of the turns while it asked, want at least 1/2 (0.35 with margin)", share)
		}
		if median(b)*4 > median(a) {
			t.Errorf("the other tenant's median wait %v is not well below the flooder's %v", median(b), median(a))
		}
	})

	t.Run("3:1 both flood", func(t *testing.T) {
		three := 3
		if _, err := c.Gateway().Admin.UpdateTenant(ctx, "flooder", adminclient.TenantPatch{Weight: &three}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(authTTL) // the gateway learns the weight with the key's next verification
		l := runLoad(t, c, body, want, map[string]int{"flooder": 12, "other": 12},
			map[string]string{"flooder": flooder, "other": other}, completedAtLeast(16, "flooder", "other"))
		fa, fb := l.completed("flooder"), l.completed("other")
		share := float64(fa) / float64(max(fa+fb, 1))
		t.Logf("window %v: weights 3:1, completions %d:%d, the heavier tenant's share %.2f (bound 0.75); queue wait medians %v and %v",
			l.window, fa, fb, share, median(l.waits("flooder")).Round(time.Millisecond), median(l.waits("other")).Round(time.Millisecond))
		if share < 0.65 || share > 0.85 {
			t.Errorf("weights 3:1 gave the heavier tenant %.2f of the completions, want 0.75 (0.65 to 0.85 with margin)", share)
		}
	})
}

// fairRecord is one request of the fairness load.
type fairRecord struct {
	tenant             string
	sent, header, done time.Time // done is zero unless it completed
}

// load is the record of one runLoad.
type load struct {
	start, end time.Time // the measuring window
	window     time.Duration
	records    []fairRecord
}

// Load phases: the queue fills during the warm-up; requests are counted
// in the window after it. The window lasts at least fairWindow and then
// until the test's judge has enough requests to judge: how many requests
// a window holds depends on the machine's speed, so the window's length
// does too.
const (
	fairWarmup = 2 * time.Second
	fairWindow = 8 * time.Second
	// fairMaxWindow bounds the window on a machine too slow to give enough
	// requests: a limit on hangs, not a performance assertion.
	fairMaxWindow = 3 * time.Minute
)

// enoughFunc says whether a load holds enough requests to judge it, and if
// not, what is missing.
type enoughFunc func(l *load) error

// runLoad runs clients[tenant] closed-loop clients per tenant (each
// sends a request, reads it to the end, and sends the next; clients are
// spread round robin over the cluster's gateways) for the
// warm-up and the window, then stops them all, checks that every completed
// request returned the reference text, and waits until the pool is free.
// The window ends once enough finds the requests in it enough to judge.
func runLoad(t *testing.T, c *harness.Cluster, body map[string]any, want harness.Output, clients map[string]int,
	keys map[string]string, enough enoughFunc) *load {
	t.Helper()
	return runLoadAfter(t, c, body, want, clients, keys, func() { time.Sleep(fairWarmup) }, enough)
}

// runLoadAfter is runLoad with warm in place of the fixed warm-up: the
// window starts when warm returns.
func runLoadAfter(t *testing.T, c *harness.Cluster, body map[string]any, want harness.Output, clients map[string]int,
	keys map[string]string, warm func(), enough enoughFunc) *load {
	t.Helper()
	return runLoadOn(t, c, body, want, clients, keys, func(string) []*harness.Gateway { return c.Gateways }, warm, enough)
}

// runLoadOn is runLoadAfter with each tenant's clients spread round robin
// over the gateways on(tenant) returns instead of all of them.
func runLoadOn(t *testing.T, c *harness.Cluster, body map[string]any, want harness.Output, clients map[string]int,
	keys map[string]string, on func(tenant string) []*harness.Gateway, warm func(), enough enoughFunc) *load {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var (
		mu    sync.Mutex
		l     = &load{}
		wrong []string
		wg    sync.WaitGroup
		begin = time.Now()
		next  int
	)
	for name, n := range clients {
		for range n {
			// Clients spread over the gateways, round robin.
			gws := on(name)
			g := gws[next%len(gws)]
			next++
			wg.Go(func() {
				for ctx.Err() == nil {
					r := fairRecord{tenant: name, sent: time.Now()}
					text, finish, err := streamCompletion(ctx, g, keys[name], body, &r)
					mu.Lock()
					switch {
					case ctx.Err() != nil:
					case err != nil:
						wrong = append(wrong, name+": "+err.Error())
					case text != want.Text || finish != want.Finish:
						wrong = append(wrong, name+": wrong text "+text)
					default:
						r.done = time.Now()
					}
					if ctx.Err() == nil {
						l.records = append(l.records, r)
					}
					failed := err != nil && ctx.Err() == nil
					mu.Unlock()
					if failed {
						time.Sleep(100 * time.Millisecond) // no busy loop on errors
					}
				}
			})
		}
	}
	warm()
	mu.Lock()
	l.start = time.Now()
	mu.Unlock()
	time.Sleep(fairWindow)
	// Extend the window until the requests in it are enough to judge.
	var missing error
	for {
		mu.Lock()
		l.end = time.Now()
		missing = enough(l)
		mu.Unlock()
		if missing == nil || l.end.Sub(l.start) > fairMaxWindow {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	wg.Wait()
	l.window = l.end.Sub(l.start).Round(time.Millisecond)
	if len(wrong) > 0 {
		t.Errorf("%d of the load's requests failed or returned other text than the reference: %s", len(wrong),
			strings.Join(wrong[:min(len(wrong), 5)], "; "))
	}
	t.Logf("load ran %v, a window of %v", time.Since(begin).Round(time.Millisecond), l.window)
	if missing != nil {
		t.Fatalf("too few requests in a window of %v to judge: %v", l.window, missing)
	}
	c.WaitPoolsFree(t)
	return l
}

// streamCompletion runs one streaming completion, recording in r when the
// response's headers arrived (the request left the queue and was
// prefilled), and returns its text and finish reason.
func streamCompletion(ctx context.Context, g *harness.Gateway, key string, body map[string]any, r *fairRecord) (string, string, error) {
	resp, err := g.Post(ctx, key, "/v1/completions", body)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	r.header = time.Now()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		return "", "", errors.New(resp.Status + " " + string(data))
	}
	sse := harness.NewSSE(resp.Body)
	var text strings.Builder
	finish := ""
	for {
		data, err := sse.Next()
		if err != nil {
			return "", "", err
		}
		if data == "[DONE]" {
			return text.String(), finish, nil
		}
		var ev struct {
			Choices []struct {
				Text         string  `json:"text"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Error *errenvelope.Body `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return "", "", err
		}
		if ev.Error != nil {
			return "", "", errors.New("error event: " + ev.Error.Message)
		}
		if len(ev.Choices) > 0 {
			text.WriteString(ev.Choices[0].Text)
			if fr := ev.Choices[0].FinishReason; fr != nil && *fr != "" {
				finish = *fr
			}
		}
	}
}

// completedAtLeast is an enoughFunc: at least n completions of tenants
// together in the window.
func completedAtLeast(n int, tenants ...string) enoughFunc {
	return func(l *load) error {
		got := 0
		for _, name := range tenants {
			got += l.completed(name)
		}
		if got < n {
			return fmt.Errorf("%d completions of %v (want %d)", got, tenants, n)
		}
		return nil
	}
}

func (l *load) in(ts time.Time) bool { return !ts.Before(l.start) && ts.Before(l.end) }

// completed counts tenant's requests that completed in the window.
func (l *load) completed(tenant string) int {
	n := 0
	for _, r := range l.records {
		if r.tenant == tenant && !r.done.IsZero() && l.in(r.done) {
			n++
		}
	}
	return n
}

// turnPeriod is the window divided by the completions in it: the time
// between two freed slots, i.e. two turns.
func (l *load) turnPeriod() time.Duration {
	n := 0
	for _, r := range l.records {
		if !r.done.IsZero() && l.in(r.done) {
			n++
		}
	}
	return l.end.Sub(l.start) / time.Duration(max(n, 1))
}

// service is the median time from a request's first byte to its end.
func (l *load) service() time.Duration {
	var d []time.Duration
	for _, r := range l.records {
		if !r.done.IsZero() && l.in(r.sent) {
			d = append(d, r.done.Sub(r.header))
		}
	}
	return median(d)
}

// waits returns the queue waits (sending to the first byte) of tenant's
// requests sent in the window that left the queue.
func (l *load) waits(tenant string) []time.Duration {
	var d []time.Duration
	for _, r := range l.records {
		if r.tenant == tenant && !r.done.IsZero() && l.in(r.sent) {
			d = append(d, r.header.Sub(r.sent))
		}
	}
	return d
}

// latencies returns the latencies (sending to the end) of tenant's
// requests sent in the window that completed.
func (l *load) latencies(tenant string) []time.Duration {
	var d []time.Duration
	for _, r := range l.records {
		if r.tenant == tenant && !r.done.IsZero() && l.in(r.sent) {
			d = append(d, r.done.Sub(r.sent))
		}
	}
	return d
}

// turnsWaited returns, for each of tenant's requests sent in the window,
// how many turns went by from its sending to its first byte: the
// completions in between (each frees one slot), at least its own one.
func (l *load) turnsWaited(tenant string) []int {
	var out []int
	for _, r := range l.records {
		if r.tenant != tenant || r.done.IsZero() || !l.in(r.sent) {
			continue
		}
		n := 0
		for _, o := range l.records {
			if !o.done.IsZero() && o.done.After(r.sent) && !o.done.After(r.header) {
				n++
			}
		}
		out = append(out, max(n, 1))
	}
	return out
}

func median(d []time.Duration) time.Duration { return pct(d, 50) }

// pct is the p-th percentile of d (nearest rank), 0 for none.
func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, (len(s)*p+99)/100-1)]
}

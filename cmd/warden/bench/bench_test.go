package bench

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/isolation"
)

// testRedis returns the address of the test Redis, or "" (with a log
// line) when none answers: the Redis parts are then skipped.
func testRedis(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(EnvRedisAddr)
	if addr == "" {
		addr = DefaultRedisAddr
	}
	if err := RedisAvailable(t.Context(), addr); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs a Redis: %v", err)
		}
		t.Logf("skipping the Redis parts: %v", err)
		return ""
	}
	return addr
}

func TestRunGateway(t *testing.T) {
	redis := testRedis(t)
	rep, err := RunGateway(t.Context(), GatewayOptions{
		Duration: 150 * time.Millisecond, Round: 100 * time.Millisecond, Concurrency: []int{2}, RedisAddr: redis, Threads: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := 2
	if redis != "" {
		want = 3
	}
	if len(rep.Paths) != want {
		t.Fatalf("%d paths, want %d", len(rep.Paths), want)
	}
	if got := rep.Options.Concurrency; len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("concurrency sweep %v, want [1 2]", got)
	}
	ref := rep.Reference
	if ref.Text == "" || ref.CompletionTokens != int64(len(ref.IDs)) || ref.CompletionTokens > DefaultMaxTokens || ref.PromptTokens < 10 {
		t.Fatalf("reference %+v", ref)
	}
	for _, p := range rep.Paths {
		n := 0
		for _, r := range p.Runs {
			if r.Requests == 0 || r.RPS() <= 0 || r.Latency.P50 <= 0 || r.Latency.P99 < r.Latency.P50 {
				t.Fatalf("%s: run %+v", p.Name, r)
			}
			n += r.Requests
		}
		// Every measured answer, and the warm-up ones, were checked.
		if p.Checked != int64(n+warmUpRequests) {
			t.Fatalf("%s: %d answers checked, %d measured", p.Name, p.Checked, n)
		}
	}
	var b bytes.Buffer
	if err := rep.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, s := range []string{"| direct (gRPC to the worker) |", "gateway, memory store", "| **max** |", "all identical:"} {
		if !strings.Contains(out, s) {
			t.Errorf("report lacks %q:\n%s", s, out)
		}
	}
	if redis != "" && !strings.Contains(out, "Redis / memory") {
		t.Errorf("report lacks the Redis ratio:\n%s", out)
	}
}

func TestRunTenants(t *testing.T) {
	redis := testRedis(t)
	if redis == "" {
		t.Skip("no Redis")
	}
	rep, err := RunTenants(t.Context(), TenantsOptions{
		RedisAddr: redis, Iterations: 50, Duration: 100 * time.Millisecond, Concurrency: []int{4},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Stores) != 2 || rep.Stores[0].Name != "memory" || rep.Stores[1].Name != "Redis" {
		t.Fatalf("stores %+v", rep.Stores)
	}
	for _, s := range rep.Stores {
		for k, l := range s.Ops {
			if l.P50 <= 0 || l.P99 < l.P50 {
				t.Errorf("%s %s: %+v", s.Name, Op(k), l)
			}
		}
		if len(s.Runs) != 2 || s.Runs[0].Concurrency != 1 || s.Runs[1].Concurrency != 4 || s.Runs[1].Requests == 0 {
			t.Errorf("%s runs %+v", s.Name, s.Runs)
		}
	}
	var b bytes.Buffer
	if err := rep.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| **request**: cached auth + Acquire + Release |") {
		t.Errorf("report:\n%s", b.String())
	}
}

func TestNoRedisIsAClearError(t *testing.T) {
	const addr = "127.0.0.1:1"
	if _, err := RunGateway(t.Context(), GatewayOptions{RedisAddr: addr}); err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("RunGateway with no Redis at %s: %v", addr, err)
	}
	if _, err := RunTenants(t.Context(), TenantsOptions{RedisAddr: addr}); err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("RunTenants with no Redis at %s: %v", addr, err)
	}
}

func TestTenantsNeedsRedis(t *testing.T) {
	if _, err := RunTenants(t.Context(), TenantsOptions{}); err == nil {
		t.Fatal("RunTenants without a Redis address succeeded")
	}
}

func TestAnswerChecks(t *testing.T) {
	ref := &Answer{IDs: []int32{5, 6}, Text: "ab", FinishReason: "length", PromptTokens: 30, CompletionTokens: 2}
	okDirect := directAnswer{ids: []int32{5, 6}, finish: "length", promptTokens: 30, completion: 2}
	if err := ref.checkDirect(okDirect); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []directAnswer{
		{ids: []int32{5, 7}, finish: "length", promptTokens: 30, completion: 2},
		{ids: []int32{5}, finish: "length", promptTokens: 30, completion: 2},
		{ids: []int32{5, 6}, finish: "stop", promptTokens: 30, completion: 2},
		{ids: []int32{5, 6}, finish: "length", promptTokens: 1, completion: 2},
		{ids: []int32{5, 6}, finish: "length", promptTokens: 30, completion: 3},
	} {
		if ref.checkDirect(bad) == nil {
			t.Errorf("direct answer %+v accepted", bad)
		}
	}
	ok := chatAnswer{content: "ab", finish: "length", promptTokens: 30, completion: 2}
	if err := ref.checkChat(ok); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []chatAnswer{
		{content: "ba", finish: "length", promptTokens: 30, completion: 2},
		{content: "ab ", finish: "length", promptTokens: 30, completion: 2},
		{content: "", finish: "length", promptTokens: 30, completion: 2},
		{content: "ab", finish: "stop", promptTokens: 30, completion: 2},
		{content: "ab", finish: "length", promptTokens: 1, completion: 2},
		{content: "ab", finish: "length", promptTokens: 30, completion: 1},
	} {
		if ref.checkChat(bad) == nil {
			t.Errorf("chat answer %+v accepted", bad)
		}
	}
}

func TestParseChat(t *testing.T) {
	a, err := parseChat([]byte(`{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8}}`))
	if err != nil || a != (chatAnswer{content: "hi", finish: "stop", promptTokens: 7, completion: 1}) {
		t.Fatalf("parseChat = %+v, %v", a, err)
	}
	for _, bad := range []string{``, `{`, `{"choices":[]}`, `{"choices":[{},{}]}`, `[]`} {
		if _, err := parseChat([]byte(bad)); err == nil {
			t.Errorf("parseChat(%q) succeeded", bad)
		}
	}
}

func TestSummarize(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	if l := summarize(d); l.P50 != 50*time.Millisecond || l.P99 != 99*time.Millisecond {
		t.Fatalf("summarize 1..100 ms = %+v", l)
	}
	if l := summarize([]time.Duration{3}); l.P50 != 3 || l.P99 != 3 {
		t.Fatalf("summarize one = %+v", l)
	}
	if l := summarize(nil); l != (Latency{}) {
		t.Fatalf("summarize none = %+v", l)
	}
}

func TestSweep(t *testing.T) {
	got, err := sweep([]int{16, 4, 4})
	if err != nil || len(got) != 3 || got[0] != 1 || got[1] != 4 || got[2] != 16 {
		t.Fatalf("sweep = %v, %v", got, err)
	}
	for _, bad := range [][]int{{0}, {-1}, {5000}} {
		if _, err := sweep(bad); err == nil {
			t.Errorf("sweep(%v) succeeded", bad)
		}
	}
}

func TestAlternateStopsOnError(t *testing.T) {
	wrong := errors.New("wrong answer")
	n := 0
	fns := []request{
		func(context.Context) error { return nil },
		func(context.Context) error {
			n++
			if n == 3 {
				return wrong
			}
			return nil
		},
	}
	if _, err := alternate(t.Context(), 1, time.Second, 100*time.Millisecond, fns); !errors.Is(err, wrong) {
		t.Fatalf("alternate = %v, want the request's error", err)
	}
}

func TestAlternateCounts(t *testing.T) {
	var calls [2]int
	fns := []request{
		func(context.Context) error { calls[0]++; time.Sleep(time.Millisecond); return nil },
		func(context.Context) error { calls[1]++; time.Sleep(time.Millisecond); return nil },
	}
	runs, err := alternate(t.Context(), 1, 40*time.Millisecond, 10*time.Millisecond, fns)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range runs {
		if r.Requests != calls[i] || r.Requests == 0 || r.Concurrency != 1 || r.Elapsed < 40*time.Millisecond {
			t.Errorf("run %d: %+v after %d calls", i, r, calls[i])
		}
	}
}

func TestRunPD(t *testing.T) {
	for _, tr := range []config.TransferBackend{config.TransferTCP, config.TransferSHM} {
		rep, err := RunPD(context.Background(), PDOptions{Duration: 300 * time.Millisecond, Round: 100 * time.Millisecond,
			Concurrency: 2, MaxTokens: 8, Transfer: tr})
		if err != nil {
			t.Fatalf("%s: %v", tr, err)
		}
		if rep.On.Requests == 0 || rep.On.CompletionTokens == 0 || rep.On.TokensPerSecond() <= 0 {
			t.Fatalf("%s: no load carried: %+v", tr, rep)
		}
		if rep.Compared != isolation.Switchable || rep.Compared && rep.Off.Requests == 0 {
			t.Fatalf("%s: compared %v in a build where switching is %v: %+v", tr, rep.Compared, isolation.Switchable, rep)
		}
	}
}

// TestRunFleet: on two both workers, cache-aware routing sends each later
// turn to the worker holding its conversation (every later turn hits),
// round robin spreads the turns over both, and both serve the same
// answers (RunFleet compares them). Whether cache-aware routing puts the
// two conversations on two workers depends on whether their first turns
// overlap, which the test does not control.
func TestRunFleet(t *testing.T) {
	rep, err := RunFleet(context.Background(), FleetOptions{Both: 2, Conversations: 2, Turns: 3, TurnWords: 30, AnswerTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	a := rep.Aware
	if a.Requests != 6 || a.Cached == 0 || a.PromptTokens != rep.RoundRob.PromptTokens || len(rep.RoundRob.Load) != 2 {
		t.Fatalf("cache-aware tally %+v, round robin %+v", a, rep.RoundRob)
	}
	var served int64
	for _, n := range a.Load {
		served += n
	}
	if served != 6 {
		t.Fatalf("workers served %d requests, want 6: %v", served, a.Load)
	}
	var b strings.Builder
	rep.WriteTable(&b)
	if !strings.Contains(b.String(), "| cache_aware | 6 |") || !strings.Contains(b.String(), "| round_robin | 6 |") {
		t.Fatalf("table:\n%s", b.String())
	}
}

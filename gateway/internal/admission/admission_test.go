package admission

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/tenant"
)

func both(id string, capacity int64) WorkerCapacity {
	return WorkerCapacity{ID: id, Role: RoleBoth, CapacityTokens: capacity}
}

func TestCompute(t *testing.T) {
	clamp := Model{Name: "m", ContextLength: 8192, Policy: config.ContextClamp, MaxOutputTokens: 1024}
	refuse := Model{Name: "m", ContextLength: 8192, Policy: config.ContextRefuse}
	cases := []struct {
		name      string
		model     Model
		limits    tenant.ModelLimits
		workers   []WorkerCapacity
		verdict   Verdict
		serving   bool
		effective int64
		reason    string
		maxOut    int64
	}{
		{name: "no workers", model: clamp, verdict: VerdictNoWorkers, reason: "no healthy worker"},
		{name: "prefill only", model: clamp, workers: []WorkerCapacity{{ID: "p", Role: RolePrefill, CapacityTokens: 1 << 20}},
			verdict: VerdictNoWorkers, reason: "no healthy decode or both worker"},
		{name: "decode only", model: clamp, workers: []WorkerCapacity{{ID: "d", Role: RoleDecode, CapacityTokens: 1 << 20}},
			verdict: VerdictNoWorkers, reason: "no healthy prefill or both worker"},
		{name: "agree", model: clamp, workers: []WorkerCapacity{both("a", 8192), both("b", 100000)},
			verdict: VerdictAgree, serving: true, effective: 8192, maxOut: 1024},
		{name: "clamp to the smallest pool of any role", model: clamp,
			workers: []WorkerCapacity{{ID: "d", Role: RoleDecode, CapacityTokens: 6000}, {ID: "p", Role: RolePrefill, CapacityTokens: 5000}},
			verdict: VerdictClamped, serving: true, effective: 5000, maxOut: 1024,
			reason: "configured context 8192 exceeds KV pool capacity 5000 of worker p; clamped to 5000"},
		{name: "clamp by positions", model: clamp, workers: []WorkerCapacity{{ID: "a", Role: RoleBoth, CapacityTokens: 9000, MaxPositions: 4096}},
			verdict: VerdictClamped, serving: true, effective: 4096, maxOut: 1024, reason: "maximum position count 4096 of worker a"},
		{name: "clamp below the output cap", model: clamp, workers: []WorkerCapacity{both("a", 512)},
			verdict: VerdictClamped, serving: true, effective: 512, maxOut: 511},
		{name: "refuse", model: refuse, workers: []WorkerCapacity{both("a", 100000), both("w7", 681280/100)},
			verdict: VerdictRefused, reason: "model m not served: configured context 8192 exceeds KV pool capacity 6812 of worker w7"},
		{name: "store limits lower the configured context", model: refuse, limits: tenant.ModelLimits{MaxContext: 4096, MaxOutputTokens: 100},
			workers: []WorkerCapacity{both("a", 5000)}, verdict: VerdictAgree, serving: true, effective: 4096, maxOut: 100},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := Compute(c.model, c.limits, c.workers)
			if st.Verdict != c.verdict || st.Serving != c.serving || st.Effective != c.effective || !strings.Contains(st.Reason, c.reason) {
				t.Fatalf("got %s serving=%v effective=%d reason %q; want %s serving=%v effective=%d reason containing %q",
					st.Verdict, st.Serving, st.Effective, st.Reason, c.verdict, c.serving, c.effective, c.reason)
			}
			if c.serving && st.MaxOutputTokens != c.maxOut {
				t.Errorf("max output %d, want %d", st.MaxOutputTokens, c.maxOut)
			}
		})
	}
}

// fakeLimits is a LimitsSource with settable limits.
type fakeLimits struct {
	mu  sync.Mutex
	m   map[string]tenant.ModelLimits
	err error
}

func (f *fakeLimits) Get(_ context.Context, model string) (tenant.ModelLimits, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.m[model]
	return l, ok, f.err
}

func (f *fakeLimits) set(l tenant.ModelLimits) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[l.Model] = l
}

func TestControllerFollowsWorkersAndLimits(t *testing.T) {
	limits := &fakeLimits{m: map[string]tenant.ModelLimits{}}
	var changes []State
	c := NewController(Config{
		Models:   []Model{{Name: "m", ContextLength: 8192, Policy: config.ContextClamp}},
		Limits:   limits,
		OnChange: func(_, cur State) { changes = append(changes, cur) },
	})
	ctx := context.Background()
	effective := func() int64 {
		st, ok, err := c.State(ctx, "m")
		if !ok || err != nil {
			t.Fatalf("State: %v %v", ok, err)
		}
		return st.Effective
	}
	if effective() != 0 || len(changes) != 1 || changes[0].Verdict != VerdictNoWorkers {
		t.Fatalf("initial state: effective %d, changes %+v", effective(), changes)
	}
	c.SetWorkers("m", []WorkerCapacity{both("a", 10000)})
	if e := effective(); e != 8192 {
		t.Fatalf("registered a large pool: effective %d, want 8192", e)
	}
	c.SetWorkers("m", []WorkerCapacity{both("a", 10000), both("b", 3000)})
	if e := effective(); e != 3000 {
		t.Fatalf("registered a smaller pool: effective %d, want 3000", e)
	}
	c.SetWorkers("m", []WorkerCapacity{both("a", 10000), both("b", 2000)})
	if e := effective(); e != 2000 {
		t.Fatalf("pool shrank: effective %d, want 2000", e)
	}
	limits.set(tenant.ModelLimits{Model: "m", MaxContext: 1500})
	if e := effective(); e != 1500 {
		t.Fatalf("MaxContext set: effective %d, want 1500", e)
	}
	c.SetWorkers("m", nil)
	if e := effective(); e != 0 {
		t.Fatalf("workers lost: effective %d, want 0", e)
	}
	c.SetWorkers("unknown", []WorkerCapacity{both("x", 1)}) // ignored
	n := len(changes)
	c.SetWorkers("m", nil) // no change, no report
	if len(changes) != n {
		t.Errorf("an unchanged state was reported")
	}
	limits.err = errors.New("store down")
	if _, _, err := c.State(ctx, "m"); err == nil {
		t.Error("a limits error was swallowed")
	}
}

func TestAdmit(t *testing.T) {
	c := NewController(Config{Models: []Model{
		{Name: "m", ContextLength: 8192, Policy: config.ContextClamp, MaxOutputTokens: 512},
		{Name: "r", ContextLength: 8192, Policy: config.ContextRefuse},
		{Name: "idle", ContextLength: 8192, Policy: config.ContextClamp},
	}})
	c.SetWorkers("m", []WorkerCapacity{both("a", 1000)})
	c.SetWorkers("r", []WorkerCapacity{both("small", 1000)})
	ctx := context.Background()
	n := func(v int64) *int64 { return &v }
	cases := []struct {
		name    string
		req     Request
		status  int
		param   string
		msg     []string
		maxOut  int64
		message string
	}{
		{name: "fits", req: Request{Model: "m", PromptTokens: 400, MaxTokens: n(500)}, maxOut: 500},
		{name: "exactly fits", req: Request{Model: "m", PromptTokens: 999, MaxTokens: n(1)}, maxOut: 1},
		{name: "max_tokens too many", req: Request{Model: "m", PromptTokens: 600, MaxTokens: n(500), PromptParam: "messages"},
			status: 400, param: "max_tokens", msg: []string{"maximum context length is 1000 tokens", "1100 tokens", "600 in the prompt", "500 for the completion"}},
		{name: "prompt alone too long", req: Request{Model: "m", PromptTokens: 1000, MaxTokens: n(10), PromptParam: "messages"},
			status: 400, param: "messages", msg: []string{"1000 tokens", "1000 in the prompt", "10 for the completion"}},
		{name: "prompt too long without max_tokens", req: Request{Model: "m", PromptTokens: 1000, PromptParam: "prompt"},
			status: 400, param: "prompt", msg: []string{"1000 in the prompt", "1 for the completion"}},
		{name: "above the output cap", req: Request{Model: "m", PromptTokens: 10, MaxTokens: n(513)}, status: 400, param: "max_tokens",
			msg: []string{"at most 512"}},
		{name: "default fills the window, capped", req: Request{Model: "m", PromptTokens: 100}, maxOut: 512},
		{name: "default fills the window", req: Request{Model: "m", PromptTokens: 700}, maxOut: 300},
		{name: "empty prompt", req: Request{Model: "m", PromptParam: "prompt"}, status: 400, param: "prompt"},
		{name: "unknown model", req: Request{Model: "nope", PromptTokens: 1}, status: 404, param: "model"},
		{name: "refused", req: Request{Model: "r", PromptTokens: 1}, status: 503, msg: []string{"context_policy refuse"}},
		{name: "no workers", req: Request{Model: "idle", PromptTokens: 1}, status: 503, msg: []string{"no healthy worker"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := c.Admit(ctx, tc.req)
			if tc.status == 0 {
				if err != nil || d.MaxTokens != tc.maxOut {
					t.Fatalf("Admit = %+v, %v; want max tokens %d", d, err, tc.maxOut)
				}
				return
			}
			var e *api.Error
			if !errors.As(err, &e) || e.Status != tc.status || (tc.param != "" && e.Param != tc.param) {
				t.Fatalf("Admit error %v; want status %d param %q", err, tc.status, tc.param)
			}
			if tc.status == 400 && strings.Contains(tc.name, "long") || strings.Contains(tc.name, "too many") {
				if e.Code != api.CodeContextLength {
					t.Errorf("code %q, want %q", e.Code, api.CodeContextLength)
				}
			}
			for _, m := range tc.msg {
				if !strings.Contains(e.Message, m) {
					t.Errorf("message %q lacks %q", e.Message, m)
				}
			}
			// Nothing internal reaches an API customer: no worker ID, no
			// pool size (those are in State.Reason, for logs and admin).
			if tc.status == 503 && (strings.Contains(e.Message, "small") || strings.Contains(e.Message, "1000") || e.Headers.Get("Retry-After") == "") {
				t.Errorf("503 %q (retry-after %q) names internals or lacks retry-after", e.Message, e.Headers.Get("Retry-After"))
			}
		})
	}
}

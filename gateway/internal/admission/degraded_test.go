package admission

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/tenant"
)

// TestQuarantineLowersTheContext (I12): quarantined pages lower the
// effective context to what the pools can hold now; the best decode
// worker counts (routing skips the others), any prefill worker may be
// paired with it; a fully quarantined model is not served.
func TestQuarantineLowersTheContext(t *testing.T) {
	m := Model{Name: "m", ContextLength: 4096, Policy: config.ContextClamp, MaxOutputTokens: 4000}
	pd := func(prefillUnusable, decodeA, decodeB int64) []WorkerCapacity {
		return []WorkerCapacity{
			{ID: "p", Role: RolePrefill, CapacityTokens: 8192, UnusableTokens: prefillUnusable},
			{ID: "da", Role: RoleDecode, CapacityTokens: 8192, UnusableTokens: decodeA},
			{ID: "db", Role: RoleDecode, CapacityTokens: 8192, UnusableTokens: decodeB},
		}
	}
	for _, c := range []struct {
		name      string
		workers   []WorkerCapacity
		effective int64
		degraded  bool
		serving   bool
	}{
		{"nothing quarantined", pd(0, 0, 0), 4096, false, true},
		{"quarantine that still fits", pd(0, 4096, 0), 4096, false, true},
		{"both decode workers shrunk: the larger counts", pd(0, 6016, 7000), 2176, true, true},
		{"the prefill pool limits", pd(7192, 0, 0), 1000, true, true},
		{"both worker", []WorkerCapacity{{ID: "b", Role: RoleBoth, CapacityTokens: 8192, UnusableTokens: 6144}}, 2048, true, true},
		{"everything quarantined", pd(0, 8192, 8192), 0, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := Compute(m, tenant.ModelLimits{}, c.workers)
			if st.Effective != c.effective || st.Degraded != c.degraded || st.Serving != c.serving {
				t.Fatalf("effective %d degraded %v serving %v (%s); want %d %v %v", st.Effective, st.Degraded, st.Serving, st.Reason, c.effective, c.degraded, c.serving)
			}
			if c.degraded && !strings.Contains(st.Reason, "quarantined KV pages lower the effective context") {
				t.Errorf("reason %q does not say why", st.Reason)
			}
			if c.serving && st.MaxOutputTokens >= st.Effective {
				t.Errorf("max output %d not below the effective context %d", st.MaxOutputTokens, st.Effective)
			}
		})
	}
}

// TestRecheck: a request admitted before quarantine shrank the pools is
// rejected with the 400 Admit would give now (never left waiting).
func TestRecheck(t *testing.T) {
	c := NewController(Config{Models: []Model{{Name: "m", ContextLength: 4096, Policy: config.ContextClamp}}})
	c.SetWorkers("m", []WorkerCapacity{{ID: "b", Role: RoleBoth, CapacityTokens: 8192}})
	if err := c.Recheck("m", 3000, 1000, "prompt"); err != nil {
		t.Fatalf("fits: %v", err)
	}
	c.SetWorkers("m", []WorkerCapacity{{ID: "b", Role: RoleBoth, CapacityTokens: 8192, UnusableTokens: 6144}})
	err := c.Recheck("m", 3000, 1000, "prompt")
	var e *api.Error
	if !errors.As(err, &e) || e.Status != 400 || e.Code != api.CodeContextLength || e.Param != "prompt" ||
		!strings.Contains(e.Message, "2048") || !strings.Contains(e.Message, "3000") {
		t.Fatalf("Recheck after quarantine: %v", err)
	}
	if _, err := c.Admit(context.Background(), Request{Model: "m", PromptTokens: 3000, PromptParam: "prompt"}); !errors.As(err, &e) || e.Status != 400 {
		t.Fatalf("Admit after quarantine: %v", err)
	}
}

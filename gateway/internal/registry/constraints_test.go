package registry

import (
	"testing"
	"time"

	"github.com/warden-ai/warden/internal/constrain"
	"github.com/warden-ai/warden/internal/controlpb"
)

// TestConstraintLimits: the limits of a model are the smallest its
// healthy workers advertise, field by field; a worker that advertises
// none (or 0 for a field) counts with the defaults, as does a model
// without workers; a lost worker no longer counts; other models' workers
// never do.
func TestConstraintLimits(t *testing.T) {
	h := newHarness(t, nil)
	def := constrain.DefaultLimits
	if got := h.ConstraintLimits("tiny"); got != def {
		t.Fatalf("no worker: %+v, want the defaults", got)
	}
	h.register(t, info("plain", controlpb.Role_ROLE_BOTH, "h1", "tcp"), pool(8, 8))
	small := info("small", controlpb.Role_ROLE_PREFILL, "h1", "tcp")
	small.ConstraintLimits = &controlpb.ConstraintLimits{SpecBytes: 1000, Choices: 7}
	h.register(t, small, pool(8, 8))
	other := info("other", controlpb.Role_ROLE_BOTH, "h1", "tcp")
	other.Model, other.ConstraintLimits = "big", &controlpb.ConstraintLimits{Insts: 10}
	h.register(t, other, pool(8, 8))
	want := constrain.Limits{SpecBytes: 1000, RegexBytes: def.RegexBytes, Choices: 7, Insts: def.Insts}
	if got := h.ConstraintLimits("tiny"); got != want {
		t.Errorf("tiny: %+v, want %+v", got, want)
	}
	if got := h.ConstraintLimits("big"); got.Insts != 10 || got.SpecBytes != def.SpecBytes {
		t.Errorf("big: %+v", got)
	}
	h.clock.advance(7 * time.Second) // past the heartbeat timeout
	h.heartbeat(t, "plain", pool(8, 8))
	h.sweep()
	if got := h.ConstraintLimits("tiny"); got != def {
		t.Errorf("after the small worker was lost: %+v, want the defaults", got)
	}
}

package registry

import (
	"testing"

	"github.com/warden-ai/warden/internal/controlpb"
)

// TestPickScored: the score ranks first; equal scores fall back to Pick's
// order (most free pages).
func TestPickScored(t *testing.T) {
	h := newHarness(t, nil)
	h.register(t, info("b1", controlpb.Role_ROLE_BOTH, "h", "tcp"), pool(100, 90))
	h.register(t, info("b2", controlpb.Role_ROLE_BOTH, "h", "tcp"), pool(100, 40))
	var seen []Candidate
	rt, err := h.PickScored("tiny", 10, func(c Candidate) float64 {
		seen = append(seen, c)
		if c.ID == "b2" {
			return 1
		}
		return 0
	})
	if err != nil || rt.Decode.ID() != "b2" {
		t.Fatalf("PickScored = %+v, %v; want b2 (scored higher despite fewer free pages)", rt, err)
	}
	for _, c := range seen {
		if c.TotalPages != 100 || c.PageTokens != 16 || (c.ID == "b2" && c.FreePages != 40) {
			t.Fatalf("candidate %+v", c)
		}
	}
	rt, err = h.PickScored("tiny", 10, func(Candidate) float64 { return 0.5 })
	if err != nil || rt.Decode.ID() != "b1" {
		t.Fatalf("equal scores chose %+v, %v; want Pick's choice b1", rt, err)
	}
}

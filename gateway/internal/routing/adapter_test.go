package routing

import (
	"testing"

	"github.com/warden-ai/warden/gateway/internal/registry"
)

// TestAdapterFitAndScore: holders score 1 and always fit; others fit when
// the adapter memory they could free (capacity less the pinned share)
// holds the adapter; workers without adapter memory never fit; requests
// without an adapter fit everywhere and score 0.
func TestAdapterFitAndScore(t *testing.T) {
	const size = 100
	req := &Request{Model: "m", Adapter: "h", AdapterBytes: size}
	mem := func(capacity, used int64, loaded, pinned []string) registry.Candidate {
		return registry.Candidate{ID: "w", Adapters: registry.AdapterMemory{Reported: true, Capacity: capacity, Used: used, Loaded: loaded, Pinned: pinned}}
	}
	for _, c := range []struct {
		name  string
		cand  registry.Candidate
		fits  bool
		score float64
	}{
		{"holder, full", mem(100, 100, []string{"h"}, []string{"h"}), true, 1},
		{"empty", mem(100, 0, nil, nil), true, 0},
		{"too small", mem(99, 0, nil, nil), false, 0},
		{"full of unpinned", mem(100, 100, []string{"a", "b"}, nil), true, 0},
		{"full of pinned", mem(150, 100, []string{"a", "b"}, []string{"a", "b"}), false, 0},
		{"half pinned", mem(150, 100, []string{"a", "b"}, []string{"a"}), true, 0},
		{"no adapter memory", registry.Candidate{ID: "w"}, false, 0},
	} {
		if got := (AdapterFit{}).Admits(req, c.cand); got != c.fits {
			t.Errorf("%s: AdapterFit %v, want %v (available %d)", c.name, got, c.fits, c.cand.Adapters.Available())
		}
		if got := (AdapterScorer{}).Score(req, c.cand); got != c.score {
			t.Errorf("%s: AdapterScorer %v, want %v", c.name, got, c.score)
		}
		base := &Request{Model: "m"}
		if !(AdapterFit{}).Admits(base, c.cand) || (AdapterScorer{}).Score(base, c.cand) != 0 {
			t.Errorf("%s: a request without an adapter is refused or scored", c.name)
		}
	}
	if r := Default(NewIndex(16)); !r.Admits(req, mem(100, 0, nil, nil)) || r.Admits(req, mem(10, 0, nil, nil)) {
		t.Error("the default router does not filter on adapter memory")
	}
	if r := RoundRobinRouter(); r.Admits(req, mem(10, 0, nil, nil)) {
		t.Error("the round-robin router does not filter on adapter memory")
	}
}

package protomodel

import (
	"strings"
	"testing"
)

// cacheCoverage lists situations the faithful cache model must reach, so
// that its passing is not vacuous.
var cacheCoverage = []struct {
	name string
	f    func(s *CacheState) bool
}{
	{"a request reads a page another request's transfer sealed", func(s *CacheState) bool {
		for _, q := range s.Req {
			if q.Hit && q.Read && !q.Failed {
				return true
			}
		}
		return false
	}},
	{"two domains hold a sealed copy of the same prompt each", func(s *CacheState) bool {
		return s.Page[0].St == cpSealed && s.Page[1].St == cpSealed && s.Page[0].Tag != s.Page[1].Tag
	}},
	{"a killed writer's late bytes land in its quarantined page", func(s *CacheState) bool {
		for _, g := range s.Page {
			if g.St == cpQuar && g.Data == g.Owner && !g.Whole {
				return true
			}
		}
		return false
	}},
	{"a running request reads a page retired by the domain's eviction", func(s *CacheState) bool {
		for _, q := range s.Req {
			if q.Shared && q.Read && !q.Failed && q.Ph == crHeld && s.Page[q.Page].Retired {
				return true
			}
		}
		return false
	}},
	{"the other domain keeps its sealed page after the eviction", func(s *CacheState) bool {
		for _, g := range s.Page {
			if s.Evicted && g.St == cpSealed && g.Tag == 1 {
				return true
			}
		}
		return false
	}},
	{"a reader holds a shared page while the other page is quarantined", func(s *CacheState) bool {
		for _, q := range s.Req {
			if q.Ph == crHeld && q.Shared && s.Page[1-q.Page].St == cpQuar {
				return true
			}
		}
		return false
	}},
}

// cacheStepCoverage lists transitions the faithful model must take.
var cacheStepCoverage = []struct {
	name string
	act  string
	f    func(s *CacheState, a CacheStep) bool
}{
	{"an unreferenced sealed page is evicted for a reservation", "EvictReserve", func(s *CacheState, a CacheStep) bool { return true }},
	{"a sealed page is evicted while its domain has another reader waiting to reserve", "EvictReserve", func(s *CacheState, a CacheStep) bool {
		return s.Page[a.P].Tag == cacheDomain[a.R]^1
	}},
	{"the domain's eviction frees an unreferenced sealed page", "EvictDomain", func(s *CacheState, a CacheStep) bool {
		for _, g := range s.Page {
			if g.St == cpSealed && g.Tag == 0 && g.Refs == 0 {
				return true
			}
		}
		return false
	}},
	{"a request of the evicted domain that was running at the eviction finishes its transfer after it", "Verify", func(s *CacheState, a CacheStep) bool {
		return s.Evicted && cacheDomain[a.R] == 0
	}},
	{"quarantined pages of a writer whose death was confirmed are reclaimed", "Reclaim", func(s *CacheState, a CacheStep) bool {
		return s.Req[a.R].W == cwGone && s.Page[a.P].Data == int8(a.R) && !s.Page[a.P].Whole
	}},
	{"a reclaimed page is reserved again", "Reclaim", func(s *CacheState, a CacheStep) bool {
		for _, q := range s.Req {
			if q.Ph == crIdle {
				return true
			}
		}
		return false
	}},
}

func TestCacheModelHoldsInvariants(t *testing.T) {
	t.Parallel()
	m := &CacheModel{}
	reached := make([]bool, len(cacheCoverage))
	check := func(s CacheState, quiescent bool) *Violation {
		for i, c := range cacheCoverage {
			reached[i] = reached[i] || c.f(&s)
		}
		return m.Check(s, quiescent)
	}
	took := make([]bool, len(cacheStepCoverage))
	next := func(s CacheState, yield func(CacheStep, CacheState)) {
		m.Next(s, func(a CacheStep, n CacheState) {
			for i, c := range cacheStepCoverage {
				took[i] = took[i] || (a.Act == c.act && c.f(&s, a))
			}
			yield(a, n)
		})
	}
	res, err := Explore(m.Init(), next, check, CacheStep.String, limit)
	if err != nil {
		t.Fatal(err)
	}
	if res.Violation != nil {
		t.Fatalf("%v\ntrace (%d steps):\n  %s", res.Violation, len(res.Trace), strings.Join(res.Trace, "\n  "))
	}
	for i, c := range cacheCoverage {
		if !reached[i] {
			t.Errorf("never reached: %s", c.name)
		}
	}
	for i, c := range cacheStepCoverage {
		if !took[i] {
			t.Errorf("never taken: %s", c.name)
		}
	}
	if res.Quiescent == 0 {
		t.Error("no quiescent state: the quiescence checks never ran")
	}
	t.Logf("cache model (%d pages, %d requests): %d states, %d transitions, %d quiescent, depth %d",
		CachePages, CacheReqs, res.States, res.Transitions, res.Quiescent, res.Depth)
}

// Each cache mutation must be caught, breaking the expected invariant.
func TestCacheMutationsAreCaught(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		v    CacheVariant
		want string
	}{
		{"SealBeforeVerify", CacheVariant{SealBeforeVerify: true}, "I3"},
		{"EvictReferenced", CacheVariant{EvictReferenced: true}, "identity"},
		{"TagWithoutDomain", CacheVariant{TagWithoutDomain: true}, "I3"},
		{"PushHeldPages", CacheVariant{PushHeldPages: true}, "I5"},
		{"ReclaimUnconfirmed", CacheVariant{ReclaimUnconfirmed: true}, "I5"},
		{"NoReclaim", CacheVariant{NoReclaim: true}, "quiescence"},
		{"EvictIdleOnly", CacheVariant{EvictIdleOnly: true}, "I8"},
		{"CacheRetired", CacheVariant{CacheRetired: true}, "I8"},
		{"NoTombstone", CacheVariant{NoTombstone: true}, "I8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &CacheModel{V: tc.v}
			res, err := Explore(m.Init(), m.Next, m.Check, CacheStep.String, limit)
			if err != nil {
				t.Fatal(err)
			}
			if res.Violation == nil {
				t.Fatalf("no counterexample in %d states", res.States)
			}
			if res.Violation.Invariant != tc.want || len(res.Trace) == 0 {
				t.Fatalf("got %v after %d steps, want a trace breaking %s\n  %s", res.Violation, len(res.Trace), tc.want, strings.Join(res.Trace, "\n  "))
			}
			t.Logf("%v: %d-step trace (%d states):\n  %s", res.Violation, len(res.Trace), res.States, strings.Join(res.Trace, "\n  "))
		})
	}
}

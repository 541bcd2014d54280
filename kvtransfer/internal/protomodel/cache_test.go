package protomodel

import (
	"strings"
	"testing"
)

// cacheCover is a situation the faithful cache model must reach, so that its
// passing is not vacuous.
type cacheCover struct {
	name string
	f    func(s *CacheState) bool
}

// cacheStepCover is a transition the faithful cache model must take.
type cacheStepCover struct {
	name string
	act  string
	f    func(s *CacheState, a CacheStep) bool
}

// cacheCoverage lists what the Domains configuration must reach.
var cacheCoverage = []cacheCover{
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

// cacheStepCoverage lists transitions the Domains configuration must take.
var cacheStepCoverage = []cacheStepCover{
	{"an unreferenced sealed page is evicted for a reservation", "EvictReserve", func(s *CacheState, a CacheStep) bool { return true }},
	{"a sealed page is evicted while its domain has another reader waiting to reserve", "EvictReserve", func(s *CacheState, a CacheStep) bool {
		return s.Page[a.P].Tag == Domains.Domain[a.R]^1
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
		return s.Evicted && Domains.Domain[a.R] == 0
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

// adapterCoverage lists what the Adapters configuration must reach.
var adapterCoverage = []cacheCover{
	{"adapters 0 and 1 hold a sealed copy of the same prompt each in one domain", func(s *CacheState) bool {
		return s.Page[0].St == cpSealed && s.Page[1].St == cpSealed && s.Page[0].Tag == s.Page[1].Tag && s.Page[0].TagAd != s.Page[1].TagAd
	}},
	{"a request reads a page another request of its adapter sealed", func(s *CacheState) bool {
		for _, q := range s.Req {
			if q.Hit && q.Read && !q.Failed {
				return true
			}
		}
		return false
	}},
	{"a request under adapter 1 reads its own copy while adapter 0's is sealed", func(s *CacheState) bool {
		q := s.Req[2]
		return q.Read && !q.Failed && q.Ph == crHeld && s.Page[1-q.Page].St == cpSealed && s.Page[1-q.Page].TagAd == 0
	}},
}

// adapterStepCoverage lists transitions the Adapters configuration must
// take.
var adapterStepCoverage = []cacheStepCover{
	{"a prefill that computed under another adapter is refused at the handshake", "ReserveMisrouted", func(s *CacheState, a CacheStep) bool { return true }},
	{"the refused request is aborted, its page freed", "Abort", func(s *CacheState, a CacheStep) bool { return s.Req[a.R].Misrouted }},
}

func TestCacheModelHoldsInvariants(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cfg   CacheConfig
		cover []cacheCover
		steps []cacheStepCover
	}{
		{"domains", Domains, cacheCoverage, cacheStepCoverage},
		{"adapters", Adapters, adapterCoverage, adapterStepCoverage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			exploreCovered(t, &CacheModel{Cfg: tc.cfg}, tc.cover, tc.steps)
		})
	}
}

// exploreCovered explores the faithful model m and fails on a violation
// or on a situation of cover or a transition of steps it never met.
func exploreCovered(t *testing.T, m *CacheModel, cover []cacheCover, steps []cacheStepCover) {
	reached := make([]bool, len(cover))
	check := func(s CacheState, quiescent bool) *Violation {
		for i, c := range cover {
			reached[i] = reached[i] || c.f(&s)
		}
		return m.Check(s, quiescent)
	}
	took := make([]bool, len(steps))
	next := func(s CacheState, yield func(CacheStep, CacheState)) {
		m.Next(s, func(a CacheStep, n CacheState) {
			for i, c := range steps {
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
	for i, c := range cover {
		if !reached[i] {
			t.Errorf("never reached: %s", c.name)
		}
	}
	for i, c := range steps {
		if !took[i] {
			t.Errorf("never taken: %s", c.name)
		}
	}
	if res.Quiescent == 0 {
		t.Error("no quiescent state: the quiescence checks never ran")
	}
	t.Logf("cache model (%d pages, %d requests %+v): %d states, %d transitions, %d quiescent, depth %d",
		CachePages, CacheReqs, m.Cfg, res.States, res.Transitions, res.Quiescent, res.Depth)
}

// Each cache mutation must be caught, breaking the expected invariant.
func TestCacheMutationsAreCaught(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		v    CacheVariant
		cfg  CacheConfig
		want string
	}{
		{"SealBeforeVerify", CacheVariant{SealBeforeVerify: true}, Domains, "I3"},
		{"EvictReferenced", CacheVariant{EvictReferenced: true}, Domains, "identity"},
		{"TagWithoutDomain", CacheVariant{TagWithoutDomain: true}, Domains, "I3"},
		{"PushHeldPages", CacheVariant{PushHeldPages: true}, Domains, "I5"},
		{"ReclaimUnconfirmed", CacheVariant{ReclaimUnconfirmed: true}, Domains, "I5"},
		{"NoReclaim", CacheVariant{NoReclaim: true}, Domains, "quiescence"},
		{"EvictIdleOnly", CacheVariant{EvictIdleOnly: true}, Domains, "I8"},
		{"CacheRetired", CacheVariant{CacheRetired: true}, Domains, "I8"},
		{"NoTombstone", CacheVariant{NoTombstone: true}, Domains, "I8"},
		{"TagWithoutAdapter", CacheVariant{TagWithoutAdapter: true}, Adapters, "I8a"},
		{"TransferWithoutAdapter", CacheVariant{TransferWithoutAdapter: true}, Adapters, "I8a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &CacheModel{V: tc.v, Cfg: tc.cfg}
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

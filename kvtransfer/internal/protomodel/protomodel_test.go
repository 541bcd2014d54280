package protomodel

import (
	"strings"
	"testing"
)

// limit bounds every exploration; the faithful model stays well below it.
const limit = 500_000

// faithful is the model the tests check: 3 pages; A needs 2 (a transfer
// can complete short), B needs 1, so the requests run side by side, either
// may reuse a page the other held, and B can run while A's pages are
// quarantined.
func faithful() *Model { return &Model{Pages: 3, Need: [NumReqs]int{2, 1}} }

// coverage lists situations the faithful model must reach, so that its
// passing is not vacuous.
var coverage = []struct {
	name string
	f    func(m *Model, s *State) bool
}{
	{"both requests completed", func(m *Model, s *State) bool {
		return s.Req[0].Term == termCompleted && s.Req[1].Term == termCompleted
	}},
	{"both requests hold pages at once", func(m *Model, s *State) bool {
		return s.Req[0].Hold != holdNone && s.Req[1].Hold != holdNone
	}},
	{"B reserved after A released (Reserve may pick any free page)", func(m *Model, s *State) bool {
		return s.Req[0].Entry == entGone && s.Req[0].Hold == holdNone && s.Req[1].Entry == entReserved
	}},
	{"abort during decode", func(m *Model, s *State) bool {
		return s.Req[0].Cancelled && s.Req[0].Entry == entDecoding
	}},
	{"a short COMPLETE reached verification", func(m *Model, s *State) bool {
		q := &s.Req[0]
		return q.Sess == sessVerifying && int(q.WPage) < m.Need[0]
	}},
	{"a drain ack released held pages", func(m *Model, s *State) bool { return s.Req[0].DR == drReleased }},
	{"the other request runs while a stalled writer's pages are quarantined", func(m *Model, s *State) bool {
		return s.Req[0].W == wOpen && s.Req[0].Hold == holdQuarantined && s.Req[1].W == wOpen
	}},
	{"a frame error ended the session while the writer could still write", func(m *Model, s *State) bool {
		return s.Req[0].Sess == sessEnded && s.Req[0].W == wOpen && s.Req[0].Rec == recPresent
	}},
}

// stepCoverage lists transitions the faithful model must take: the
// action and what must hold in the state it is taken from.
var stepCoverage = []struct {
	name string
	act  string
	f    func(s *State, q *Req) bool
}{
	{"the relay acked a release held for a drain ack that can no longer come", "RelayDrain", func(s *State, q *Req) bool {
		return q.DR == drHeld && q.Sess == sessEnded
	}},
	{"the relay released quarantined pages (late drain)", "RelayDrain", func(s *State, q *Req) bool {
		return q.DR == drQuarantined && q.Hold == holdQuarantined
	}},
	{"the relay marked a record drained before decode's teardown", "RelayDrain", func(s *State, q *Req) bool {
		return q.Rec == recPresent && q.Entry < entGone
	}},
}

func TestFaithfulModelHoldsInvariants(t *testing.T) {
	t.Parallel() // independent explorations: use both cores under -race
	m := faithful()
	reached := make([]bool, len(coverage))
	check := func(s State, quiescent bool) *Violation {
		for i, c := range coverage {
			reached[i] = reached[i] || c.f(m, &s)
		}
		return m.Check(s, quiescent)
	}
	took := make([]bool, len(stepCoverage))
	next := func(s State, yield func(Step, State)) {
		m.Next(s, func(a Step, n State) {
			for i, c := range stepCoverage {
				took[i] = took[i] || (a.Act == c.act && c.f(&s, &s.Req[a.R]))
			}
			yield(a, n)
		})
	}
	res, err := Explore(m.Init(), next, check, Step.String, limit)
	if err != nil {
		t.Fatal(err)
	}
	if res.Violation != nil {
		t.Fatalf("%v\ntrace (%d steps):\n  %s", res.Violation, len(res.Trace), strings.Join(res.Trace, "\n  "))
	}
	for i, c := range coverage {
		if !reached[i] {
			t.Errorf("never reached: %s", c.name)
		}
	}
	for i, c := range stepCoverage {
		if !took[i] {
			t.Errorf("never taken: %s", c.name)
		}
	}
	if res.Quiescent == 0 {
		t.Error("no quiescent state: the quiescence checks never ran")
	}
	t.Logf("faithful model (%d pages, %v pages per request): %d states, %d transitions, %d quiescent, depth %d",
		m.Pages, m.Need, res.States, res.Transitions, res.Quiescent, res.Depth)
}

// Each mutation switches one rule to a plausible bug; the checker must
// find a counterexample that breaks the expected invariant.
func TestMutationsAreCaught(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		v    Variant
		want string
	}{
		{"ReleaseWithoutDrain", Variant{ReleaseWithoutDrain: true}, "I5"},
		{"TrustComplete", Variant{TrustComplete: true}, "I4"},
		{"ReleaseOnTimeout", Variant{ReleaseOnTimeout: true}, "I5"},
		{"AdmitWithoutLookup", Variant{AdmitWithoutLookup: true}, "I5"},
		{"LoseHold", Variant{LoseHold: true}, "quiescence"},
		{"RelayIgnoresCancel", Variant{RelayIgnoresCancel: true}, "I6"},
		{"RelayBeforeDrain", Variant{RelayBeforeDrain: true}, "I5"},
		{"NoRelay", Variant{NoRelay: true}, "quiescence"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := faithful()
			m.V = tc.v
			res, err := Explore(m.Init(), m.Next, m.Check, Step.String, limit)
			if err != nil {
				t.Fatal(err)
			}
			if res.Violation == nil {
				t.Fatalf("no counterexample in %d states", res.States)
			}
			if res.Violation.Invariant != tc.want || len(res.Trace) == 0 {
				t.Fatalf("got %v after %d steps, want a trace breaking %s", res.Violation, len(res.Trace), tc.want)
			}
			t.Logf("%v: %d-step trace (%d states):\n  %s", res.Violation, len(res.Trace), res.States, strings.Join(res.Trace, "\n  "))
		})
	}
}

// The explorer returns a shortest trace: on a two-state toggle with a bad
// state three steps away it must report exactly those three steps.
func TestExploreShortestTrace(t *testing.T) {
	next := func(s int, yield func(string, int)) {
		if s < 5 {
			yield("inc", s+1)
			yield("jump", s+3)
		}
	}
	check := func(s int, _ bool) *Violation {
		if s == 4 {
			return &Violation{Invariant: "four"}
		}
		return nil
	}
	res, err := Explore(0, next, check, func(a string) string { return a }, 100)
	if err != nil {
		t.Fatal(err)
	}
	if res.Violation == nil || strings.Join(res.Trace, ",") != "inc,jump" {
		t.Fatalf("got %v with trace %v, want four via inc,jump", res.Violation, res.Trace)
	}
}

// State.canon must not change what the model can do: for every reachable
// state s and every raw successor n (before canon), n and canon(n) must
// break the same invariant (or none) and reach the same canonical states
// in one step, up to steps that only lead back to canon(n) (an Abort RPC
// answered "not found"). By induction the reduced exploration then sees
// what the unreduced one would. Checked on a smaller pool (each state is
// expanded three times), faithful and with every mutation at once.
func TestCanonIsSound(t *testing.T) {
	t.Parallel()
	all := Variant{true, true, true, true, true, true, true, true, true}
	for _, m := range []*Model{
		{Pages: 2, Need: [NumReqs]int{2, 1}},
		{Pages: 1, Need: [NumReqs]int{1, 1}, V: all},
	} {
		v := m.V
		succ := func(s, self State) map[State]bool {
			out := map[State]bool{}
			m.Next(s, func(_ Step, n State) {
				if n != self {
					out[n] = true
				}
			})
			return out
		}
		verdict := func(s State, quiescent bool) string {
			if v := m.Check(s, quiescent); v != nil {
				return v.Invariant
			}
			return "ok"
		}
		failures := 0
		check := func(s State, _ bool) *Violation {
			for r := range NumReqs {
				m.next(s, r, func(a Step, raw State) {
					c := raw
					c.canon()
					sr, sc := succ(raw, c), succ(c, c)
					same := len(sr) == len(sc) && verdict(raw, len(sr) == 0) == verdict(c, len(sc) == 0)
					for k := range sr {
						same = same && sc[k]
					}
					if !same && failures < 3 {
						failures++
						t.Errorf("variant %+v: after %v, canon changes behaviour:\n raw   %+v\n canon %+v", v, a, raw, c)
					}
				})
			}
			return nil
		}
		res, err := Explore(m.Init(), m.Next, check, Step.String, limit)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("variant %+v: canon checked in %d states", v, res.States)
	}
}

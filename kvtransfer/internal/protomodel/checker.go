package protomodel

import (
	"fmt"
	"slices"
)

// Violation is a broken invariant: its name ("I5", "I4", "I3", "I6",
// "quiescence") and what was wrong.
type Violation struct {
	Invariant string
	Detail    string
}

func (v *Violation) Error() string { return v.Invariant + ": " + v.Detail }

// Result is the outcome of an exploration.
type Result struct {
	// States is the number of distinct reachable states explored;
	// Transitions the number of transitions taken; Quiescent the number of
	// states with no enabled action; Depth the length of the longest
	// shortest path from the initial state (BFS levels - 1).
	States, Transitions, Quiescent, Depth int
	// Violation is the first invariant found broken (nil: none), and Trace
	// the actions of a shortest path from the initial state to a state
	// breaking it.
	Violation *Violation
	Trace     []string
}

// Explore visits every state reachable from init, breadth first, and
// checks check in each (with quiescent set when next offers no action).
// It stops at the first violation and returns a shortest trace to it, or
// with an error once more than limit states were found (the bound is not
// what the model promised).
func Explore[S comparable, A any](init S, next func(S, func(A, S)), check func(S, bool) *Violation, name func(A) string, limit int) (Result, error) {
	type node struct {
		s      S
		parent int32
		depth  int32
		via    A
	}
	// Nodes live in fixed-size blocks, so growing never copies them.
	const block = 1 << 12
	var blocks [][]node
	n := 0
	add := func(x node) {
		if n%block == 0 {
			blocks = append(blocks, make([]node, 0, block))
		}
		blocks[n/block] = append(blocks[n/block], x)
		n++
	}
	at := func(i int) *node { return &blocks[i/block][i%block] }
	seen := make(map[S]struct{}, block)
	seen[init] = struct{}{}
	add(node{s: init, parent: -1})
	var res Result
	for i := 0; i < n; i++ {
		cur := at(i)
		succ := 0
		next(cur.s, func(a A, t S) {
			succ++
			res.Transitions++
			if _, ok := seen[t]; ok {
				return
			}
			seen[t] = struct{}{}
			add(node{s: t, parent: int32(i), depth: cur.depth + 1, via: a})
		})
		res.Depth = max(res.Depth, int(cur.depth))
		if succ == 0 {
			res.Quiescent++
		}
		if v := check(cur.s, succ == 0); v != nil {
			res.States = i + 1
			res.Violation = v
			for j := i; at(j).parent >= 0; j = int(at(j).parent) {
				res.Trace = append(res.Trace, name(at(j).via))
			}
			slices.Reverse(res.Trace)
			return res, nil
		}
		if n > limit {
			return res, fmt.Errorf("protomodel: more than %d states", limit)
		}
	}
	res.States = n
	return res, nil
}

// Check checks the invariants in s; quiescent says no action is enabled.
func (m *Model) Check(s State, quiescent bool) *Violation {
	for p := range m.Pages {
		o := s.Page[p].Owner
		for w := range NumReqs {
			// I5: no page is held for an owner while another request's
			// writer may still land a write in it.
			if o >= 0 && int(o) != w && s.mayWrite(w, m.Need[w], int8(p)) {
				return &Violation{"I5", fmt.Sprintf("page %d is held by %s while %s's writer may still write it", p, reqName(int(o)), reqName(w))}
			}
		}
	}
	for r := range NumReqs {
		q := &s.Req[r]
		switch {
		case q.BadAccept:
			return &Violation{"I4", fmt.Sprintf("decode accepted %s's transfer with a page not written whole by %s's writer", reqName(r), reqName(r))}
		case q.BadRead:
			return &Violation{"I3", fmt.Sprintf("%s decoded from a page not written whole by its own writer", reqName(r))}
		case q.RelayAfterCancel:
			return &Violation{"I6", fmt.Sprintf("%s relayed a token after decode was told of its abort", reqName(r))}
		case q.Terms > 1:
			return &Violation{"I6", fmt.Sprintf("%s reached %d terminal states", reqName(r), q.Terms)}
		case quiescent && q.Terms != 1:
			return &Violation{"quiescence", fmt.Sprintf("%s is stuck: no action enabled and not terminal", reqName(r))}
		}
	}
	if quiescent {
		for p := range m.Pages {
			o := s.Page[p].Owner
			switch {
			case o < 0:
			case s.Req[o].Hold != holdQuarantined:
				return &Violation{"quiescence", fmt.Sprintf("page %d leaked: still held by %s with no action enabled", p, reqName(int(o)))}
			case s.Req[o].W != wDead:
				// Quarantine is for writers that never acknowledge: a
				// writer that drained must get its pages back.
				return &Violation{"quiescence", fmt.Sprintf("page %d stays quarantined though %s's writer drained (its drain never reached decode)", p, reqName(int(o)))}
			}
		}
	}
	return nil
}

// mayWrite reports whether w's writer may still land a write in page p: it
// was accepted, is alive and has not drained or completed, and has not yet
// sealed p (a sealed page is never written again by its transfer).
func (s *State) mayWrite(w, need int, p int8) bool {
	q := &s.Req[w]
	if q.W != wOpen {
		return false
	}
	for i := int(q.WPage); i < need; i++ {
		if q.Pages[i] == p {
			return true
		}
	}
	return false
}

// ownData reports the ground truth I3/I4 demand: every page of r is held
// by r at the ticket's epoch and carries data and header written by r's
// own writer.
func (s *State) ownData(r, need int) bool {
	for _, p := range s.Req[r].Pages[:need] {
		g := s.Page[p]
		if g.Owner != int8(r) || s.Req[r].HoldEpoch != epoch || g.Data != int8(r) || g.Header != int8(r) {
			return false
		}
	}
	return true
}

// terminal records a terminal state for r unless it has one (first wins).
func (s *State) terminal(r int, t uint8) {
	if q := &s.Req[r]; q.Term == termNone {
		q.Term = t
		q.Terms++
	}
}

// freeList lists the free pages in order.
func (s *State) freeList(n int) []int8 {
	var free []int8
	for p := range n {
		if s.Page[p].Owner < 0 {
			free = append(free, int8(p))
		}
	}
	return free
}

// Pool (worker/kvpool). Pages of a holding are r's ticket pages.

// reserve mirrors Pool.Reserve (worker.reserve records the entry).
func (s *State) reserve(r int) {
	q := &s.Req[r]
	for _, p := range q.Pages {
		if p >= 0 {
			s.Page[p].Owner, s.Page[p].Written = int8(r), false
		}
	}
	q.Hold, q.HoldEpoch, q.Entry, q.GW = holdReserved, epoch, entReserved, gwReserved
}

// fence mirrors kvpool's fence (CheckWrite): page p is held by r at
// epoch e, Reserved or InUse.
func (s *State) fence(r int, e uint8, p int8) bool {
	q := &s.Req[r]
	return s.Page[p].Owner == int8(r) && q.HoldEpoch == e && (q.Hold == holdReserved || q.Hold == holdInUse)
}

// verify mirrors Pool.Verify for r's whole prompt: owner, epoch, state and
// Written of every page.
func (s *State) verify(r, need int) bool {
	for _, p := range s.Req[r].Pages[:need] {
		if !s.fence(r, epoch, p) || !s.Page[p].Written {
			return false
		}
	}
	return true
}

// bumpEpoch mirrors Pool.BumpEpoch of (r, epoch): retag, reset Written.
func (s *State) bumpEpoch(r int) bool {
	q := &s.Req[r]
	if q.HoldEpoch != epoch || (q.Hold != holdReserved && q.Hold != holdInUse) {
		return false
	}
	q.HoldEpoch++
	for _, p := range q.Pages {
		if p >= 0 {
			s.Page[p].Written = false
		}
	}
	return true
}

// release mirrors Pool.Release (quarantined: false) and, with
// quarantined, Pool.ReleaseQuarantined, of owner (r, e).
func (s *State) releaseIn(r int, e uint8, quarantined bool) bool {
	q := &s.Req[r]
	if q.Hold == holdNone || q.HoldEpoch != e || (q.Hold == holdQuarantined) != quarantined {
		return false
	}
	for _, p := range q.Pages {
		if p >= 0 {
			s.Page[p].Owner, s.Page[p].Written = -1, false
		}
	}
	q.Hold = holdNone
	return true
}

func (s *State) release(r int, e uint8) { s.releaseIn(r, e, false) }

// freePages mirrors worker.freePages, the release callback of
// Receiver.Abort: Release, or ReleaseQuarantined after a late drain.
func (s *State) freePages(r int) {
	e := s.Req[r].RelEpoch
	if !s.releaseIn(r, e, false) {
		s.releaseIn(r, e, true)
	}
}

// Receiver (kvtransfer/receiver_*.go, release.go).

// live mirrors Sink.Lookup: the ticket's entry is reserved or waiting, not
// torn down and its transfer not decided.
func (s *State) live(r int) bool {
	q := &s.Req[r]
	return (q.Entry == entReserved || q.Entry == entWaiting) && !q.Completed && !q.Failed
}

// settles mirrors settleLocked: the entry is still in byTransfer.
func (s *State) settles(r int) bool { return s.live(r) }

// fail mirrors session.fail → Sink.Fail (the handler sees transferErr).
func (s *State) fail(r int) {
	if s.settles(r) {
		s.Req[r].Failed = true
	}
}

// markDrained mirrors session.markDrained → DeferredRelease.Ack.
func (s *State) markDrained(r int) {
	q := &s.Req[r]
	q.Drained = true
	if q.Held && (q.DR == drHeld || q.DR == drQuarantined) {
		q.DR = drReleased
		s.freePages(r)
	}
}

// writerDrained mirrors Receiver.WriterDrained: the record of the
// transfer, if any, is marked drained (a later Abort releases at once) and
// a held release, quarantined or not, is acked (DeferredRelease.Ack).
func (s *State) writerDrained(r int) {
	q := &s.Req[r]
	if q.Rec == recPresent {
		q.Drained = true
	}
	if q.DR == drHeld || q.DR == drQuarantined {
		q.DR = drReleased
		s.freePages(r)
	}
}

// endSession mirrors the end of serveOne: done, and the record forgotten
// when nothing is left to wait for.
func (s *State) endSession(r int) {
	q := &s.Req[r]
	q.Sess = sessEnded
	if q.Drained || q.Held {
		q.Rec = recDeleted
	}
}

// verifySHM mirrors verifySHM (with the token count check of complete):
// per page the fence, the header (transfer, epoch, owner tag, whole,
// sealed), COMPLETE's checksum and the data's checksum.
func (s *State) verifySHM(r, need int, trust bool) bool {
	q := &s.Req[r]
	for i, p := range q.Pages[:need] {
		if !s.fence(r, epoch, p) {
			return false
		}
		if trust {
			continue
		}
		g := s.Page[p]
		if g.Header != int8(r) || i >= int(q.WPage) || g.Data != int8(r) {
			return false
		}
	}
	return true
}

// receiverAbort mirrors Receiver.Abort with worker.freePages and
// worker.quarantine as callbacks.
func (s *State) receiverAbort(r int, v Variant) {
	q := &s.Req[r]
	if q.Rec != recPresent {
		s.freePages(r) // never admitted (or forgotten): Immediate
		return
	}
	if q.Drained || v.ReleaseWithoutDrain {
		if q.Sess == sessEnded {
			q.Rec = recDeleted
		}
		s.freePages(r) // Immediate
		return
	}
	q.Held = true
	if !v.LoseHold {
		q.DR = drHeld // DeferredRelease.Hold; ABORT goes to the sender
	}
	if q.Sess == sessEnded {
		q.Rec = recDeleted // no ABORT to send: nobody listens
	}
}

// canon maps s to a representative of the states that behave the same,
// which keeps the state space small. A page's content matters only while
// it names the page's owner (a request reserves once, so no other request
// will compare against it), and a field no rule reads again is reset: each
// reset below lists the guard that stops every later read.
func (s *State) canon() {
	for p := range s.Page {
		g := &s.Page[p]
		if g.Data != g.Owner {
			g.Data = -1
		}
		if g.Header != g.Owner {
			g.Header = -1
		}
	}
	for r := range s.Req {
		q := &s.Req[r]
		session := q.Sess == sessRunning || q.Sess == sessVerifying
		if q.Term != termNone { // gateway rules need Term == termNone
			q.GW = gwAdmitted
		}
		if q.Entry >= entClaimed { // handler rules need entWaiting/entDecoding
			q.Cancelled, q.Token, q.Failed, q.AbortToDecode = false, false, false, false
		}
		if q.Entry == entGone { // Release needs entFenced
			q.Completed = false
		}
		if q.Hold == holdNone { // pool operations need a holding
			q.HoldEpoch, q.RelEpoch = 0, 0
			if q.Entry == entGone && (q.W == wIdle || q.W >= wCompleted) && !session {
				q.Pages = [MaxNeed]int8{-1, -1} // no writer, verifier or reader left
			}
		}
		// The relay (RelayDrain) needs a stream that may still answer
		// drained and acts only on a record or a held or quarantined
		// release; once the record is gone and no release is held (or the
		// request completed: no fan-out) it is a no-op now and forever, as
		// good as sent.
		stream := q.W == wOpen || q.W == wCompleted || q.W == wDrained
		useful := q.Term != termCompleted && (q.Rec == recPresent || q.DR == drHeld || q.DR == drQuarantined)
		if stream && !useful {
			q.Relayed = true
		}
		pending := stream && !q.Relayed
		if !session { // session rules need a running or verifying session
			q.Held = false
			if q.W >= wCompleted {
				// Past the session only the relay reads the writer, and
				// COMPLETE sent and DRAIN_ACK sent enable it alike.
				if pending {
					q.W = wDrained
				} else {
					q.W = wDead
				}
			}
			if q.DR != drHeld && !(q.DR == drQuarantined && pending) {
				q.DR = drNone
			}
		}
		if q.W != wOpen && q.W != wCompleted && q.W != wDrained { // relayEnabled needs a stream
			q.Relayed = false
		}
		if q.Rec != recPresent { // Receiver.Abort reads Drained of a record
			q.Rec, q.Drained = recNone, false
		}
		if q.W != wOpen && !session { // writes, COMPLETE and verifySHM
			q.WPage = 0
		}
	}
}

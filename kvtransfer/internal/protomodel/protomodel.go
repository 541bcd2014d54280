package protomodel

import "fmt"

// Bounds of the state arrays.
const (
	NumReqs  = 2
	MaxPages = 3
	MaxNeed  = 2
	// epoch is every ticket's epoch (the gateway's one attempt per
	// request); Pool.BumpEpoch fences a holding to epoch+1.
	epoch = 1
)

// Variant switches one rule to a bug; the zero Variant is the faithful
// model. Each field is read by exactly one rule.
type Variant struct {
	// ReleaseWithoutDrain: Receiver.Abort frees an open shm transfer's
	// pages at once, as for tcp, instead of holding them for the drain ack.
	ReleaseWithoutDrain bool
	// TrustComplete: verifySHM accepts COMPLETE without checking the page
	// headers (transfer, epoch, owner tag, seal) and checksums.
	TrustComplete bool
	// ReleaseOnTimeout: the drain timeout frees (reuses) the pages instead
	// of quarantining them.
	ReleaseOnTimeout bool
	// AdmitWithoutLookup: Receiver.admit registers an authenticated
	// transfer without asking Sink.Lookup again under the receiver's lock.
	AdmitWithoutLookup bool
	// SkipFence: releaseEntry does not BumpEpoch before releasing.
	SkipFence bool
	// LoseHold: DeferredRelease.Hold fails in Receiver.Abort (logged): the
	// pages are neither released nor quarantined.
	LoseHold bool
	// RelayIgnoresCancel: relay sends tokens without checking ctx.Err.
	RelayIgnoresCancel bool
	// RelayBeforeDrain: the gateway relays the writer's drain to decode
	// as soon as the abort fan-out starts, without waiting for prefill's
	// Abort to answer drained.
	RelayBeforeDrain bool
	// NoRelay: the gateway never relays prefill's drain (the protocol
	// before the relay): a drain ack lost with its connection leaves the
	// pages quarantined.
	NoRelay bool
}

// Model is the protocol with its bounds.
type Model struct {
	Pages int          // decode pool size, 1..MaxPages
	Need  [NumReqs]int // pages per request, 1..MaxNeed
	V     Variant
}

// Gateway lifecycle phases and terminal states (gateway/internal/lifecycle;
// decoding is Entry == entDecoding).
const gwAdmitted, gwReserved, gwDispatched uint8 = 0, 1, 2
const termNone, termCompleted, termAborted, termFailed uint8 = 0, 1, 2, 3

// Decode request-table entry phases (worker/table.go): reserved without a
// handler, the Generate handler waiting for the transfer, decoding; then
// teardown: claimed (claimLocked), fenced (BumpEpoch), gone (released or
// handed to Receiver.Abort).
const entNone, entReserved, entWaiting, entDecoding, entClaimed, entFenced, entGone uint8 = 0, 1, 2, 3, 4, 5, 6

// Pool holding states (worker/kvpool).
const holdNone, holdReserved, holdInUse, holdQuarantined uint8 = 0, 1, 2, 3

// Receiver record (rtransfer in Receiver.transfers), session (verifying:
// COMPLETE read, verdict pending) and DeferredRelease hold states.
const recNone, recPresent, recDeleted uint8 = 0, 1, 2
const sessNone, sessRunning, sessVerifying, sessEnded uint8 = 0, 1, 2, 3
const drNone, drHeld, drQuarantined, drReleased uint8 = 0, 1, 2, 3

// Prefill writer (Sender, Stream) states: no ticket; ticket; handshake
// proved (decode's admit pending); accepted (may write pages); COMPLETE
// sent (writes nothing more); DRAIN_ACK sent; refused (wrote nothing);
// process dead.
const wIdle, wTicket, wAuthed, wOpen, wCompleted, wDrained, wRefused, wDead uint8 = 0, 1, 2, 3, 4, 5, 6, 7

// Page is one decode pool page: pool metadata and shm content.
type Page struct {
	Owner   int8 // pool: request holding the page, -1 free
	Written bool // pool: Written covers the slots its owner reads
	Data    int8 // shm: request whose writer's data is in the page, -1 other
	Header  int8 // shm: request whose header and seal it carries, -1 other
}

// Req is one request as the gateway, decode and its prefill writer see it.
type Req struct {
	// Gateway. Terms counts terminal states recorded (a ghost for I6).
	GW, Term, Terms uint8
	AbortToDecode   bool // the gateway's Abort RPC to decode is in flight
	// Decode: request table entry and pool holding. RelEpoch is the owner
	// epoch teardown releases with (fenced or not).
	Entry                        uint8
	Cancelled, Completed, Failed bool // handler cancelled; transfer verdict
	Token                        bool // the engine produced its token
	Pages                        [MaxNeed]int8
	Hold, HoldEpoch, RelEpoch    uint8
	// Decode: receiver record, session, deferred release; rtransfer's
	// drained and held (done is Sess == sessEnded).
	Rec, Sess, DR uint8
	Drained, Held bool
	// Prefill writer: state, and pages written (data, header, seal).
	W, WPage uint8
	// Relayed: the gateway relayed prefill's drain to decode
	// (Receiver.WriterDrained ran).
	Relayed bool
	// Ghosts: what the invariants check.
	BadAccept, BadRead, RelayAfterCancel bool
}

// State is the whole system; comparable, so it is its own map key.
type State struct {
	Page [MaxPages]Page
	Req  [NumReqs]Req
}

// Init is the initial state: both requests admitted, every page free and
// holding some earlier owner's bytes.
func (m *Model) Init() State {
	var s State
	for p := range s.Page {
		s.Page[p] = Page{Owner: -1, Data: -1, Header: -1}
	}
	for r := range s.Req {
		s.Req[r].Pages = [MaxNeed]int8{-1, -1}
	}
	return s
}

// Step is one action: its name, the request, and the pages Reserve took.
type Step struct {
	Act    string
	R      uint8
	P0, P1 int8
}

func reqName(r int) string { return string(rune('A' + r)) }

func (a Step) String() string {
	switch {
	case a.P1 >= 0:
		return fmt.Sprintf("%s(%s:p%d,p%d)", a.Act, reqName(int(a.R)), a.P0, a.P1)
	case a.P0 >= 0:
		return fmt.Sprintf("%s(%s:p%d)", a.Act, reqName(int(a.R)), a.P0)
	}
	return a.Act + "(" + reqName(int(a.R)) + ")"
}

// Next calls yield with every enabled action and its successor.
func (m *Model) Next(s State, yield func(Step, State)) {
	for r := range NumReqs {
		m.next(s, r, func(a Step, n State) {
			n.canon()
			yield(a, n)
		})
	}
}

func (m *Model) next(s State, r int, yield func(Step, State)) {
	q := &s.Req[r]
	need := m.Need[r]
	do := func(a string, f func(n *State, q *Req)) {
		n := s
		f(&n, &n.Req[r])
		yield(Step{Act: a, R: uint8(r), P0: -1, P1: -1}, n)
	}

	// Gateway.
	if q.Term == termNone && q.GW == gwAdmitted && q.Entry == entNone {
		free := s.freeList(m.Pages)
		// (Without enough free pages the request waits, or is aborted.)
		// worker.reserve → kvpool.Pool.Reserve: all or nothing, any free
		// pages (the pool's FIFO order is one choice), tagged (r, epoch).
		for i, a := range free {
			for _, b := range append(free[i+1:len(free):len(free)], -1) {
				if (need == 1) != (b < 0) {
					continue
				}
				n := s
				n.Req[r].Pages = [MaxNeed]int8{a, b}
				n.reserve(r)
				yield(Step{Act: "Reserve", R: uint8(r), P0: a, P1: b}, n)
			}
		}
	}
	if q.Term == termNone && q.GW == gwReserved {
		// driver.runPD: Generate on decode (claimReservationLocked makes
		// the handler) and Prefill with the ticket.
		do("Dispatch", func(n *State, q *Req) { q.GW, q.W, q.Entry = gwDispatched, wTicket, entWaiting })
	}
	if q.Term == termNone {
		// lifecycle Request.Abort: terminal, then Abort to every party.
		do("GatewayAbort", func(n *State, q *Req) {
			n.terminal(r, termAborted)
			q.AbortToDecode = q.GW >= gwReserved
		})
	}
	if q.AbortToDecode {
		// worker.abort → abortLocked: cancel the handler, or claim.
		do("DecodeAbort", func(n *State, q *Req) {
			q.AbortToDecode = false
			switch q.Entry {
			case entReserved:
				q.Entry = entClaimed
			case entWaiting, entDecoding:
				q.Cancelled = true
			}
		})
	}

	// Prefill writer (Sender.Open, Stream.pushSHM, Complete, abort).
	switch q.W {
	case wTicket:
		// serverAuthenticate: Lookup gives the ticket, or refuses.
		do("Authenticate", func(n *State, q *Req) {
			q.W = wRefused
			if n.live(r) {
				q.W = wAuthed
			}
		})
	case wAuthed:
		// Receiver.admit: Lookup again and register, under r.mu.
		do("Admit", func(n *State, q *Req) {
			q.W = wRefused
			if n.live(r) || m.V.AdmitWithoutLookup {
				q.W, q.Rec, q.Sess = wOpen, recPresent, sessRunning
			}
		})
	case wOpen:
		if int(q.WPage) < need {
			// pushSHM: copy the page into decode's memory, one-sided
			// (nothing on decode is checked), then its header and seal.
			do("WritePage", func(n *State, q *Req) {
				p := q.Pages[q.WPage]
				n.Page[p].Data, n.Page[p].Header = int8(r), int8(r)
				q.WPage++
			})
		}
		// Stream.Complete (sendComplete): checksums of the pages written.
		// A buggy sender may complete short (DESIGN.md §1).
		do("SendComplete", func(n *State, q *Req) { q.W = wCompleted })
		// Stream.abort (ctx cancel, ABORT from decode, engine error): wait
		// out the write in flight, then DRAIN_ACK.
		do("WriterAbort", func(n *State, q *Req) { q.W = wDrained })
	}
	if q.W == wTicket || q.W == wOpen {
		// The prefill process dies: no further write, no frame.
		do("WriterDie", func(n *State, q *Req) { q.W = wDead })
	}

	// Receiver session (receiver_session.go).
	if q.Sess == sessRunning {
		switch q.W {
		case wCompleted:
			// step: COMPLETE → markDrained (Ack a held release).
			do("RecvComplete", func(n *State, q *Req) {
				q.Sess = sessVerifying
				n.markDrained(r)
			})
		case wDrained:
			// step: DRAIN_ACK → markDrained, fail (aborted by sender).
			do("RecvDrainAck", func(n *State, q *Req) {
				n.markDrained(r)
				n.fail(r)
				n.endSession(r)
			})
		case wDead:
			// step: the connection broke → fail (ErrIncomplete).
			do("ConnLost", func(n *State, q *Req) {
				n.fail(r)
				n.endSession(r)
			})
		}
		if q.W != wDead {
			// step: a bad MAC, duplicate, missing or corrupt frame, or a
			// connection that died under a live writer → fail; the session
			// ends without waiting for DRAIN_ACK, which can no longer reach
			// decode. The writer may go on writing until it notices.
			do("FrameError", func(n *State, q *Req) {
				n.fail(r)
				n.endSession(r)
			})
		}
	}
	if q.Sess == sessVerifying {
		// session.complete → verifySHM, Sink.Written, Sink.Complete.
		do("VerifyComplete", func(n *State, q *Req) {
			if n.verifySHM(r, need, m.V.TrustComplete) {
				for _, p := range q.Pages[:need] {
					n.Page[p].Written = true // Sink.Written (fence passed above)
				}
				if !n.ownData(r, need) {
					q.BadAccept = true
				}
				if n.settles(r) {
					q.Completed = true // Sink.Complete
				}
			} else {
				n.fail(r)
			}
			n.endSession(r)
		})
	}

	// Decode handler (worker/decode.go runReserved, serve, relay).
	if q.Entry == entWaiting && (q.Completed || q.Failed) {
		// runReserved: <-e.transferred.
		do("TransferDone", func(n *State, q *Req) {
			if q.Failed {
				q.Entry = entClaimed // finish(e, DataLoss)
				n.terminal(r, termFailed)
				return
			}
			if q.Hold == holdReserved { // Pool.Activate
				q.Hold = holdInUse
			}
			q.Entry = entDecoding // Ready to the gateway
		})
	}
	if q.Entry == entDecoding && !q.Token {
		// engine step: Pool.Verify (I3), forward pass, then relay.
		do("DecodeStep", func(n *State, q *Req) {
			if !n.verify(r, need) {
				q.Entry = entClaimed // engine error → finish(e, st)
				n.terminal(r, termFailed)
				return
			}
			if !n.ownData(r, need) {
				q.BadRead = true
			}
			q.Token = true
			if q.Cancelled && !m.V.RelayIgnoresCancel {
				return // relay: ctx.Err() before Send
			}
			// Sent; the gateway forwards it only while the request is
			// not terminal (driver.relay), so a token racing the abort is
			// dropped there.
			q.RelayAfterCancel = q.Cancelled
		})
	}
	if q.Entry == entDecoding && q.Token && !q.Cancelled {
		// serve: finish(e, nil) → Pool.Release; Done to the gateway.
		do("DecodeFinish", func(n *State, q *Req) {
			q.Entry = entGone
			n.release(r, epoch)
			n.terminal(r, termCompleted)
		})
	}
	if (q.Entry == entWaiting || q.Entry == entDecoding) && q.Cancelled {
		// runReserved/serve on ctx.Done: stopSequence, finish(e, st).
		do("HandlerStop", func(n *State, q *Req) { q.Entry = entClaimed })
	}
	if q.Entry == entClaimed {
		// releaseEntry: Pool.BumpEpoch.
		do("Fence", func(n *State, q *Req) {
			q.Entry, q.RelEpoch = entFenced, epoch
			if !m.V.SkipFence && n.bumpEpoch(r) {
				q.RelEpoch = epoch + 1
			}
		})
	}
	if q.Entry == entFenced {
		// releaseEntry: Receiver.Abort unless the transfer completed.
		do("Release", func(n *State, q *Req) {
			q.Entry = entGone
			if q.Completed {
				n.release(r, q.RelEpoch)
			} else {
				n.receiverAbort(r, m.V)
			}
		})
	}
	if m.relayEnabled(q) {
		// lifecycle fanOut → relayDrain: prefill's Abort answered drained
		// with the transfer, so the gateway tells decode (WriterDrained →
		// Receiver.WriterDrained). Prefill answers only once its stream
		// drained (or had sent COMPLETE), and a dead prefill never
		// answers.
		do("RelayDrain", func(n *State, q *Req) {
			q.Relayed = true
			n.writerDrained(r)
		})
	}
	if q.DR == drHeld {
		// DeferredRelease.expire → worker.quarantine → Pool.Quarantine.
		do("DrainTimeout", func(n *State, q *Req) {
			q.DR = drQuarantined
			if m.V.ReleaseOnTimeout {
				n.freePages(r)
			} else if q.Hold != holdNone && q.HoldEpoch == q.RelEpoch {
				q.Hold = holdQuarantined
			}
		})
	}
}

// relayEnabled reports whether the gateway may relay q's writer drain to
// decode: the request ended aborted or failed (the fan-out runs), prefill
// was dispatched and its Abort answered drained with a transfer — its
// stream drained or had sent COMPLETE; with RelayBeforeDrain, as soon as
// a stream exists.
func (m *Model) relayEnabled(q *Req) bool {
	if m.V.NoRelay || q.Relayed || (q.Term != termAborted && q.Term != termFailed) {
		return false
	}
	return q.W == wCompleted || q.W == wDrained || (m.V.RelayBeforeDrain && q.W == wOpen)
}

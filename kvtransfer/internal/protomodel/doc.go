// Package protomodel is a model-checked spec of warden's KV transfer,
// abort and deferred-release protocol over the shm backend (DESIGN.md §5,
// invariants I3–I6, §7): an explicit-state model of the gateway, the decode
// worker (request table, KV pool, transfer receiver, deferred release) and
// the prefill writers, and a breadth-first explorer (Explore) that visits
// every interleaving, checks the invariants in every reachable state and
// returns a shortest counterexample trace when one fails. It has no
// dependencies and runs as a unit test:
//
//	go test ./kvtransfer/internal/protomodel -v
//
// # What is modelled
//
// Two requests of different tenants, A and B, both admitted, share a decode
// pool of Model.Pages pages; request r needs Model.Need[r] pages. The tests
// use 3 pages, A needing 2 and B 1: the requests run side by side, either
// may get a page the other used, and B can run while A's pages are
// quarantined. A request may be reserved (ticket: request, epoch, pages),
// dispatched, transferred by its prefill writer with one-sided shm writes,
// completed, verified by decode, decoded (one step reads its pages and
// yields a token) and finished. The gateway
// may abort it at every stage; its writer may die at any time, or stop and
// send DRAIN_ACK; decode may end the session on a bad frame (or a dead
// connection) while the writer lives, so that its COMPLETE or DRAIN_ACK
// never arrives; decode's teardown fences the epoch, then releases, or
// holds the pages until the drain ack of exactly that transfer, or
// quarantines them when the drain timeout fires first; once the request
// ended aborted or failed and its prefill's Abort answered drained, the
// gateway relays that drain to decode, which acks it like a DRAIN_ACK;
// released pages are reused by the other request. Every action is atomic and any enabled
// action may run next, so a stalled writer is one whose next write is taken
// arbitrarily late — after an abort, a release, a reuse. Actions and the
// code they mirror (each rule in Model.Next names its function):
//
//	Reserve        worker.reserve → kvpool.Pool.Reserve (any free pages)
//	Dispatch       gateway driver.runPD: Generate (the handler) and Prefill
//	GatewayAbort   lifecycle Request.Abort: terminal, Abort to decode
//	DecodeAbort    worker.abort → abortLocked: cancel the handler, or claim
//	Authenticate   Sender.Open ↔ serverAuthenticate (Sink.Lookup)
//	Admit          Receiver.admit: Lookup again and register, under r.mu
//	WritePage      Stream.pushSHM: page data, header, seal — no check
//	SendComplete   Stream.Complete: checksums of the pages written
//	WriterAbort    Stream.abort: wait out the write, DRAIN_ACK
//	WriterDie      the prefill process dies
//	RecvComplete   session.step COMPLETE → markDrained → DeferredRelease.Ack
//	VerifyComplete session.complete: verifySHM, Sink.Written, Complete/Fail
//	RecvDrainAck   session.step DRAIN_ACK → markDrained, session.fail
//	ConnLost       session.step: connection error → session.fail
//	FrameError     session.step: bad MAC, duplicate, missing or corrupt
//	               frame, or the connection died, under a live writer →
//	               session.fail; the session ends without the drain ack
//	RelayDrain     lifecycle fanOut → relayDrain → worker.writerDrained →
//	               Receiver.WriterDrained (mark drained, DeferredRelease.Ack)
//	TransferDone   runReserved after <-e.transferred: Pool.Activate, Ready
//	DecodeStep     engine step: Pool.Verify, forward pass; relay
//	DecodeFinish   serve → finish(e, nil) → Pool.Release
//	HandlerStop    runReserved/serve on ctx.Done → finish → claimLocked
//	Fence          releaseEntry → Pool.BumpEpoch
//	Release        releaseEntry → Receiver.Abort (Immediate or
//	               DeferredRelease.Hold), or Pool.Release if completed
//	DrainTimeout   DeferredRelease.expire → worker.quarantine
//
// # Invariants (Model.Check)
//
//   - I5: no page is held by a request while another request's writer may
//     still land a write in it (accepted, alive, not drained or completed,
//     page not yet written).
//   - I4: decode accepts a transfer only if every page is held by the
//     request at the ticket's epoch and carries data, header and seal
//     written by that request's own writer. I3: the same holds for every
//     page a decode step reads.
//   - I6: at most one terminal state per request; no token is relayed once
//     decode was told of the abort (the gateway drops tokens after its own
//     terminal state).
//   - Quiescence: in a state with no enabled action every request is
//     terminal and every page is free or quarantined (nothing leaked), and
//     quarantined only if its writer died: a writer that drained, whether
//     or not its DRAIN_ACK arrived, gets its pages back.
//
// # What is abstracted away
//
//   - Bytes: a page's content is who wrote it. Page.Data is the request
//     whose writer's data is in the page, Page.Header the request whose
//     header and seal it carries; each request has one transfer at one
//     epoch, so this names the (transfer, epoch, owner tag) too.
//   - Checksums: a checksum matches when the data and the header were
//     written by the same writer; COMPLETE lists the checksums of the pages
//     its writer wrote (zero for the others). A writer may send COMPLETE
//     after any number of pages — the short transfer of DESIGN.md §1 —
//     and decode's verification must reject it.
//   - A page write is one step: decode looks at a page only at COMPLETE,
//     which its writer sends after its writes, or when I5 is already
//     broken. What a writer does after COMPLETE cannot reach decode (the
//     session stops reading), so it is not modelled. Early verification of
//     sealed pages (receiver_shm.go pump) is folded into COMPLETE's: the
//     code re-checks every header there but does not hash again data it
//     verified early, which is the same as long as I5 holds (nobody else
//     writes a sealed page).
//   - The Generate handler starts with the dispatch (so Sink.Fail always
//     finds one); a request without free pages waits. tcp, the handshake's
//     cryptography, frame MACs, tombstones, the reserve timeout and retries
//     (the gateway runs one epoch per request) are out of scope.
//   - States that behave the same are merged (State.canon): page content
//     that does not name the page's owner is forgotten, and so is every
//     field no rule reads again. TestCanonIsSound checks, state by state,
//     that this changes neither a verdict nor a successor.
//
// With the tests' bounds the faithful model has 313,378 reachable states
// (1,526,138 transitions, 288 quiescent states, depth 27).
//
// # Mutations
//
// Variant switches one rule to a plausible bug; the tests check that each
// is caught and which invariant breaks. RelayBeforeDrain (the gateway
// relays without waiting for prefill's drained answer) breaks I5: decode
// releases while the writer still writes, and the other request reuses the
// page. NoRelay (the protocol before the relay) breaks quiescence: a
// session ended on a bad frame leaves a drained writer's pages quarantined
// for good. SkipFence (no BumpEpoch on abort)
// is not caught: no invariant breaks, because whatever still acts for the
// old epoch is already refused by claimLocked (Lookup and settleLocked
// fail) and by the receiver's own record, and the handler stops its engine
// before it tears down. In this protocol the fence is defence in depth,
// not load-bearing.
//
// # The prefix cache
//
// CacheModel (cache.go) is a second, smaller model of one decode pool
// whose pages may be sealed, shared by later reservations of the same
// cache domain (the ticket holds them: kvtransfer.Ticket.HeldPages), evicted
// and reclaimed from quarantine, and whose domain 0 may be evicted for
// good at any moment (its tenant deleted: EvictCacheDomains,
// Pool.EvictDomains); its doc comment lists the actions, the code they
// mirror and the invariants (I5, I3, I8a, pool identity, quiescence, I8).
// It runs over two configurations of its requests (CacheConfig): three
// requests in two cache domains (Domains), and three in one domain under
// two LoRA adapters, one of whose prefill may compute under the other
// adapter (Adapters: the adapter is part of the tag and of the transfer's
// owner tag, DESIGN I8a). CacheVariant holds its mutants; each is caught.
package protomodel

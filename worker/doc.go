// Package worker is the warden worker process (`warden worker --role
// prefill|decode|both`): a loaded model with its owner-tagged KV pool and
// engine (worker/runtime), served to gateways over the gRPC control plane
// (internal/controlpb), plus the KV transfer ends (kvtransfer), the
// registration with every configured gateway, and /metrics and /healthz.
//
// The gateway drives every request's lifecycle; the worker serves it and
// never keeps pages for a request the gateway has given up on: every path
// out of a request — completion, failure, Abort, a cancelled stream, an
// abandoned reservation, shutdown — ends with the request's pages free
// (or quarantined, I5) and its engine sequence stopped. Free + reserved +
// in-use + cached + quarantined pages equal the pool at every quiet
// moment.
//
// # Prefix cache
//
// With worker.kv.prefix_cache (default on, with either backend), a
// both worker serving a Generate that carries a cache domain (gRPC
// metadata cachekey.MetadataDomain, 64 hex digits, set only by the
// gateway from the tenant: I8) reserves with kvpool.ReservePrefix, so the
// prompt's leading full pages already sealed in that domain are shared,
// not recomputed; the engine prefills only the rest, verifies the shared
// pages against the chain tags it computes from the prompt (I3), and
// seals the prompt's full pages when the prompt is in the cache. The
// response header cachekey.MetadataCachedTokens says how many prompt
// tokens were reused. Status reports free_pages as free + cached (cached
// pages are evicted on demand). Not yet: prefill and decode workers
// neither reuse nor keep cached pages (P/D always transfers the whole
// prompt), and two concurrent requests with the same new prefix both
// compute it (the second reserved before the first sealed; waiting for a
// seal would hold its pages idle for a whole prefill, so the engine does
// not).
//
// # Reservation states
//
// A decode reservation (Reserve, on a decode or both worker) is a lease
// that its owner, the gateway that drives the request (I6), keeps alive;
// the worker reclaims it only when the owner stops renewing (table.go:
// entry's timer, deadline and lease; expire; renewReservation).
//
//	Reserve ─► reserved ─(Generate claims)─► claimed ───────┐
//	              │                                         │ transfer
//	              │ transfer verified (COMPLETE)            ▼ verified
//	              └──────► transferred ─(Generate claims)─► decoding ─► released
//
//	reserved, claimed, transferred: the lease runs; RenewReservation moves
//	its deadline. The deadline passing unrenewed ─► abandoned: fenced and
//	released like an Abort; later calls and renewals for the attempt get
//	Aborted "reservation abandoned".
//	decoding: no lease; the claiming Generate stream owns the pages until
//	Done, a failure, an Abort or the stream's cancellation releases them.
//
// Who renews, and when a reservation is reclaimed:
//
//   - The first lease is what Reserve's timeout_ms asks for (the
//     gateway's measured prefill time for the prompt × 4), clamped to
//     [worker.transfer.reserve_timeout, worker.transfer.reserve_timeout_max].
//   - Each RenewReservation moves the deadline to reserve_timeout from
//     now, never earlier. The gateway renews every third of
//     reserve_timeout (Reserve's lease_ms) from Reserve until decode's
//     Ready, for as long as the request is alive: while its prefill waits
//     in a queue, computes, or its structured-output grammar compiles on
//     either worker. A healthy request thus never loses its reservation,
//     however slow its prefill; one that waits too long ends at its own
//     deadline (gateway.request_timeout: 504 timeout, the abort fan-out
//     frees the pages).
//   - The lease ends in abandonment only when renewals stop while the
//     request is not yet decoding: its gateway died or cannot reach this
//     worker for a whole lease. Then the pages are fenced and released
//     (through the receiver when a transfer may still write: I5's
//     deferred release), so a vanished owner cannot leak them; counted as
//     warden_decode_reservation_leases_total{event="expired"}. A
//     renewal racing the timer wins: expire re-checks the deadline.
//   - A Generate stream that claimed the reservation ends with it: its
//     cancellation (the gateway aborted, or its connection broke, which
//     gRPC keepalives detect) tears the request down like an Abort.
//   - A both worker's own Generate (no Reserve) has no lease: the stream
//     is its only owner, as on a prefill worker.
//
// # Control-plane contract
//
// Roles: Reserve and Generate need decode or both, Prefill prefill or both;
// a call to the wrong role is FailedPrecondition.
//
//   - Reserve(owner, prompt_tokens, total_tokens) reserves pages for
//     total_tokens, all or nothing, and returns the ticket. total_tokens
//     above the pool's capacity is OutOfRange ("can never fit: N tokens >
//     pool capacity C") and reserves nothing; not enough free pages now is
//     ResourceExhausted; an owner (tenant, request) that already holds pages
//     here is AlreadyExists. The reservation holds a lease (below):
//     lease_ms in the answer is what each renewal grants.
//   - RenewReservation(owner, transfer_id) (decode, both) extends the
//     reservation's lease to worker.transfer.reserve_timeout from now.
//     An attempt that ended here answers with its status (Aborted for an
//     abandoned reservation); no reservation for that owner, epoch and
//     ticket is NotFound.
//   - Prefill(owner, prompt, sampling, ticket) prefills locally and pushes
//     each finished page to the ticket's decode worker while later chunks
//     are computed, then completes the transfer; it returns once decode
//     verified it. A prompt above this worker's pool is OutOfRange. Transfer
//     failures map as: verification failed (checksum, incomplete, token
//     count, stale epoch, protocol) DataLoss with kvtransfer's text; aborted
//     by either side Aborted; decode did not accept the ticket (expired,
//     aborted, unknown) FailedPrecondition; decode unreachable Unavailable.
//   - Generate(owner, prompt, sampling[, ticket]) streams Ready{prompt_tokens}
//     once the prompt is in the cache (both: after the local prefill,
//     with the prompt's logprobs when sampling.prompt_logprobs asks for
//     them — such a request takes no prefix-cache hit; decode: after the
//     transfer verified, the Prefill response carrying those logprobs),
//     then Tokens{ids} events (tokens
//     produced in one step may share an event; none is held back), then
//     Done{finish_reason "stop"|"length", prompt_tokens, completion_tokens}
//     with the engine's counts (I7; completion_tokens includes a final stop
//     token, which is not sent). Done is sent after the pages are free. On
//     a decode worker (or a both worker holding a Reserve for the owner)
//     the owner must have been reserved: none is NotFound; a prompt length
//     other than the ticket's, another epoch or ticket, or prompt+max_tokens
//     above the reservation is InvalidArgument; a failed transfer is
//     DataLoss (or Aborted). A both worker without a reservation reserves
//     prompt+max_tokens itself (OutOfRange, ResourceExhausted as Reserve).
//     A KV owner violation (I3) ends the stream with Internal "kv owner
//     violation: …" and no further token. Cancelling the stream aborts
//     the request.
//   - Abort(owner, cause) is idempotent: it stops the engine sequence,
//     fences the pages (new epoch) and frees them — through the receiver
//     when a transfer may still write, which for shm waits for the
//     sender's drain ack or quarantines after worker.transfer.drain_timeout.
//     found is false when nothing was held; drained is true on prefill and
//     both workers (once Abort returns no further byte of the request can
//     be written by this worker), and drain then names the transfer whose
//     stream stopped early (transfer ID, epoch) — also when the Prefill
//     call had already ended, from the attempt's tombstone. An Abort also
//     refuses any later Reserve, Prefill or Generate for the same (tenant,
//     request) at that epoch or an older one, with Aborted, so a call
//     racing its Abort cannot start.
//   - WriterDrained(owner, drain) (decode, both): the gateway relays a
//     prefill worker's drain; the receiver acks that (transfer, epoch) as
//     its DRAIN_ACK would (Receiver.WriterDrained): held pages are
//     released (outcome drained), quarantined ones freed (late_drain), a
//     transfer not torn down yet is marked drained so that its teardown
//     releases at once. applied is false, and nothing changes, for a drain
//     the receiver does not know at that epoch or one that contradicts the
//     request (counted by result, logged at WARN); it is never an error.
//   - A request whose call was refused or failed after a tear-down answers
//     later calls for that attempt with the same status for a while (at
//     least a minute), so the gateway learns why.
//   - Status, ModelAssets: pool accounting and in-flight requests; the
//     tokenizer files and their SHA-256.
//   - During shutdown new requests get Unavailable and in-flight ones end
//     with Unavailable.
//
// Only the gateway may call: with cluster.auth mtls the control server
// completes a TLS handshake only with a certificate carrying the gateway
// identity; with shared_secret every call must carry the secret (I10).
//
// # Observability
//
// Metrics (the registry of WithRegistry, served on
// observability.metrics.listen): the live KV pool, owner violations and
// fence rejections, the engine, the transfer ends (bytes, frames,
// duration by side, checksum failures, stale frames, authentication
// failures), deferred releases by outcome, relayed writer drains by
// result, Abort calls, the worker's identity (warden_worker_info) and,
// where NVML works, the GPUs (internal/obs/gpu). docs/operations.md
// describes each.
//
// Traces (WithTracerProvider, or observability.tracing): a server span per
// control RPC continuing the gateway's trace, warden.prefill with
// warden.kv.send under it on prefill, warden.kv.receive on decode — whose
// parent, the send span, arrives in the transfer handshake — and
// warden.decode (warden.generate on a both worker without a reservation).
// Logs: every request-scoped line carries request_id, tenant, trace_id and
// span_id; owner violations, transfer integrity failures and quarantined
// pages are logged at ERROR with the request, tenant, worker, epoch and
// pages.
package worker

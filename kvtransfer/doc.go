// Package kvtransfer is warden's KV data plane: it moves a prompt's KV
// pages from a prefill worker (Sender) into pages a decode worker reserved
// (Receiver), so that a page is only ever written for the (request, epoch)
// it is reserved for, a transfer never "completes" short, and pages an
// aborted one-sided writer may still touch are not reused (DESIGN.md §1,
// §5, invariants I4, I5, I10).
//
// # Flow
//
// Decode reserves pages and issues a Ticket (random transfer ID, owner,
// destination page IDs, page geometry, prompt token count, a random
// 32-byte auth token, its transfer address, backend and shm path). The
// gateway hands it to prefill over the mTLS control plane. Prefill opens a
// Stream (the handshake below, on an idle connection to that decode when it
// has one, else on a new one), pushes page chunks as they are
// computed — a layer range of a page is one contiguous byte range, so
// prefill can stream layer by layer; within a page chunks arrive in byte
// order — and completes with the token count and its first sampled token.
// Decode verifies (I4) and calls Sink.Complete or Sink.Fail exactly once.
//
// Backends:
//   - tcp: DATA frames carry (page index, page ID, offset, length,
//     checksum) and their payload. The receiver asks Sink.CheckWrite right
//     before each copy and reads the payload from the socket straight into
//     the page (small frames through a read buffer), hashing it there while
//     it is in cache.
//   - shm: decode's KV slab is a shared-memory Segment (CreateSegment,
//     mode 0600). Prefill maps it (OpenSegment) and copies pages directly
//     into decode's memory (one-sided, like RDMA), hashing each page while
//     it is in cache, then writes the page's header (owner tag with the
//     adapter, epoch,
//     transfer ID, bytes written, checksum) and last its seal word. Decode
//     verifies sealed pages — header, then checksum recomputed over its own
//     memory — while later ones are still being written (receiver_shm.go);
//     COMPLETE carries every page's checksum, and decode checks every page
//     header again, and hashes the pages it has not reached yet, before it
//     accepts.
//
// # Handshake and frames (I10)
//
// The sender proves the ticket's token (HMAC-SHA-256 over both nonces)
// before the receiver reads anything else; the receiver proves it back
// (its Accept is MAC'd with a key only the token holder can derive) before
// the sender writes a byte. A connection that fails is closed before any
// page is looked at: no Sink method but Lookup runs. See handshake.go.
// The Hello also carries the sender's trace context (the span context in
// Open's context: trace ID, span ID, flags), covered by the proof, so that
// the receiver's span for the transfer (ReceiverConfig.OnTransfer) joins
// the request's trace; it is telemetry only and decides nothing.
// It carries, covered by the proof too, the owner tag of the KV the
// sender computed (its ticket's owner: tenant, request and LoRA adapter,
// DESIGN I8a); the receiver refuses a tag other than its reservation's
// (Accept status ErrOwnerMismatch, Sink.Fail) before a byte lands, so KV
// computed under another adapter never enters decode's pages.
// Every frame header then carries a sequence number and a truncated
// HMAC-SHA-256 under a per-direction session key; control payloads
// (COMPLETE's checksums and token count, RESULT, …) are covered by the MAC
// too. A repeated sequence number is ErrDuplicate, a skipped one
// ErrIncomplete; a frame naming another transfer or epoch is dropped and
// counted (Stats). Checksums are xxh3-64: on this hardware about four
// times faster than hardware crc32c (BenchmarkChecksum) and 64 bits wide.
//
// Connections are reused. After a transfer completed cleanly (decode's
// verdict sent and received, nothing unread) both ends keep the connection
// and decode sends the next Challenge at once; the sender's next transfer
// to that decode runs the whole handshake on it, with fresh nonces and its
// own ticket's token, so every transfer still proves its token (I10) — the
// connection authorises nothing by itself. A connection whose transfer
// failed, or that fails a handshake, is closed. Reuse saves the dial (and
// TLS handshake) and a round trip per transfer; SenderConfig.MaxIdleConns
// and the IdleConnTimeout fields bound it.
//
// # Threat model
//
// Off-path attackers (anyone who can connect to the transfer port) cannot
// read or write a page: without the per-transfer token they fail the
// handshake, and they cannot inject into an established TCP stream. Frame
// MACs additionally bind every header to its connection, transfer, epoch
// and position, so buggy or confused peers cannot splice frames across
// transfers. An on-path attacker without TLS can read page bytes and
// alter DATA payloads consistently with their non-cryptographic checksum
// (headers and control payloads stay authenticated): set
// ReceiverConfig.TLS and SenderConfig.TLS where the network is not
// trusted. shm is same-host only; its protection is file ownership and
// mode (0600, the worker's user), and the checksums, page headers and seals
// guard against bugs and stale writers, not against a malicious process of
// the same user.
//
// # Abort and drain (I5)
//
// Prefill: cancelling the context of a Stream (or calling Abort) stops it
// promptly — a blocked tcp write is interrupted, an shm copy stops at the
// next 256 KiB — and once no write is in flight it sends DRAIN_ACK for
// (transfer, epoch) and returns the Drain, which the worker reports as
// AbortResponse.drained. Decode: after fencing (bumping the pool epoch) the
// worker calls Receiver.Abort for every transfer that did not complete.
// With tcp, decode is the only writer: Abort closes the connection, waits
// out a copy in flight and releases at once. With shm the sender may still
// be writing: Abort sends ABORT and parks the release in a
// DeferredRelease until the DRAIN_ACK (or COMPLETE) for exactly that
// (transfer, epoch) arrives — an ack for another epoch releases nothing —
// or quarantines after ReceiverConfig.DrainTimeout. OnRelease reports the
// outcome (immediate, drained, timeout, late_drain).
//
// The DRAIN_ACK travels on the transfer's connection, so it is lost when
// that connection dies or decode ends the session on a bad frame (bad MAC,
// duplicate, missing or corrupt frame: the stream can no longer be
// trusted, so nothing more is read from it). The sender knows it drained
// all the same — Stream.Abort and Result.Drain return the Drain — and the
// worker reports it in its Abort answer; the gateway relays it to decode
// over the authenticated control plane, and Receiver.WriterDrained does
// what the DRAIN_ACK would have done: it acks exactly that (transfer,
// epoch) in the DeferredRelease (drained, or late_drain from quarantine)
// and marks a transfer not yet torn down as drained, so its Abort releases
// at once. Only the sender's own Drain may be relayed: a relay before the
// writer drained would let a late write land in a reused page (the model
// in internal/protomodel checks both). Without a relay (prefill died or
// never answered) the pages stay quarantined until DeferredRelease.Reclaim
// proves no writer is left (shm: Segment.WritersAttached is false — every
// OpenSegment writer holds a shared lock on the segment file while it has
// it mapped) or the worker restarts.
//
// # Held pages (prefix cache)
//
// A ticket may name leading prompt pages decode already holds sealed in
// its prefix cache (Ticket.HeldPages): the transfer carries only the pages
// after them. The sender refuses to push a held page, the receiver
// refuses a DATA frame for one and verifies (and marks written) only the
// pages after them; COMPLETE still lists a checksum per prompt page, and
// the held pages' entries are ignored.
//
// # Wiring into the worker
//
// Decode: CreateSegment for shm and give Data() to the KV pool as its
// slab; implement Sink over the pool (CheckWrite/Written ask the pool
// about owner and epoch, PageData returns the page's slab bytes); serve a
// Receiver on the transfer listener; export Stats and OnRelease as
// metrics. Prefill: one Sender per process; per request Open (in parallel
// with computing the first layer), Push chunks, Complete, and cancel on
// abort. The protobuf ticket converts field by field; its transfer_id is
// TransferID.String (ParseTransferID reverses it).
//
// # Tests and benchmarks
//
// Package internal/faults (module-wide, test-only) injects faults at fixed
// points of both ends — drop, delay, duplicate, corrupt or rewrite a frame,
// stall a one-sided writer inside its write section, hold a verdict, abort
// right after the handshake — through SenderConfig.Faults and
// ReceiverConfig.Faults; production code leaves them nil. Speed is measured
// by BenchmarkSHMvsMemcpy and BenchmarkTCPvsRawLoopback as ratios against
// memcpy and raw loopback TCP of the same bytes in the same run
// (docs/BENCHMARKS.md).
package kvtransfer

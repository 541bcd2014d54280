// Package kvpool is the paged, owner-tagged KV cache pool of a worker: the
// place where warden's isolation contract (DESIGN.md I3, I5, I9 and pool
// accounting) is enforced.
//
// # Model
//
// The pool is a fixed number of pages. Each page holds PageTokens token
// slots in PageBytes bytes of one storage slab, which the pool allocates or
// the caller supplies (the shm transfer backend passes a mapped file). Token
// position t of a sequence lives in page pages[t/PageTokens], slot
// t%PageTokens.
//
// Every page that is not free belongs to exactly one holding: the pages one
// Owner (tenant, request, epoch) reserved. A holding's pages share a State
// and an epoch; each page also records Written, how many of its leading
// slots were written for the current owner. Pages are not zeroed by default
// (speed), so Written is what makes unwritten memory unreadable (I9).
//
//	        Reserve            Activate
//	Free ──────────▶ Reserved ──────────▶ InUse
//	 ▲                  │ │                 │ │
//	 │  Release         │ │ Quarantine      │ │  Release
//	 ├──────────────────┘ └───────┬─────────┘ │
//	 ├────────────────────────────┼───────────┘
//	 │                            ▼
//	 └──── ReleaseQuarantined ─ Quarantined
//
// BumpEpoch keeps a Reserved/InUse holding where it is but retags it with
// epoch+1 and resets every Written to 0: anything still acting for the old
// epoch (a late transfer frame, a stale reader) is refused from then on.
//
// # Prefix cache
//
// A page can also be sealed (Seal, prefix.go): once every slot of a full
// prompt page was written for its owner, it becomes read-only and is
// tagged with a Tag — cache domain, model/format version and the chain
// hash of every token up to and including the page — instead of an owner.
// Sealed pages are reference-counted: ReservePrefix puts the longest run
// of sealed pages matching a sequence's leading tags at the head of its
// table (a hit) and reserves the rest; Release (or Quarantine) drops the
// references. A sealed page nobody references is Cached: it stays
// findable and is evicted, least recently used first, when a reservation
// needs the space (zeroed if ZeroOnRelease; poisoned when reserved again
// in PoisonOnReserve mode). A reader presents, for each shared page, the
// tag it computed itself from its own tokens and domain (VerifyPrefix);
// any other tag, another domain, an unsealed page or one its holding does
// not reference is an owner violation. Nobody writes a sealed page.
//
// Accounting: Free + Reserved + InUse + Cached + Quarantined == Total,
// where sealed pages some holding references count in InUse (Stats.Shared
// of them) and Stats.AvailableNow() = Free + Cached is what a reservation
// can get now.
//
// Several sequences of one request (n > 1) share its prompt the same way:
// each reserves with the prompt's tags in a domain private to the request
// and reads the pages the first one sealed.
//
// # Checks
//
// Verify is the read check (I3) the engine runs before every forward step;
// CheckWrite, MarkWritten, MarkTokensWritten and WritePage are the write
// fence (I4, I5) the transfer receiver and the engine use. A refused read
// is a *ViolationError (errors.Is ErrOwnerViolation) and is counted in
// Stats.Violations; a refused write is a *FenceError (errors.Is ErrFenced)
// and is counted in Stats.FenceRejections. Owner matching is always exact:
// same tenant, same request, same epoch.
//
// # Concurrency
//
// All methods are safe for concurrent use; one mutex guards the metadata and
// every operation holds it only briefly. Free + Reserved + InUse + Cached +
// Quarantined == Total holds whenever the mutex is free, so every Stats
// snapshot satisfies it.
//
// WritePage copies data into a page outside the mutex but pins the holding
// while it does: Release, BumpEpoch and Quarantine of that owner wait for
// in-flight copies to finish (and refuse new ones meanwhile), so a copy can
// never land in a page after it was freed, reused or retagged. Copying in
// with CheckWrite followed by MarkWritten has no such guarantee and must
// not be used for data that can race an abort.
//
// Bytes written through Data (the engine's forward step) are not pinned:
// their writer must not let the owner be released, retagged or quarantined
// while it writes. The engine does this by changing a sequence's pages only
// between its steps.
package kvpool

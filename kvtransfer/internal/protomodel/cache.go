package protomodel

import "fmt"

// The prefix-cache extension (DESIGN.md I3, I5; issue 14 item 4, issue 16):
// a separate, smaller model of one decode pool whose pages may be sealed
// (read-only, tagged with a cache domain, reference-counted) and shared by
// later reservations of the same domain, evicted when a reservation needs
// the space, and whose quarantined pages are reclaimed once their writer
// can provably write no more. It reuses Explore; the transfer steps are
// those of Model reduced to what the cache changes (one page per request,
// one writer per transfer).
//
// Three requests reserve one page each — the same one-page prompt
// prefix, so their tags differ only by cache domain and LoRA adapter
// (DESIGN I8a: the chain hash covers the adapter) — from a pool of
// CachePages pages. A CacheConfig says which: Domains (A and B share
// domain 0, C is in domain 1; all on the base model) or Adapters (all in
// domain 0, as when a caller presents one domain for every adapter; A and
// B under adapter 0, C under adapter 1; A's prefill may compute its KV
// under the other adapter, a request misrouted on the way). Actions and
// the code they mirror:
//
//	Reserve        worker.reserve → kvpool.Pool.ReservePrefix: a sealed
//	               page with the request's tag is shared (the ticket holds
//	               it: Ticket.HeldPages, nothing is transferred); else a
//	               free page, else an unreferenced sealed page is evicted
//	               (LRU order is one of the choices) and reserved. Its
//	               writer then opens the transfer: one whose Hello names
//	               another adapter than the reservation's (the owner tag,
//	               kvtransfer's handshake) is refused before it writes, and
//	               the transfer fails (ReserveMisrouted)
//	Write          Stream.pushSHM: the writer's one-sided copy, no check
//	SendComplete   Stream.Complete (possibly short: nothing written)
//	WriterAbort    Stream.abort: DRAIN_ACK, the writer writes no more
//	WriterDie      the prefill process is killed: its write may still land
//	LateWrite      a killed writer's late, torn bytes land in its page
//	DeathConfirmed the writer's end is proven (drain relayed or its
//	               mapping gone): it can write no more
//	Verify         session.complete → verifySHM (header, checksum, fence)
//	Seal           engine.sealPrompt → Pool.Seal after the engine's
//	               Pool.VerifyPrefix of the transferred pages
//	Read           engine step: Pool.VerifyPrefix (shared page: sealed,
//	               tag = the tag the reader computed, referenced by it) or
//	               Pool.Verify (own page), then the forward pass reads it
//	Finish         serve → finish → Pool.Release (drops its reference)
//	Abort          teardown at any stage: BumpEpoch, then Release, or
//	               Quarantine while the writer may still write
//	Reclaim        Pool.ReleaseQuarantined (zeroed) once the writer can
//	               write no more: its drain arrived (late_drain relay) or
//	               its death was confirmed
//	EvictDomain    the tenant of domain 0 is deleted (DESIGN I8, issue
//	               25): the gateway's EvictCacheDomains →
//	               Pool.EvictDomains(final): every sealed page of the
//	               domain leaves the index; an unreferenced one is freed,
//	               a referenced one retired (freed when its last reader
//	               releases it); the domain is remembered, so Seal refuses
//	               it from then on (a request running at the eviction
//	               caches nothing after it). Once, at any moment.
//
// Invariants (CacheModel.Check): I5 — no page is free, sealed or held by
// another request while a writer may still land a write in it; I3 — no
// read that passed the pool's check sees a page that is not whole, not
// verified, or written for another cache domain (a reader never sees an
// unsealed or foreign page); I8a — no read that passed the pool's check
// sees KV computed under another adapter than the reader's; pool identity — a sealed page's reference
// count is the number of holdings that share it, a holding shares only
// sealed pages, at most one sealed page per tag; quiescence — every
// request ends, and a page stays quarantined only while its writer may
// still write; I8 — no reservation made after the eviction hits a page of
// the evicted domain, and at quiescence no page of it is still sealed (the
// deletion freed its memory).

// CachePages and CacheReqs bound the cache model.
const (
	CachePages = 2
	CacheReqs  = 3
)

// CacheConfig is what the cache model's requests are: each one's cache
// domain and LoRA adapter (0 or 1), and whether its prefill may compute
// the KV under the other adapter.
type CacheConfig struct {
	Domain, Adapter [CacheReqs]uint8
	Misrouted       [CacheReqs]bool
}

// The cache model's configurations.
var (
	// Domains: A and B share domain 0, C is in domain 1; the base model.
	Domains = CacheConfig{Domain: [CacheReqs]uint8{0, 0, 1}}
	// Adapters: one domain; A and B under adapter 0, C under adapter 1;
	// A's prefill may compute under adapter 1.
	Adapters = CacheConfig{Adapter: [CacheReqs]uint8{0, 0, 1}, Misrouted: [CacheReqs]bool{true, false, false}}
)

// CacheVariant switches one rule of the cache model to a plausible bug.
type CacheVariant struct {
	// SealBeforeVerify: decode seals a transferred page as soon as
	// COMPLETE arrives, before verifySHM checked it (a short or torn
	// transfer becomes a shared page).
	SealBeforeVerify bool
	// EvictReferenced: eviction may take a sealed page a holding still
	// references.
	EvictReferenced bool
	// TagWithoutDomain: the tag (lookup and verify) leaves out the cache
	// domain, so pages are reused across domains.
	TagWithoutDomain bool
	// PushHeldPages: the sender writes the pages the ticket says decode
	// already holds.
	PushHeldPages bool
	// ReclaimUnconfirmed: quarantined pages are reclaimed once the
	// writer's connection is gone, without its drain or death confirmed.
	ReclaimUnconfirmed bool
	// NoReclaim: quarantined pages stay until a restart.
	NoReclaim bool
	// EvictIdleOnly: the domain eviction frees the unreferenced pages
	// and leaves the referenced ones in the index.
	EvictIdleOnly bool
	// CacheRetired: a retired page is cached again, not freed, when its
	// last reader releases it.
	CacheRetired bool
	// NoTombstone: the pool does not remember the evicted domain, so a
	// request running at the eviction seals its page after it.
	NoTombstone bool
	// TagWithoutAdapter: the tag (chain hash) leaves out the adapter, so
	// pages are reused across adapters of one domain.
	TagWithoutAdapter bool
	// TransferWithoutAdapter: the transfer's owner tag (Hello, page
	// headers) leaves out the adapter, so decode accepts KV a prefill
	// computed under another adapter.
	TransferWithoutAdapter bool
}

// CacheModel is the cache protocol with a variant, over the requests of
// Cfg.
type CacheModel struct {
	V   CacheVariant
	Cfg CacheConfig
}

// Cache page states.
const cpFree, cpOwned, cpSealed, cpQuar uint8 = 0, 1, 2, 3

// Cache request phases and writer states: no writer (a hit: nothing to
// transfer); open; COMPLETE sent; killed (a late write may land); gone
// (drained or its death confirmed).
const crIdle, crHeld, crDone uint8 = 0, 1, 2
const cwNone, cwOpen, cwComplete, cwZombie, cwGone uint8 = 0, 1, 2, 3, 4

// CPage is one page of the cache model's pool.
type CPage struct {
	St    uint8
	Owner int8  // owned or quarantined: the request
	Tag   uint8 // sealed: the domain of its tag
	Refs  uint8 // sealed: holdings that share it
	// Retired: sealed, out of the index (EvictDomain), freed when its
	// last reader releases it.
	Retired bool
	Data    int8 // the writer whose bytes are in the page, -1 none
	Whole   bool // Data is that writer's whole page (not torn)
	// TagAd: sealed, the adapter of its tag. DataAd: the adapter the
	// bytes were computed under.
	TagAd, DataAd uint8
}

// CReq is one request of the cache model.
type CReq struct {
	Ph     uint8
	Page   int8
	Shared bool // the holding shares a sealed page
	Hit    bool // shared at reservation: the ticket holds the page
	Fenced bool
	W      uint8
	// Misrouted: the writer computes under the other adapter.
	Misrouted bool
	Wrote     bool // the writer's one write happened
	Verified  bool
	Failed    bool
	Read      bool
	BadRead   bool // ghost: a read saw a page it must not
	// ghost: a read saw KV computed under another adapter
	AdapterRead bool
	StaleHit    bool // ghost: reserved after the eviction, hit the evicted domain
}

// CacheState is the whole cache model.
type CacheState struct {
	Page [CachePages]CPage
	Req  [CacheReqs]CReq
	// Evicted: domain 0 was evicted for good (its tenant deleted).
	Evicted bool
}

// CacheStep is one action of the cache model.
type CacheStep struct {
	Act string
	R   uint8
	P   int8
}

func (a CacheStep) String() string {
	if a.Act == "EvictDomain" {
		return "EvictDomain(domain 0)"
	}
	if a.P >= 0 {
		return fmt.Sprintf("%s(%s:p%d)", a.Act, reqName(int(a.R)), a.P)
	}
	return fmt.Sprintf("%s(%s)", a.Act, reqName(int(a.R)))
}

// Init is the initial state: every page free.
func (m *CacheModel) Init() CacheState {
	var s CacheState
	for p := range s.Page {
		s.Page[p] = CPage{Owner: -1, Data: -1}
	}
	for r := range s.Req {
		s.Req[r].Page = -1
	}
	return s
}

// tagMatch says whether sealed page g carries the tag request r computes.
func (m *CacheModel) tagMatch(g CPage, r int) bool {
	return g.St == cpSealed && !g.Retired && (g.Tag == m.Cfg.Domain[r] || m.V.TagWithoutDomain) &&
		(g.TagAd == m.Cfg.Adapter[r] || m.V.TagWithoutAdapter)
}

// writerAdapter is the adapter r's writer computes under.
func (m *CacheModel) writerAdapter(q CReq, r int) uint8 {
	if q.Misrouted {
		return m.Cfg.Adapter[r] ^ 1
	}
	return m.Cfg.Adapter[r]
}

// Next calls yield with every enabled action and its successor.
func (m *CacheModel) Next(s CacheState, yield func(CacheStep, CacheState)) {
	for r := range CacheReqs {
		m.next(s, r, yield)
	}
	for p := range CachePages {
		g := s.Page[p]
		if g.St != cpQuar || m.V.NoReclaim {
			continue
		}
		w := s.Req[g.Owner].W
		if w == cwGone || w == cwComplete || m.V.ReclaimUnconfirmed {
			n := s
			n.Page[p] = CPage{Owner: -1, Data: -1} // zeroed and free
			yield(CacheStep{Act: "Reclaim", R: uint8(g.Owner), P: int8(p)}, n)
		}
	}
	if !s.Evicted {
		n := s
		n.Evicted = true
		for p, g := range n.Page {
			switch {
			case g.St != cpSealed || g.Tag != 0 || g.Retired:
			case g.Refs == 0:
				n.Page[p] = CPage{Owner: -1, Data: g.Data, Whole: g.Whole, DataAd: g.DataAd} // free (content stale)
			case !m.V.EvictIdleOnly:
				n.Page[p].Retired = true
			}
		}
		yield(CacheStep{Act: "EvictDomain", P: -1}, n)
	}
}

func (m *CacheModel) next(s CacheState, r int, yield func(CacheStep, CacheState)) {
	q := s.Req[r]
	do := func(a string, p int8, f func(n *CacheState, q *CReq)) {
		n := s
		f(&n, &n.Req[r])
		yield(CacheStep{Act: a, R: uint8(r), P: p}, n)
	}
	if q.Ph == crIdle {
		m.reserve(s, r, yield)
		return
	}
	// The prefill writer.
	switch q.W {
	case cwOpen:
		if !q.Wrote {
			do("Write", q.Page, func(n *CacheState, q *CReq) {
				n.Page[q.Page].Data, n.Page[q.Page].Whole, n.Page[q.Page].DataAd = int8(r), true, m.writerAdapter(*q, r)
				q.Wrote = true
			})
		}
		do("SendComplete", -1, func(n *CacheState, q *CReq) { q.W = cwComplete })
		do("WriterAbort", -1, func(n *CacheState, q *CReq) { q.W = cwGone })
		do("WriterDie", -1, func(n *CacheState, q *CReq) { q.W = cwZombie })
	case cwZombie:
		if !q.Wrote {
			do("LateWrite", q.Page, func(n *CacheState, q *CReq) {
				n.Page[q.Page].Data, n.Page[q.Page].Whole, n.Page[q.Page].DataAd = int8(r), false, m.writerAdapter(*q, r)
				q.Wrote = true
			})
		}
		do("DeathConfirmed", -1, func(n *CacheState, q *CReq) { q.W = cwGone })
	}
	if q.Ph != crHeld {
		return
	}
	p := q.Page
	g := s.Page[p]
	own := !q.Shared && g.St == cpOwned && g.Owner == int8(r) && !q.Fenced
	if q.W == cwComplete && !q.Hit && !q.Verified && !q.Failed {
		// session.complete: fence, header and checksum of the page.
		do("Verify", p, func(n *CacheState, q *CReq) {
			if own && g.Data == int8(r) && g.Whole {
				q.Verified = true
			} else {
				q.Failed = true
			}
		})
	}
	tombstoned := s.Evicted && m.Cfg.Domain[r] == 0 && !m.V.NoTombstone
	if own && !q.Failed && (q.Verified || (m.V.SealBeforeVerify && q.W == cwComplete)) && !m.sealedTag(s, r) && !tombstoned {
		do("Seal", p, func(n *CacheState, q *CReq) {
			n.Page[p] = CPage{Owner: -1, St: cpSealed, Tag: m.Cfg.Domain[r], TagAd: m.Cfg.Adapter[r], Refs: 1, Data: g.Data, Whole: g.Whole, DataAd: g.DataAd}
			q.Shared = true
		})
	}
	if !q.Read && !q.Failed && (q.Shared || q.Verified) {
		do("Read", p, func(n *CacheState, q *CReq) {
			q.Read = true
			if q.Shared && !m.tagMatch(g, r) || !q.Shared && !own {
				q.Failed = true // owner violation: no output
				return
			}
			if g.Data < 0 || !g.Whole || m.Cfg.Domain[g.Data] != m.Cfg.Domain[r] || (!q.Shared && g.Data != int8(r)) {
				q.BadRead = true
			} else if g.DataAd != m.Cfg.Adapter[r] {
				q.AdapterRead = true
			}
		})
	}
	if q.Read && !q.Failed {
		do("Finish", -1, func(n *CacheState, q *CReq) {
			n.unshareOrFree(r, false, m.V.CacheRetired)
			q.Ph = crDone
		})
	}
	if !q.Read || q.Failed {
		do("Abort", -1, func(n *CacheState, q *CReq) {
			q.Fenced = true
			n.unshareOrFree(r, q.W == cwOpen || q.W == cwZombie, m.V.CacheRetired)
			q.Ph = crDone
		})
	}
}

// sealedTag says whether a page sealed with r's tag exists (Seal stops at
// a tag already sealed: the index holds one page per tag).
func (m *CacheModel) sealedTag(s CacheState, r int) bool {
	for _, g := range s.Page {
		if m.tagMatch(g, r) {
			return true
		}
	}
	return false
}

// reserve mirrors ReservePrefix for r's one-page prompt.
func (m *CacheModel) reserve(s CacheState, r int, yield func(CacheStep, CacheState)) {
	for p, g := range s.Page {
		if m.tagMatch(g, r) {
			n := s
			n.Page[p].Refs++
			q := &n.Req[r]
			q.Ph, q.Page, q.Shared, q.Hit = crHeld, int8(p), true, true
			q.StaleHit = s.Evicted && g.Tag == 0
			if m.V.PushHeldPages {
				q.W = cwOpen
			}
			yield(CacheStep{Act: "ReserveHit", R: uint8(r), P: int8(p)}, n)
			return // the index answers one page per tag
		}
	}
	take := func(act string, p int) {
		n := s
		n.Page[p] = CPage{St: cpOwned, Owner: int8(r), Data: -1} // poisoned
		q := &n.Req[r]
		q.Ph, q.Page, q.W = crHeld, int8(p), cwOpen
		yield(CacheStep{Act: act, R: uint8(r), P: int8(p)}, n)
		if !m.Cfg.Misrouted[r] {
			return
		}
		// The writer computed under the other adapter: decode's handshake
		// refuses its owner tag before it writes, and the transfer fails.
		q.Misrouted = true
		if !m.V.TransferWithoutAdapter {
			q.W, q.Failed = cwGone, true
		}
		yield(CacheStep{Act: act + "Misrouted", R: uint8(r), P: int8(p)}, n)
	}
	free := false
	for p, g := range s.Page {
		if g.St == cpFree {
			free = true
			take("Reserve", p)
		}
	}
	if free {
		return
	}
	for p, g := range s.Page {
		if g.St == cpSealed && (g.Refs == 0 || m.V.EvictReferenced) {
			take("EvictReserve", p)
		}
	}
}

// unshareOrFree mirrors Pool.Release and Pool.Quarantine of r's holding:
// a shared page loses r's reference (a retired page is freed with its
// last one, unless cacheRetired); an own page is freed, or quarantined
// when quarantine is set.
func (s *CacheState) unshareOrFree(r int, quarantine, cacheRetired bool) {
	q := &s.Req[r]
	g := &s.Page[q.Page]
	switch {
	case q.Shared:
		if g.St == cpSealed && g.Refs > 0 {
			g.Refs--
		}
		if g.St == cpSealed && g.Refs == 0 && g.Retired {
			if cacheRetired {
				g.Retired = false
			} else {
				*g = CPage{Owner: -1, Data: g.Data, Whole: g.Whole, DataAd: g.DataAd} // free (content stale)
			}
		}
	case g.St == cpOwned && g.Owner == int8(r) && quarantine:
		g.St = cpQuar
	case g.St == cpOwned && g.Owner == int8(r):
		*g = CPage{Owner: -1, Data: g.Data, Whole: g.Whole, DataAd: g.DataAd} // free (content stale)
	}
}

// Check checks the cache model's invariants in s.
func (m *CacheModel) Check(s CacheState, quiescent bool) *Violation {
	for w, q := range s.Req {
		if (q.W == cwOpen || q.W == cwZombie) && !q.Wrote && q.Page >= 0 {
			g := s.Page[q.Page]
			if (g.St != cpOwned && g.St != cpQuar) || g.Owner != int8(w) {
				return &Violation{"I5", fmt.Sprintf("page %d is %s while %s's writer may still write it", q.Page, cpName(g), reqName(w))}
			}
		}
		if q.BadRead {
			return &Violation{"I3", fmt.Sprintf("%s read a page that is unsealed, torn, unverified or of another domain", reqName(w))}
		}
		if q.AdapterRead {
			return &Violation{"I8a", fmt.Sprintf("%s read KV computed under another adapter", reqName(w))}
		}
		if q.StaleHit {
			return &Violation{"I8", fmt.Sprintf("%s reserved after its domain was evicted and hit a page of it", reqName(w))}
		}
	}
	for p, g := range s.Page {
		refs := 0
		for _, q := range s.Req {
			if q.Ph == crHeld && q.Shared && q.Page == int8(p) {
				refs++
			}
		}
		switch {
		case g.St == cpSealed && int(g.Refs) != refs:
			return &Violation{"identity", fmt.Sprintf("sealed page %d counts %d references, %d holdings share it", p, g.Refs, refs)}
		case g.St != cpSealed && refs > 0:
			return &Violation{"identity", fmt.Sprintf("%d holdings share page %d, which is %s", refs, p, cpName(g))}
		}
		for p2 := p + 1; p2 < CachePages; p2++ {
			if g.St == cpSealed && !g.Retired && s.Page[p2].St == cpSealed && !s.Page[p2].Retired && s.Page[p2].Tag == g.Tag && s.Page[p2].TagAd == g.TagAd {
				return &Violation{"identity", fmt.Sprintf("pages %d and %d are sealed with one tag", p, p2)}
			}
		}
	}
	if !quiescent {
		return nil
	}
	for r, q := range s.Req {
		if q.Ph != crDone {
			return &Violation{"quiescence", fmt.Sprintf("%s is stuck", reqName(r))}
		}
	}
	for p, g := range s.Page {
		if s.Evicted && g.St == cpSealed && g.Tag == 0 {
			return &Violation{"I8", fmt.Sprintf("page %d of the evicted domain is still sealed", p)}
		}
		if g.St == cpQuar && s.Req[g.Owner].W != cwZombie {
			return &Violation{"quiescence", fmt.Sprintf("page %d stays quarantined though %s's writer can write no more", p, reqName(int(g.Owner)))}
		}
	}
	return nil
}

func cpName(g CPage) string {
	switch g.St {
	case cpFree:
		return "free"
	case cpSealed:
		return "sealed"
	case cpQuar:
		return fmt.Sprintf("quarantined for %s", reqName(int(g.Owner)))
	}
	return fmt.Sprintf("held by %s", reqName(int(g.Owner)))
}

package kvpool

import (
	"fmt"

	"github.com/warden-ai/warden/internal/isolation"
)

// Verify is the read check (I3), run before a sequence reads its first
// tokens positions (position t in pages[t/PageTokens], slot t%PageTokens):
//   - pages must cover tokens;
//   - every page in pages must be tagged exactly owner (tenant, request
//     and epoch) and be Reserved or InUse — including pages past tokens,
//     which the coming step may write;
//   - every page holding positions < tokens must have Written ≥ the slots
//     read from it, so unwritten memory is never read (I9).
//
// Duplicate pages in the table are not detected: they can only alias the
// owner's own data. A refusal is a *ViolationError for the first bad page,
// counted in Stats.Violations; ErrInvalid (uncounted) if tokens < 0. The
// success path does not allocate.
func (p *Pool) Verify(owner Owner, pages []PageID, tokens int) error {
	return p.VerifyPrefix(owner, pages, tokens, nil)
}

// VerifyPrefix is Verify for a table whose first len(tags) pages are
// shared sealed pages: for those, the reader presents the tags it computed
// itself from its own tokens and cache domain (Tags), and each page must be
// sealed with exactly that tag (same domain, version and chain hash) and
// referenced there by owner's holding; any other page, another domain, a
// different hash or an unsealed page is a violation (ReasonNotSealed,
// ReasonForeignDomain, ReasonTagMismatch, ReasonUnshared), counted as in
// Verify. The other pages are checked as by Verify. ErrInvalid (uncounted)
// if tokens < 0 or there are more tags than pages.
func (p *Pool) VerifyPrefix(owner Owner, pages []PageID, tokens int, tags []Tag) error {
	if tokens < 0 || len(tags) > len(pages) {
		return fmt.Errorf("%w: verify %d tokens with %d prefix tags in %d pages for %v", ErrInvalid, tokens, len(tags), len(pages), owner)
	}
	if !isolation.Enabled() {
		return nil // the benchmark-only build without checks
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.verifyShared(owner, pages, tags)
	if v == nil {
		v = p.verify(owner, pages, tokens, len(tags))
	}
	if v != nil {
		p.violations++
		return v
	}
	return nil
}

// RecordViolation counts in Stats.Violations an owner violation that a
// check outside Verify found: a device kernel comparing the page tags it
// keeps with each sequence's owner (the cuda backend), which reports it as
// an error wrapping ErrOwnerViolation from its forward step.
func (p *Pool) RecordViolation() {
	p.mu.Lock()
	p.violations++
	p.mu.Unlock()
}

// verify does Verify's checks on the pages from index shared on (the
// shared ones are verifyShared's). Called with mu held.
func (p *Pool) verify(owner Owner, pages []PageID, tokens, shared int) *ViolationError {
	pt := p.pageTokens
	if p.pagesFor(tokens) > len(pages) {
		return &ViolationError{Page: NoPage, Want: owner, Written: len(pages) * pt, Needed: tokens, Reason: ReasonShortTable}
	}
	// All pages of one holding share its owner and state, so the owner is
	// compared once and later pages only by holding pointer.
	var ok *holding
	left := max(0, tokens-shared*pt) // positions not yet accounted for
	for _, id := range pages[shared:] {
		if !p.exists(id) {
			return &ViolationError{Page: id, Want: owner, Reason: ReasonNoSuchPage}
		}
		m := &p.pages[id]
		need := min(left, pt) // slots read from this page
		left -= need
		if ok == nil || m.h != ok {
			if r := ownerFault(owner, m); r != 0 {
				return p.violation(owner, id, m, need, r)
			}
			ok = m.h
		}
		if need > int(m.written) {
			return p.violation(owner, id, m, need, ReasonUnwritten)
		}
	}
	return nil
}

// violation builds the error for page id. Called with mu held.
func (p *Pool) violation(owner Owner, id PageID, m *page, needed int, r Reason) *ViolationError {
	v := &ViolationError{Page: id, Want: owner, Written: int(m.written), Needed: needed, Reason: r}
	switch {
	case m.s != nil:
		v.State = Sealed
	case m.h != nil:
		v.Got, v.State = m.h.owner, m.h.state
	}
	return v
}

// ownerFault says why page m may not be accessed by owner as an owned
// page, or 0.
func ownerFault(owner Owner, m *page) Reason {
	h := m.h
	switch {
	case m.s != nil:
		return ReasonSealed
	case h == nil:
		return ReasonFree
	case h.state == Quarantined:
		return ReasonQuarantined
	case h.owner.Tenant != owner.Tenant:
		return ReasonForeignTenant
	case h.owner.Request != owner.Request:
		return ReasonForeignRequest
	case h.owner.Adapter != owner.Adapter:
		return ReasonForeignAdapter
	case h.owner.Epoch != owner.Epoch:
		return ReasonStaleEpoch
	}
	return 0
}

// CheckWrite is the write fence alone: nil if owner may write page now
// (the page is tagged exactly owner, Reserved or InUse, and no release or
// retag is waiting), else a *FenceError, counted in Stats.FenceRejections.
// It changes nothing, so it suits an early rejection of a frame; to copy
// data in use WritePage, which keeps the page from changing hands during
// the copy.
func (p *Pool) CheckWrite(owner Owner, id PageID) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := p.fence(owner, id)
	return err
}

// MarkWritten records that the first slots slots of page hold data written
// for owner (for example by a one-sided writer whose completion was
// verified). Written never decreases: a smaller count than already
// recorded changes nothing. Refusals are those of CheckWrite; ErrInvalid
// (uncounted) if slots is outside 1..PageTokens.
func (p *Pool) MarkWritten(owner Owner, id PageID, slots int) error {
	if slots < 1 || slots > p.pageTokens {
		return fmt.Errorf("%w: mark %d slots of page %d, want 1..%d", ErrInvalid, slots, id, p.pageTokens)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	m, err := p.fence(owner, id)
	if err != nil {
		return err
	}
	m.written = max(m.written, int32(slots))
	return nil
}

// MarkTokensWritten records that positions 0..tokens-1 of the page table
// pages hold data written for owner: the engine's bookkeeping after a step.
// Every page holding one of those positions must pass the fence, or nothing
// is recorded (the first refusal is returned and counted). ErrInvalid
// (uncounted) if tokens is negative or more than pages hold.
func (p *Pool) MarkTokensWritten(owner Owner, pages []PageID, tokens int) error {
	n := 0
	if tokens >= 0 {
		n = p.pagesFor(tokens)
	}
	if tokens < 0 || n > len(pages) {
		return fmt.Errorf("%w: mark %d tokens written in %d pages of %d tokens", ErrInvalid, tokens, len(pages), p.pageTokens)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range pages[:n] {
		if _, err := p.fence(owner, id); err != nil {
			return err
		}
	}
	for i, id := range pages[:n] {
		m := &p.pages[id]
		m.written = max(m.written, int32(min(p.pageTokens, tokens-i*p.pageTokens)))
	}
	return nil
}

// WritePage copies src into page id at byte offset off as owner, then, if
// slots > 0, records that the first slots slots are written (as
// MarkWritten; slots = 0 copies only, for a page whose completion is
// verified later). The fence is checked before copying; during the copy the
// owner's pages cannot be released, retagged or quarantined (those wait),
// so the data can never land in a page that changed hands. The copy runs
// outside the pool's mutex. Refusals are those of CheckWrite; ErrInvalid
// (uncounted) if off and src do not fit in the page or slots is outside
// 0..PageTokens.
func (p *Pool) WritePage(owner Owner, id PageID, off int, src []byte, slots int) error {
	if off < 0 || off > p.pageBytes || len(src) > p.pageBytes-off {
		return fmt.Errorf("%w: write %d bytes at offset %d of a %d-byte page", ErrInvalid, len(src), off, p.pageBytes)
	}
	if slots < 0 || slots > p.pageTokens {
		return fmt.Errorf("%w: mark %d slots of page %d, want 0..%d", ErrInvalid, slots, id, p.pageTokens)
	}
	p.mu.Lock()
	m, err := p.fence(owner, id)
	if err != nil {
		p.mu.Unlock()
		return err
	}
	h := m.h
	h.pins++
	p.mu.Unlock()

	copy(p.Data(id)[off:], src)

	p.mu.Lock()
	defer p.mu.Unlock()
	// While pinned the page kept its owner and epoch (Activate may have
	// moved it to InUse, which changes nothing here).
	m.written = max(m.written, int32(slots))
	h.pins--
	if h.pins == 0 && h.waiters > 0 {
		p.drained.Broadcast()
	}
	return nil
}

// fence checks that owner may write page id now and returns its metadata,
// or a counted *FenceError. Called with mu held.
func (p *Pool) fence(owner Owner, id PageID) (*page, error) {
	if !p.exists(id) {
		p.fenceRejections++
		return nil, &FenceError{Page: id, Want: owner, Reason: ReasonNoSuchPage}
	}
	m := &p.pages[id]
	r := ownerFault(owner, m)
	if r == 0 && m.h.waiters > 0 {
		r = ReasonFencing
	}
	if r == 0 {
		return m, nil
	}
	p.fenceRejections++
	e := &FenceError{Page: id, Want: owner, Reason: r}
	if m.h != nil {
		e.Got, e.State = m.h.owner, m.h.state
	}
	return nil, e
}

package kvpool

import (
	"errors"
	"fmt"
)

// PageID identifies a page of a pool: 0 ≤ id < Stats().Total. It is int32
// like the page IDs of the control protocol.
type PageID int32

// NoPage is the Page of a ViolationError that concerns the page table as a
// whole rather than one page.
const NoPage PageID = -1

// Owner identifies whose data a page holds: a tenant, one of its requests,
// the epoch of that request's current attempt, and the LoRA adapter its
// KV is computed under.
type Owner struct {
	Tenant  string
	Request string
	Epoch   uint64
	// Adapter is the adapter's content hash (lora.Hash), empty for the
	// base model: K/V computed under one adapter are wrong under another,
	// so pages written under it verify only for the same adapter.
	Adapter string
}

// String formats o as tenant/request@epoch (with +adapter-prefix under an
// adapter), or "none" for the zero Owner (the owner of a free page).
func (o Owner) String() string {
	if o == (Owner{}) {
		return "none"
	}
	if o.Adapter != "" {
		return fmt.Sprintf("%s/%s@%d+%.12s", o.Tenant, o.Request, o.Epoch, o.Adapter)
	}
	return fmt.Sprintf("%s/%s@%d", o.Tenant, o.Request, o.Epoch)
}

func (o Owner) valid() bool { return o.Tenant != "" && o.Request != "" }

// ownerKey names a holding: one (tenant, request) holds at most one set of
// pages, whatever its epoch.
type ownerKey struct{ tenant, request string }

func (o Owner) key() ownerKey { return ownerKey{o.Tenant, o.Request} }

// State is the life-cycle state of a page (and of the holding it belongs to).
type State uint8

// Page states; see the package documentation for the transitions.
const (
	// Free pages belong to no one and are the only ones Reserve hands out.
	Free State = iota
	// Reserved pages belong to an owner whose sequence has not started
	// (typically waiting for a KV transfer).
	Reserved
	// InUse pages belong to an owner whose sequence is running.
	InUse
	// Quarantined pages may still receive late one-sided writes: they keep
	// their owner tag but nobody may read or write them, and they are not
	// reused until ReleaseQuarantined.
	Quarantined
	// Sealed pages are read-only prefix-cache pages (see Seal): complete,
	// tagged with a Tag instead of an owner, and shared by every holding
	// that references them. In Stats a sealed page counts as InUse while
	// some holding references it and as Cached when none does.
	Sealed
)

var stateNames = [...]string{Free: "free", Reserved: "reserved", InUse: "in_use", Quarantined: "quarantined", Sealed: "sealed"}

// String returns the state's name as used in logs and metric labels.
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Reason says why a read (Verify) or a write (the fence) was refused.
type Reason uint8

// Refusal reasons, in the order the checks run for one page.
const (
	// ReasonNoSuchPage: the page ID is outside the pool.
	ReasonNoSuchPage Reason = iota + 1
	// ReasonFree: the page belongs to no one.
	ReasonFree
	// ReasonQuarantined: the page is quarantined.
	ReasonQuarantined
	// ReasonForeignTenant: the page belongs to another tenant.
	ReasonForeignTenant
	// ReasonForeignRequest: the page belongs to another request of the
	// same tenant.
	ReasonForeignRequest
	// ReasonForeignAdapter: the page belongs to the same request under
	// another LoRA adapter (or the base model): its K/V are not valid for
	// the reader's weights (DESIGN I8a).
	ReasonForeignAdapter
	// ReasonStaleEpoch: the page belongs to the same request at another
	// epoch (it was fenced by BumpEpoch).
	ReasonStaleEpoch
	// ReasonFencing: a Release, BumpEpoch or Quarantine of the owner is
	// waiting for in-flight writes; new writes are refused (writes only).
	ReasonFencing
	// ReasonUnwritten: a slot to be read was not written for the owner
	// (Verify only).
	ReasonUnwritten
	// ReasonShortTable: the page table has too few pages for the token
	// count (Verify only).
	ReasonShortTable
	// ReasonSealed: the page is a sealed prefix page, read-only, and the
	// access did not present its tag (a write, or a read as an owned page).
	ReasonSealed
	// ReasonNotSealed: the reader presented a prefix tag for a page that
	// is not sealed (free, owned, or still being written).
	ReasonNotSealed
	// ReasonForeignDomain: the sealed page belongs to another cache domain
	// than the one the reader presented.
	ReasonForeignDomain
	// ReasonTagMismatch: the sealed page's chain hash or model/format
	// version differs from the one the reader computed.
	ReasonTagMismatch
	// ReasonUnshared: the sealed page matches, but the reader's holding
	// does not reference it at that place of its table (it could be
	// evicted under the reader).
	ReasonUnshared
)

var reasonNames = [...]string{
	ReasonNoSuchPage:     "no_such_page",
	ReasonFree:           "free",
	ReasonQuarantined:    "quarantined",
	ReasonForeignTenant:  "foreign_tenant",
	ReasonForeignRequest: "foreign_request",
	ReasonForeignAdapter: "foreign_adapter",
	ReasonStaleEpoch:     "stale_epoch",
	ReasonFencing:        "fencing",
	ReasonUnwritten:      "unwritten",
	ReasonShortTable:     "short_table",
	ReasonSealed:         "sealed",
	ReasonNotSealed:      "not_sealed",
	ReasonForeignDomain:  "foreign_domain",
	ReasonTagMismatch:    "tag_mismatch",
	ReasonUnshared:       "unshared",
}

// String returns the reason's name, suitable as a metric label.
func (r Reason) String() string {
	if r != 0 && int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Sentinel errors. Errors returned by the pool wrap one of them (with the
// numbers or owners involved) so callers can map them with errors.Is.
var (
	// ErrInvalid: a malformed argument or configuration (empty tenant or
	// request, token or slot count out of range, ...). A caller bug, never
	// counted as a violation or a fence rejection.
	ErrInvalid = errors.New("kvpool: invalid argument")
	// ErrNeverFits: the request needs more pages than the pool has in
	// total; retrying cannot help.
	ErrNeverFits = errors.New("kvpool: request can never fit in the pool")
	// ErrNoSpace: not enough free pages right now; retrying later may help.
	ErrNoSpace = errors.New("kvpool: not enough free pages")
	// ErrOwnerExists: the (tenant, request) already holds pages, at
	// whatever epoch.
	ErrOwnerExists = errors.New("kvpool: owner already holds pages")
	// ErrNotHeld: the (tenant, request) holds no pages, or holds them under
	// another adapter.
	ErrNotHeld = errors.New("kvpool: owner holds no pages")
	// ErrStaleEpoch: the (tenant, request) holds pages, but at another
	// epoch than the one given.
	ErrStaleEpoch = errors.New("kvpool: epoch differs from the owner's current epoch")
	// ErrState: the owner's pages are in a state that does not allow the
	// operation (for example Release of quarantined pages).
	ErrState = errors.New("kvpool: operation not allowed in the pages' state")
	// ErrOwnerViolation: a read was refused (I3); see ViolationError.
	ErrOwnerViolation = errors.New("kvpool: owner violation")
	// ErrFenced: a write was refused by the fence; see FenceError.
	ErrFenced = errors.New("kvpool: write fenced")
)

// ViolationError reports a refused read: Verify found a page the sequence
// must not read. It wraps ErrOwnerViolation.
type ViolationError struct {
	// Page is the offending page, or NoPage for ReasonShortTable.
	Page PageID
	// Want is the owner that asked to read; Got the page's owner (zero
	// when the page is free or does not exist).
	Want, Got Owner
	// State is the page's state.
	State State
	// Written and Needed are the slots written in the page and the slots
	// the read needs from it; for ReasonShortTable, the token slots the
	// page table covers and the tokens to read.
	Written, Needed int
	// Reason says what was wrong.
	Reason Reason
}

// Error describes the violation without any page content.
func (e *ViolationError) Error() string {
	if e.Reason == ReasonShortTable {
		return fmt.Sprintf("kvpool: owner violation for %v: %s: page table covers %d token slots, %d needed",
			e.Want, e.Reason, e.Written, e.Needed)
	}
	return fmt.Sprintf("kvpool: owner violation on page %d for %v: %s (page owner %v, %s, %d slots written, %d needed)",
		e.Page, e.Want, e.Reason, e.Got, e.State, e.Written, e.Needed)
}

// Unwrap returns ErrOwnerViolation.
func (e *ViolationError) Unwrap() error { return ErrOwnerViolation }

// FenceError reports a refused write: the page is not currently writable by
// the owner that tried. It wraps ErrFenced.
type FenceError struct {
	// Page is the page that was to be written.
	Page PageID
	// Want is the owner that tried to write; Got the page's owner (zero
	// when the page is free or does not exist).
	Want, Got Owner
	// State is the page's state.
	State State
	// Reason says what was wrong.
	Reason Reason
}

// Error describes the refusal.
func (e *FenceError) Error() string {
	return fmt.Sprintf("kvpool: write fenced on page %d for %v: %s (page owner %v, %s)",
		e.Page, e.Want, e.Reason, e.Got, e.State)
}

// Unwrap returns ErrFenced.
func (e *FenceError) Unwrap() error { return ErrFenced }

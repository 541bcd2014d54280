package kvtransfer

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
)

// TransferID names one transfer: 16 random bytes chosen by decode.
type TransferID [16]byte

// String returns the ID in hex, the form the control plane carries.
func (id TransferID) String() string { return hex.EncodeToString(id[:]) }

// ParseTransferID parses the hex form produced by String.
func ParseTransferID(s string) (TransferID, error) {
	var id TransferID
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(id) {
		return id, fmt.Errorf("%w: transfer id %q", ErrInvalidTicket, s)
	}
	copy(id[:], b)
	return id, nil
}

// NewTransferID returns a random transfer ID.
func NewTransferID() TransferID {
	var id TransferID
	rand.Read(id[:]) // crypto/rand.Read never fails (it crashes the program instead)
	return id
}

// AuthTokenSize is the length of a ticket's auth token.
const AuthTokenSize = 32

// NewAuthToken returns a random per-transfer auth token.
func NewAuthToken() []byte {
	b := make([]byte, AuthTokenSize)
	rand.Read(b)
	return b
}

// Backend is the transfer backend.
type Backend string

// Backends.
const (
	// TCP: the receiver reads frames and writes pages itself, fenced.
	TCP Backend = "tcp"
	// SHM: the sender writes pages directly into the receiver's shared
	// memory (one-sided, like RDMA); needs deferred release on abort.
	SHM Backend = "shm"
)

func (b Backend) code() uint8 {
	switch b {
	case TCP:
		return 1
	case SHM:
		return 2
	}
	return 0
}

// Owner is who the destination pages are reserved for.
type Owner struct {
	Tenant  string
	Request string
	Epoch   uint64
	// Adapter is the LoRA adapter's content hash, empty for the base
	// model (kvpool.Owner.Adapter).
	Adapter string
}

// Ticket authorises one transfer of one request's prompt KV into pages
// decode reserved. Decode creates it; the gateway hands it to prefill over
// the authenticated control plane. Field names follow controlpb.Ticket.
type Ticket struct {
	TransferID TransferID
	Owner      Owner
	// Pages are the destination page IDs in sequence order. Decode reserves
	// pages for the whole sequence; the transfer fills the first
	// PromptPages() of them.
	Pages        []int32
	PageTokens   int32
	PromptTokens int64
	// PageBytes is the size of one page's payload.
	PageBytes int64
	// AuthToken is the per-transfer secret (AuthTokenSize bytes) both ends
	// prove they hold.
	AuthToken []byte
	// Addr is decode's transfer address (host:port).
	Addr    string
	Backend Backend
	// ShmPath is decode's shared-memory segment (shm only).
	ShmPath string
	// HeldPages is how many leading prompt pages decode already holds,
	// sealed in its prefix cache (Pages[:HeldPages] are those sealed
	// pages, shared read-only by the reservation): the transfer does not
	// carry them. The sender never pushes them, the receiver refuses a
	// frame for them and verifies only pages [HeldPages, PromptPages()).
	// Each is a full page, so HeldPages×PageTokens ≤ PromptTokens.
	HeldPages int
}

// MaxPageBytes bounds Ticket.PageBytes (offsets travel as uint32).
const MaxPageBytes = 1 << 30

// Validate checks that t is well formed. Both ends call it: the receiver
// on what its Sink returns, the sender on what the gateway sent.
func (t *Ticket) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidTicket, fmt.Sprintf(format, args...))
	}
	switch {
	case t.TransferID == TransferID{}:
		return bad("zero transfer id")
	case t.Owner.Request == "":
		return bad("empty request id")
	case len(t.AuthToken) != AuthTokenSize:
		return bad("auth token is %d bytes, want %d", len(t.AuthToken), AuthTokenSize)
	case t.PageTokens <= 0:
		return bad("page_tokens %d", t.PageTokens)
	case t.PromptTokens <= 0:
		return bad("prompt_tokens %d", t.PromptTokens)
	case t.PageBytes <= 0 || t.PageBytes > MaxPageBytes:
		return bad("page_bytes %d", t.PageBytes)
	case t.Backend.code() == 0:
		return bad("backend %q", t.Backend)
	case t.Backend == SHM && t.ShmPath == "":
		return bad("shm backend without shm path")
	case t.HeldPages < 0 || int64(t.HeldPages) > t.PromptTokens/int64(t.PageTokens):
		return bad("%d held pages of %d tokens for a %d-token prompt", t.HeldPages, t.PageTokens, t.PromptTokens)
	}
	n := t.PromptPages()
	if n > len(t.Pages) {
		return bad("%d prompt tokens need %d pages, ticket has %d", t.PromptTokens, n, len(t.Pages))
	}
	// Sorting a copy finds duplicates several times faster than a set,
	// and both ends validate every ticket.
	pages := slices.Clone(t.Pages[:n])
	slices.Sort(pages)
	if n > 0 && pages[0] < 0 {
		return bad("negative page id %d", pages[0])
	}
	for i := 1; i < n; i++ {
		if pages[i] == pages[i-1] {
			return bad("page id %d listed twice", pages[i])
		}
	}
	return nil
}

// PromptPages is the number of pages the transfer fills.
func (t *Ticket) PromptPages() int {
	pt := int64(t.PageTokens)
	if pt <= 0 || t.PromptTokens <= 0 {
		return 0
	}
	return int((t.PromptTokens + pt - 1) / pt)
}

// SentPages is the number of pages the transfer carries: the prompt's
// pages after the HeldPages decode already holds.
func (t *Ticket) SentPages() int { return t.PromptPages() - t.HeldPages }

// PageSlots is how many token slots of page index i the prompt fills.
func (t *Ticket) PageSlots(i int) int {
	rest := t.PromptTokens - int64(i)*int64(t.PageTokens)
	return int(min(rest, int64(t.PageTokens)))
}

package tenant

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/warden-ai/warden/internal/lora"
)

// Adapter is a LoRA adapter registered for a served base model (issue
// 32): a tenant-owned record naming a content-addressed blob, the PEFT
// files the adapter was uploaded as. Requests select it by Name; only
// Owner and the tenants in SharedWith may use it.
type Adapter struct {
	// Name is "<BaseModel>:<adapter>", what requests send as "model".
	Name      string `json:"name"`
	BaseModel string `json:"base_model"`
	// Owner is the tenant the adapter belongs to: deleting the tenant
	// deletes the adapter.
	Owner string `json:"owner"`
	// SharedWith are other tenants that may use the adapter, sorted.
	SharedWith []string `json:"shared_with,omitempty"`
	// Hash is the content hash of the two files (lora.Hash): the
	// adapter's identity on workers and in every KV page's owner.
	Hash string `json:"hash"`
	// Bytes is the adapter's size in a worker's adapter memory
	// (lora.Adapter.Bytes), what placement counts against it.
	Bytes int64 `json:"bytes"`
	// Rank is r; Targets the projections it updates (lora.Module names).
	Rank    int      `json:"rank"`
	Targets []string `json:"targets"`
	// Pinned adapters are loaded pinned: never evicted from a worker's
	// adapter memory for another.
	Pinned    bool      `json:"pinned"`
	CreatedAt time.Time `json:"created_at"`
}

// AdapterName is the registry name of adapter name on base model base.
func AdapterName(base, name string) string { return base + ":" + name }

// Validate checks the record's syntax (not that its tenants exist):
// ErrInvalid.
func (a Adapter) Validate() error {
	if err := ValidateModelName(a.BaseModel); err != nil {
		return fmt.Errorf("base model: %w", err)
	}
	if err := ValidateModelName(a.Name); err != nil {
		return err
	}
	short, ok := strings.CutPrefix(a.Name, a.BaseModel+":")
	if !ok || short == "" {
		return fmt.Errorf("%w: adapter name %q must be %q followed by the adapter's name", ErrInvalid, a.Name, a.BaseModel+":")
	}
	if err := ValidateID(a.Owner); err != nil {
		return fmt.Errorf("owner: %w", err)
	}
	for _, id := range a.SharedWith {
		if err := ValidateID(id); err != nil {
			return fmt.Errorf("shared_with: %w", err)
		}
		if id == a.Owner {
			return fmt.Errorf("%w: shared_with names the owner %q", ErrInvalid, id)
		}
	}
	switch {
	case !lora.ValidHash(a.Hash):
		return fmt.Errorf("%w: adapter hash %q is not 64 lowercase hex digits", ErrInvalid, a.Hash)
	case a.Bytes <= 0:
		return fmt.Errorf("%w: adapter bytes must be positive, got %d", ErrInvalid, a.Bytes)
	case a.Rank < 1 || a.Rank > lora.MaxRank:
		return fmt.Errorf("%w: adapter rank must be between 1 and %d, got %d", ErrInvalid, lora.MaxRank, a.Rank)
	case len(a.Targets) == 0:
		return fmt.Errorf("%w: adapter targets no module", ErrInvalid)
	}
	for _, m := range a.Targets {
		if !slices.Contains(lora.Modules[:], lora.Module(m)) {
			return fmt.Errorf("%w: adapter target %q is not a supported module", ErrInvalid, m)
		}
	}
	return nil
}

// Normalize validates a and returns it with SharedWith sorted and
// deduplicated.
func (a Adapter) Normalize() (Adapter, error) {
	a.SharedWith = slices.Compact(slices.Sorted(slices.Values(a.SharedWith)))
	a.Targets = slices.Clone(a.Targets)
	if len(a.SharedWith) == 0 {
		a.SharedWith = nil
	}
	return a, a.Validate()
}

// MayUse reports whether tenantID may run requests under the adapter.
func (a Adapter) MayUse(tenantID string) bool {
	return a.Owner == tenantID || slices.Contains(a.SharedWith, tenantID)
}

// Clone returns a copy sharing no slices with a.
func (a Adapter) Clone() Adapter {
	a.SharedWith = slices.Clone(a.SharedWith)
	a.Targets = slices.Clone(a.Targets)
	return a
}

// AdapterChunkBytes bounds one stored piece of an adapter's files: a
// store keeps a large adapter as many values of at most this size.
const AdapterChunkBytes = 1 << 20

// AdapterStore holds LoRA adapters: records by name and their files by
// content hash, shared by all gateway replicas. Both tenant stores
// implement it; deleting a tenant (Store.DeleteTenant) deletes the
// adapters it owns and withdraws its shares of others'.
type AdapterStore interface {
	// PutAdapter stores a new adapter with its files, whose lora.Hash
	// must be a.Hash; it sets CreatedAt. ErrInvalid, ErrExists (the
	// name), ErrNotFound (the owner or a tenant of SharedWith).
	PutAdapter(ctx context.Context, a Adapter, configJSON, weights []byte) (Adapter, error)
	// GetAdapter returns the adapter named name: ErrNotFound.
	GetAdapter(ctx context.Context, name string) (Adapter, error)
	// ListAdapters returns every adapter sorted by name.
	ListAdapters(ctx context.Context) ([]Adapter, error)
	// UpdateAdapter replaces SharedWith and Pinned of the adapter named
	// a.Name: ErrInvalid, ErrNotFound (the adapter or a tenant of
	// SharedWith).
	UpdateAdapter(ctx context.Context, a Adapter) (Adapter, error)
	// DeleteAdapter removes the adapter; its files go with the last name
	// referencing them: ErrNotFound.
	DeleteAdapter(ctx context.Context, name string) error
	// AdapterFiles returns the files stored under hash: ErrNotFound.
	AdapterFiles(ctx context.Context, hash string) (configJSON, weights []byte, err error)
}

// CheckAdapterFiles checks that the files are a's: ErrInvalid.
func CheckAdapterFiles(a Adapter, configJSON, weights []byte) error {
	if h := lora.Hash(configJSON, weights); h != a.Hash {
		return fmt.Errorf("%w: the adapter's files hash to %s, the record says %s", ErrInvalid, h, a.Hash)
	}
	return nil
}

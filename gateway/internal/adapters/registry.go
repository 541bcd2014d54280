package adapters

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/worker/model"
)

var (
	// ErrNotFound: no adapter of that name, or the tenant may not use it
	// (the two are indistinguishable to the tenant).
	ErrNotFound = errors.New("adapters: no such adapter")
	// ErrBaseUnknown: no worker serving the base model has registered, so
	// its shape (what an adapter is checked against) is unknown.
	ErrBaseUnknown = errors.New("adapters: base model not served")
	// ErrTooLarge: the adapter's files exceed the configured bound.
	ErrTooLarge = errors.New("adapters: adapter too large")
)

// Shapes gives the configuration of a served base model as far as an
// adapter's shapes depend on it, or false when no worker of it has
// registered.
type Shapes func(base string) (*model.Config, bool)

// Registry registers and resolves adapters. It is safe for concurrent
// use; its state lives in the store, shared by all gateway replicas.
type Registry struct {
	store    tenant.AdapterStore
	shapes   Shapes
	maxBytes int64
}

// New returns the registry of the adapters in store. maxBytes bounds
// an adapter's two files together.
func New(store tenant.AdapterStore, shapes Shapes, maxBytes int64) *Registry {
	return &Registry{store: store, shapes: shapes, maxBytes: maxBytes}
}

// Store is the store the registry keeps adapters in.
func (r *Registry) Store() tenant.AdapterStore { return r.store }

// MaxBytes bounds an adapter's two files together.
func (r *Registry) MaxBytes() int64 { return r.maxBytes }

// Upload is an adapter to register.
type Upload struct {
	// Base is the served model the adapter is for; Name its name there
	// (the registry name is Base:Name).
	Base, Name string
	Owner      string
	SharedWith []string
	Pin        bool
	// ConfigJSON and Weights are adapter_config.json and
	// adapter_model.safetensors.
	ConfigJSON, Weights []byte
}

// Register checks an upload against its base model and stores it. Errors
// wrap lora.ErrInvalid (the files), ErrTooLarge, ErrBaseUnknown, or the
// store's tenant.ErrInvalid, ErrExists, ErrNotFound (a tenant),
// ErrUnavailable.
func (r *Registry) Register(ctx context.Context, u Upload) (tenant.Adapter, error) {
	if n := int64(len(u.ConfigJSON) + len(u.Weights)); n > r.maxBytes {
		return tenant.Adapter{}, fmt.Errorf("%w: the adapter's files are %d bytes, over the limit of %d (adapters.max_bytes)", ErrTooLarge, n, r.maxBytes)
	}
	if err := tenant.ValidateModelName(u.Base); err != nil {
		return tenant.Adapter{}, fmt.Errorf("base model: %w", err)
	}
	shape, ok := r.shapes(u.Base)
	if !ok {
		return tenant.Adapter{}, fmt.Errorf("%w: no worker serving %q has registered, so the adapter cannot be checked against it", ErrBaseUnknown, u.Base)
	}
	parsed, err := lora.Parse(u.ConfigJSON, u.Weights, shape)
	if err != nil {
		return tenant.Adapter{}, err
	}
	targets := make([]string, len(parsed.Config.Targets))
	for i, m := range parsed.Config.Targets {
		targets[i] = string(m)
	}
	a := tenant.Adapter{
		Name: tenant.AdapterName(u.Base, u.Name), BaseModel: u.Base, Owner: u.Owner, SharedWith: u.SharedWith,
		Hash: parsed.Hash, Bytes: parsed.Bytes, Rank: parsed.Config.Rank, Targets: targets, Pinned: u.Pin,
	}
	if u.Name == "" {
		return tenant.Adapter{}, fmt.Errorf("%w: the adapter needs a name", tenant.ErrInvalid)
	}
	return r.store.PutAdapter(ctx, a, u.ConfigJSON, u.Weights)
}

// Resolve returns the adapter named name if tenantID may use it:
// ErrNotFound otherwise, or the store's ErrUnavailable.
func (r *Registry) Resolve(ctx context.Context, tenantID, name string) (tenant.Adapter, error) {
	if tenant.ValidateModelName(name) != nil {
		return tenant.Adapter{}, ErrNotFound
	}
	a, err := r.store.GetAdapter(ctx, name)
	switch {
	case errors.Is(err, tenant.ErrNotFound):
		return tenant.Adapter{}, ErrNotFound
	case err != nil:
		return tenant.Adapter{}, err
	case !a.MayUse(tenantID):
		return tenant.Adapter{}, ErrNotFound
	}
	return a, nil
}

// Usable returns the adapters tenantID may use, sorted by name.
func (r *Registry) Usable(ctx context.Context, tenantID string) ([]tenant.Adapter, error) {
	all, err := r.store.ListAdapters(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(a tenant.Adapter) bool { return !a.MayUse(tenantID) }), nil
}

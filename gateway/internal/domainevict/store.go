package domainevict

import (
	"context"
	"fmt"

	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/tenant"
)

// Store is a tenant.Store whose changes that end a cache domain evict it
// from the workers once they succeeded: DeleteTenant, UpdateTenant
// (disabled, or prefix_cache changed) and RevokeKey (a tenant with
// per-key domains). Everything else is the wrapped store's.
type Store struct {
	tenant.Store
	ev *Evictor
}

// Wrap returns s evicting through ev.
func Wrap(s tenant.Store, ev *Evictor) Store { return Store{Store: s, ev: ev} }

// DeleteTenant implements tenant.Store: the tenant's domains are evicted
// after the deletion. They are listed before it, while the adapters the
// tenant owns (deleted with it) are still there to list.
func (s Store) DeleteTenant(ctx context.Context, id string) error {
	t, keys, err := s.current(ctx, id)
	if err != nil {
		return err
	}
	domains := s.ev.tenantDomains(ctx, t.ID, t.Incarnation, keys)
	if err := s.Store.DeleteTenant(ctx, id); err != nil {
		return err
	}
	s.ev.Evict(ctx, controlpb.EvictTenantDeleted, domains)
	return nil
}

// UpdateTenant implements tenant.Store: disabling the tenant or changing
// its prefix_cache setting evicts its domains after the update.
func (s Store) UpdateTenant(ctx context.Context, t tenant.Tenant) (tenant.Tenant, error) {
	old, keys, err := s.current(ctx, t.ID)
	if err != nil {
		return tenant.Tenant{}, err
	}
	upd, err := s.Store.UpdateTenant(ctx, t)
	if err != nil {
		return tenant.Tenant{}, err
	}
	reason := ""
	switch {
	case upd.Disabled && !old.Disabled:
		reason = controlpb.EvictTenantDisabled
	case mode(upd.PrefixCache) != mode(old.PrefixCache):
		reason = controlpb.EvictPrefixCacheChanged
	}
	if reason != "" {
		s.ev.Evict(ctx, reason, s.ev.tenantDomains(ctx, old.ID, old.Incarnation, keys))
	}
	return upd, nil
}

// RevokeKey implements tenant.Store: the key's own domain is evicted
// after the revocation when its tenant has per-key domains.
func (s Store) RevokeKey(ctx context.Context, keyID string) error {
	if err := s.Store.RevokeKey(ctx, keyID); err != nil {
		return err
	}
	keys, err := s.ListKeys(ctx, tenant.KeyFilter{Prefix: tenant.KeyDisplayPrefix(keyID)})
	if err != nil {
		return nil // revoked; the key's pages age out, unreachable (its key ID is never reused)
	}
	for _, k := range keys {
		if k.ID != keyID {
			continue
		}
		t, err := s.GetTenant(ctx, k.TenantID)
		if err != nil || mode(t.PrefixCache) != cachekey.ModeKey {
			return nil // the tenant is gone (its deletion evicted) or shares one domain
		}
		s.ev.Evict(ctx, controlpb.EvictKeyRevoked, s.ev.keyDomains(ctx, t.ID, t.Incarnation, keyID))
	}
	return nil
}

// EvictAdapter evicts the cache domains of tenant id's requests under the
// LoRA adapter whose content hash is adapter (the tenant domain's and
// every key's): the adapter registry calls it once the tenant may no
// longer use the adapter (deleted, or no longer shared with the tenant).
// A tenant that is gone has nothing left to evict (its deletion did).
func (s Store) EvictAdapter(ctx context.Context, id, adapter string) error {
	if adapter == "" {
		return fmt.Errorf("evict adapter domains of tenant %q: no adapter", id)
	}
	t, keys, err := s.current(ctx, id)
	if err != nil {
		return err
	}
	s.ev.Evict(ctx, controlpb.EvictAdapterRemoved, s.ev.scopeDomains(t.ID, t.Incarnation, keys, adapter))
	return nil
}

// current reads tenant id and the IDs of its keys before a change.
func (s Store) current(ctx context.Context, id string) (tenant.Tenant, []string, error) {
	t, err := s.GetTenant(ctx, id)
	if err != nil {
		return tenant.Tenant{}, nil, err
	}
	keys, err := s.ListKeys(ctx, tenant.KeyFilter{TenantID: id})
	if err != nil {
		return tenant.Tenant{}, nil, fmt.Errorf("keys of tenant %q: %w", id, err)
	}
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = k.ID
	}
	return t, ids, nil
}

// mode is m with "" read as its meaning, cachekey.ModeTenant.
func mode(m cachekey.Mode) cachekey.Mode {
	if m == "" {
		return cachekey.ModeTenant
	}
	return m
}

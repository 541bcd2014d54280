package memstore

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/warden-ai/warden/tenant"
)

// CreateTenant implements tenant.Store.
func (s *Store) CreateTenant(_ context.Context, t tenant.Tenant) (tenant.Tenant, error) {
	t, err := t.Normalize()
	if err != nil {
		return tenant.Tenant{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tenants[t.ID]; ok {
		return tenant.Tenant{}, fmt.Errorf("tenant %q: %w", t.ID, tenant.ErrExists)
	}
	t.CreatedAt, t.Incarnation = s.now().UTC(), tenant.NewIncarnation()
	s.tenants[t.ID] = t
	return cloneTenant(t), nil
}

// GetTenant implements tenant.Store.
func (s *Store) GetTenant(_ context.Context, id string) (tenant.Tenant, error) {
	if err := tenant.ValidateID(id); err != nil {
		return tenant.Tenant{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.tenants[id]
	if !ok {
		return tenant.Tenant{}, fmt.Errorf("tenant %q: %w", id, tenant.ErrNotFound)
	}
	return cloneTenant(t), nil
}

// ListTenants implements tenant.Store.
func (s *Store) ListTenants(context.Context) ([]tenant.Tenant, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]tenant.Tenant, 0, len(s.tenants))
	for _, id := range slices.Sorted(maps.Keys(s.tenants)) {
		out = append(out, cloneTenant(s.tenants[id]))
	}
	return out, nil
}

// UpdateTenant implements tenant.Store.
func (s *Store) UpdateTenant(_ context.Context, t tenant.Tenant) (tenant.Tenant, error) {
	t, err := t.Normalize()
	if err != nil {
		return tenant.Tenant{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.tenants[t.ID]
	if !ok {
		return tenant.Tenant{}, fmt.Errorf("tenant %q: %w", t.ID, tenant.ErrNotFound)
	}
	t.CreatedAt, t.Incarnation = old.CreatedAt, old.Incarnation
	s.tenants[t.ID] = t
	return cloneTenant(t), nil
}

// DeleteTenant implements tenant.Store.
func (s *Store) DeleteTenant(_ context.Context, id string) error {
	if err := tenant.ValidateID(id); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tenants[id]; !ok {
		return fmt.Errorf("tenant %q: %w", id, tenant.ErrNotFound)
	}
	now := s.now().UTC()
	for kid, k := range s.keys {
		if k.info.TenantID == id && k.info.RevokedAt == nil {
			k.info.RevokedAt = &now
			s.keys[kid] = k
		}
	}
	delete(s.tenants, id)
	delete(s.limiters, id)
	s.dropTenantAdapters(id)
	return nil
}

func cloneTenant(t tenant.Tenant) tenant.Tenant {
	t.Limits.AllowedModels = slices.Clone(t.Limits.AllowedModels)
	if t.CachedTokenRate != nil {
		r := *t.CachedTokenRate
		t.CachedTokenRate = &r
	}
	return t
}

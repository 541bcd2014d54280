package memstore

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/warden-ai/warden/tenant"
)

// adapterFiles are an adapter's two files, kept once per content hash.
type adapterFiles struct{ config, weights []byte }

// PutAdapter implements tenant.AdapterStore.
func (s *Store) PutAdapter(_ context.Context, a tenant.Adapter, configJSON, weights []byte) (tenant.Adapter, error) {
	a, err := a.Normalize()
	if err != nil {
		return tenant.Adapter{}, err
	}
	if err := tenant.CheckAdapterFiles(a, configJSON, weights); err != nil {
		return tenant.Adapter{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.adapters[a.Name]; ok {
		return tenant.Adapter{}, fmt.Errorf("adapter %q: %w", a.Name, tenant.ErrExists)
	}
	if err := s.tenantsExist(append([]string{a.Owner}, a.SharedWith...)); err != nil {
		return tenant.Adapter{}, err
	}
	a.CreatedAt = s.now().UTC()
	s.adapters[a.Name] = a
	if _, ok := s.blobs[a.Hash]; !ok {
		s.blobs[a.Hash] = adapterFiles{slices.Clone(configJSON), slices.Clone(weights)}
	}
	return a.Clone(), nil
}

// tenantsExist reports the first of ids that is no tenant: ErrNotFound.
func (s *Store) tenantsExist(ids []string) error {
	for _, id := range ids {
		if _, ok := s.tenants[id]; !ok {
			return fmt.Errorf("tenant %q: %w", id, tenant.ErrNotFound)
		}
	}
	return nil
}

// GetAdapter implements tenant.AdapterStore.
func (s *Store) GetAdapter(_ context.Context, name string) (tenant.Adapter, error) {
	if err := tenant.ValidateModelName(name); err != nil {
		return tenant.Adapter{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	a, ok := s.adapters[name]
	if !ok {
		return tenant.Adapter{}, fmt.Errorf("adapter %q: %w", name, tenant.ErrNotFound)
	}
	return a.Clone(), nil
}

// ListAdapters implements tenant.AdapterStore.
func (s *Store) ListAdapters(context.Context) ([]tenant.Adapter, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]tenant.Adapter, 0, len(s.adapters))
	for _, name := range slices.Sorted(maps.Keys(s.adapters)) {
		out = append(out, s.adapters[name].Clone())
	}
	return out, nil
}

// UpdateAdapter implements tenant.AdapterStore.
func (s *Store) UpdateAdapter(_ context.Context, a tenant.Adapter) (tenant.Adapter, error) {
	if err := tenant.ValidateModelName(a.Name); err != nil {
		return tenant.Adapter{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.adapters[a.Name]
	if !ok {
		return tenant.Adapter{}, fmt.Errorf("adapter %q: %w", a.Name, tenant.ErrNotFound)
	}
	cur.SharedWith, cur.Pinned = a.SharedWith, a.Pinned
	cur, err := cur.Normalize()
	if err != nil {
		return tenant.Adapter{}, err
	}
	if err := s.tenantsExist(cur.SharedWith); err != nil {
		return tenant.Adapter{}, err
	}
	s.adapters[a.Name] = cur
	return cur.Clone(), nil
}

// DeleteAdapter implements tenant.AdapterStore.
func (s *Store) DeleteAdapter(_ context.Context, name string) error {
	if err := tenant.ValidateModelName(name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.adapters[name]; !ok {
		return fmt.Errorf("adapter %q: %w", name, tenant.ErrNotFound)
	}
	s.deleteAdapter(name)
	return nil
}

// deleteAdapter removes an adapter and, with its last name, its files.
// The caller holds s.mu.
func (s *Store) deleteAdapter(name string) {
	hash := s.adapters[name].Hash
	delete(s.adapters, name)
	for _, a := range s.adapters {
		if a.Hash == hash {
			return
		}
	}
	delete(s.blobs, hash)
}

// dropTenantAdapters deletes the adapters tenant id owns and withdraws its
// shares of the others (a re-created tenant of the same ID is another
// incarnation: it inherits nothing). The caller holds s.mu.
func (s *Store) dropTenantAdapters(id string) {
	for name, a := range s.adapters {
		switch {
		case a.Owner == id:
			s.deleteAdapter(name)
		case slices.Contains(a.SharedWith, id):
			a.SharedWith = slices.DeleteFunc(slices.Clone(a.SharedWith), func(t string) bool { return t == id })
			s.adapters[name] = a
		}
	}
}

// AdapterFiles implements tenant.AdapterStore.
func (s *Store) AdapterFiles(_ context.Context, hash string) ([]byte, []byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	f, ok := s.blobs[hash]
	if !ok {
		return nil, nil, fmt.Errorf("adapter files %s: %w", hash, tenant.ErrNotFound)
	}
	return slices.Clone(f.config), slices.Clone(f.weights), nil
}

package memstore

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/warden-ai/warden/tenant"
)

// SetAlias implements tenant.AliasStore.
func (s *Store) SetAlias(_ context.Context, a tenant.Alias) error {
	if err := a.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.aliases[a.Name] = a.Target
	return nil
}

// DeleteAlias implements tenant.AliasStore.
func (s *Store) DeleteAlias(_ context.Context, name string) error {
	if err := tenant.ValidateModelName(name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.aliases[name]; !ok {
		return fmt.Errorf("alias %q: %w", name, tenant.ErrNotFound)
	}
	delete(s.aliases, name)
	return nil
}

// ListAliases implements tenant.AliasStore.
func (s *Store) ListAliases(context.Context) ([]tenant.Alias, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]tenant.Alias, 0, len(s.aliases))
	for _, name := range slices.Sorted(maps.Keys(s.aliases)) {
		out = append(out, tenant.Alias{Name: name, Target: s.aliases[name]})
	}
	return out, nil
}

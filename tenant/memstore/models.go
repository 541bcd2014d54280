package memstore

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/warden-ai/warden/tenant"
)

// SetModelLimits implements tenant.Store.
func (s *Store) SetModelLimits(_ context.Context, m tenant.ModelLimits) error {
	m, err := m.Normalize()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.models[m.Model] = m
	return nil
}

// GetModelLimits implements tenant.Store.
func (s *Store) GetModelLimits(_ context.Context, model string) (tenant.ModelLimits, error) {
	if err := tenant.ValidateModelName(model); err != nil {
		return tenant.ModelLimits{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	m, ok := s.models[model]
	if !ok {
		return tenant.ModelLimits{}, fmt.Errorf("model limits %q: %w", model, tenant.ErrNotFound)
	}
	m.AllowedTenants = slices.Clone(m.AllowedTenants)
	return m, nil
}

// ListModelLimits implements tenant.ModelLimitsSource.
func (s *Store) ListModelLimits(context.Context) ([]tenant.ModelLimits, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]tenant.ModelLimits, 0, len(s.models))
	for _, name := range slices.Sorted(maps.Keys(s.models)) {
		m := s.models[name]
		m.AllowedTenants = slices.Clone(m.AllowedTenants)
		out = append(out, m)
	}
	return out, nil
}

// DeleteModelLimits implements tenant.Store.
func (s *Store) DeleteModelLimits(_ context.Context, model string) error {
	if err := tenant.ValidateModelName(model); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.models[model]; !ok {
		return fmt.Errorf("model limits %q: %w", model, tenant.ErrNotFound)
	}
	delete(s.models, model)
	return nil
}

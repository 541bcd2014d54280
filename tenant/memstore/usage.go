package memstore

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/warden-ai/warden/tenant"
)

type tenantDay struct{ tenant, day string }

// Usage implements tenant.Store.
func (s *Store) Usage(_ context.Context, tenantID string, from, to time.Time) ([]tenant.Usage, error) {
	days, err := tenant.UsageDays(tenantID, from, to)
	if err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []tenant.Usage
	for _, day := range days {
		byModel := s.usage[tenantDay{tenantID, day}]
		for _, m := range slices.Sorted(maps.Keys(byModel)) {
			out = append(out, *byModel[m])
		}
	}
	return out, nil
}

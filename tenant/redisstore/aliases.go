package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/warden-ai/warden/tenant"
)

// Aliases live in one hash, alias name → target.

// SetAlias implements tenant.AliasStore.
func (s *Store) SetAlias(ctx context.Context, a tenant.Alias) error {
	if err := a.Validate(); err != nil {
		return err
	}
	if err := s.rdb.HSet(ctx, s.key("aliases"), a.Name, a.Target).Err(); err != nil {
		return s.fail(ctx, "set alias", err)
	}
	s.ok()
	return nil
}

// DeleteAlias implements tenant.AliasStore.
func (s *Store) DeleteAlias(ctx context.Context, name string) error {
	if err := tenant.ValidateModelName(name); err != nil {
		return err
	}
	n, err := s.rdb.HDel(ctx, s.key("aliases"), name).Result()
	if err != nil {
		return s.fail(ctx, "delete alias", err)
	}
	s.ok()
	if n == 0 {
		return fmt.Errorf("alias %q: %w", name, tenant.ErrNotFound)
	}
	return nil
}

// ListAliases implements tenant.AliasStore.
func (s *Store) ListAliases(ctx context.Context) ([]tenant.Alias, error) {
	all, err := s.rdb.HGetAll(ctx, s.key("aliases")).Result()
	if err != nil {
		return nil, s.fail(ctx, "list aliases", err)
	}
	s.ok()
	out := make([]tenant.Alias, 0, len(all))
	for name, target := range all {
		out = append(out, tenant.Alias{Name: name, Target: target})
	}
	slices.SortFunc(out, func(a, b tenant.Alias) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

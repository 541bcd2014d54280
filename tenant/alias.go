package tenant

import (
	"context"
	"fmt"
)

// Alias is a model alias set by the platform team: requests naming Name
// are served by the model Target (see gateway/internal/aliases).
type Alias struct {
	Name   string `json:"name"`
	Target string `json:"target"`
}

// Validate checks both names are model names and differ: ErrInvalid.
func (a Alias) Validate() error {
	if err := ValidateModelName(a.Name); err != nil {
		return err
	}
	if err := ValidateModelName(a.Target); err != nil {
		return fmt.Errorf("target: %w", err)
	}
	if a.Name == a.Target {
		return fmt.Errorf("%w: alias %q must not name itself as its target", ErrInvalid, a.Name)
	}
	return nil
}

// AliasStore holds model aliases, shared by all gateway replicas.
type AliasStore interface {
	// SetAlias creates an alias or points it at another target:
	// ErrInvalid.
	SetAlias(ctx context.Context, a Alias) error
	// DeleteAlias removes an alias: ErrInvalid, ErrNotFound.
	DeleteAlias(ctx context.Context, name string) error
	// ListAliases returns every alias sorted by name.
	ListAliases(ctx context.Context) ([]Alias, error)
}

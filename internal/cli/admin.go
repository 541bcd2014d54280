package cli

import (
	"context"
	"errors"
)

// runAdmin is not written yet.
func runAdmin(context.Context, *env, []string) error { return errors.New("admin: not implemented yet") }

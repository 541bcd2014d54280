package cli

import (
	"context"
	"errors"
)

// runUp is not written yet.
func runUp(context.Context, *env, []string) error { return errors.New("up: not implemented yet") }

package cli

import (
	"context"
	"errors"
)

// runCheck is not written yet.
func runCheck(context.Context, *env, []string) error { return errors.New("check: not implemented yet") }

package cli

import (
	"context"
	"errors"
)

// runGateway is not written yet.
func runGateway(context.Context, *env, []string) error { return errors.New("gateway: not implemented yet") }

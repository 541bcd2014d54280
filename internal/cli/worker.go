package cli

import (
	"context"
	"errors"
)

// runWorker is not written yet.
func runWorker(context.Context, *env, []string) error { return errors.New("worker: not implemented yet") }

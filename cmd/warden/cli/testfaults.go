//go:build !warden_faults

package cli

import (
	"log/slog"

	"github.com/warden-ai/warden/worker"
)

// testFaults returns the worker options of a test-only fault build: none
// here. A binary built with -tags warden_faults reads WARDEN_TEST_FAULTS
// (testfaults_on.go); no other build can inject a fault.
func testFaults(*slog.Logger) ([]worker.Option, error) { return nil, nil }

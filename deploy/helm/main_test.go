package helm_test

import (
	"fmt"
	"log/slog"
	"os"
	"testing"

	"github.com/warden-ai/warden/test/harness"
)

// env is the warden binary, dev PKI and models the rendered pods run
// with (run_test.go).
var env *harness.Env

func TestMain(m *testing.M) {
	// The Helm SDK logs through slog (e.g. a symlinked chart file); lint
	// findings come back as values and fail the tests that see them.
	slog.SetDefault(slog.New(slog.DiscardHandler))
	var err error
	if env, err = harness.Setup(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

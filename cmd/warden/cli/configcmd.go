package cli

import (
	"context"
	"fmt"

	"github.com/warden-ai/warden/config"
)

// runConfig is the `warden config` group: print.
func runConfig(ctx context.Context, e *env, args []string) error {
	if len(args) > 0 && args[0] == "print" {
		return runConfigPrint(ctx, e, args[1:])
	}
	fmt.Fprintln(e.stderr, "usage: warden config print [--config FILE]")
	return groupUsageResult(args)
}

// runConfigPrint prints the effective configuration: the embedded
// defaults, the file and the WARDEN_* environment, as YAML that Load
// accepts, with secrets redacted.
func runConfigPrint(_ context.Context, e *env, args []string) error {
	fs := newFlags(e, "config print", "config print [--config FILE]")
	path := fs.String("config", "", "YAML config file (default: the embedded defaults and WARDEN_* variables only)")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return err
	}
	out, err := cfg.Render()
	if err != nil {
		return err
	}
	_, err = e.stdout.Write(out)
	return err
}

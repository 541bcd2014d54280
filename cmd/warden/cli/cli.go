// Package cli implements warden's subcommands. cmd/warden is a thin main
// over Main.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/warden-ai/warden/internal/brokenmode"
	"github.com/warden-ai/warden/internal/isolation"
)

// Version is set at build time with -ldflags "-X github.com/warden-ai/warden/cmd/warden/cli.Version=…".
var Version = "dev"

// command is one subcommand (or group of subcommands).
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *env, args []string) error
	// serves marks the commands that serve tenants; a benchmark-only
	// build without isolation checks refuses to run them.
	serves bool
}

// env carries the process's streams to a command.
type env struct {
	stdout, stderr io.Writer
}

// errUsage marks an error already explained by a usage message.
var errUsage = errors.New("usage")

func commands() []command {
	return []command{
		{"up", "run a gateway and workers on this machine for trying warden out", runUp, true},
		{"gateway", "run the gateway", runGateway, true},
		{"worker", "run a worker (--role prefill|decode|both)", runWorker, true},
		{"model", "model tools: init", runModel, false},
		{"config", "print the effective configuration (defaults, file, environment; secrets redacted)", runConfig, false},
		{"check", "audit the running gateway's context agreement (exit 1 on a violation)", runCheck, false},
		{"admin", "admin API client: tenants, keys, limits, usage, workers, requests", runAdmin, false},
		{"bench", "benchmarks: engine, gateway, tenants, pd, prefix, fleet; serve drives any OpenAI endpoint", runBench, false},
		{"probe", "audit an OpenAI-compatible endpoint for cross-tenant leakage", runProbe, false},
		{"health", "GET a health endpoint such as /readyz: exit 0 on 2xx, 1 otherwise (container health checks)", runHealth, false},
		{"version", "print the version, commit, Go version and build tags (also --version)", runVersion, false},
	}
}

// Main runs warden with args (without the program name) and returns the
// process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr}
	cmds := commands()
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		args = []string{"version"}
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range cmds {
		if c.name != args[0] {
			continue
		}
		err := isolation.Refuse()
		if !c.serves {
			err = nil
		}
		if brokenmode.Built && c.serves {
			fmt.Fprintln(stderr, "warden: THIS BINARY IS BUILT WITH -tags warden_broken: isolation failures can be switched on (WARDEN_BROKEN) for testing `warden probe`; never serve anyone with it")
		}
		if err == nil {
			err = c.run(ctx, e, args[1:])
		}
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			return 2
		default:
			var ex exitError
			if errors.As(err, &ex) {
				if ex.msg != "" {
					fmt.Fprintln(stderr, "warden:", ex.msg)
				}
				return ex.code
			}
			fmt.Fprintf(stderr, "warden %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "warden: unknown command %q\n\n", args[0])
	usage(stderr, cmds)
	return 2
}

// exitError ends the process with a specific code.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }

func usage(w io.Writer, cmds []command) {
	fmt.Fprintln(w, "usage: warden <command> [flags]\n\ncommands:")
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].name < cmds[j].name })
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'warden <command> -h' for a command's flags.")
}

// newFlags makes a FlagSet whose errors and help go to e.stderr.
func newFlags(e *env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: warden %s\n\nflags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// groupUsageResult is what a command group returns after printing its
// usage: flag.ErrHelp (exit 0) when args asked for help, errUsage (exit
// 2) for a missing or unknown subcommand.
func groupUsageResult(args []string) error {
	if len(args) == 1 && isHelpFlag(args[0]) {
		return flag.ErrHelp
	}
	return errUsage
}

// parse parses args and rejects stray positional arguments.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected arguments: %s\n", strings.Join(fs.Args(), " "))
		fs.Usage()
		return errUsage
	}
	return nil
}

package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/warden-ai/warden/internal/probe"
)

// runProbe audits an OpenAI-compatible endpoint for cross-tenant leakage.
// Exit codes: 0 every check concluded without a finding, 1 a finding, 2
// the probe could not run, 3 no finding but a check could not conclude
// (0 with --allow-inconclusive).
func runProbe(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "probe", "probe --base-url URL --key KEY_A [--key KEY_B] [flags]")
	var keys listFlag
	cfg := probe.Config{}
	fs.StringVar(&cfg.BaseURL, "base-url", "", "the endpoint's API root, e.g. https://127.0.0.1:8443/v1 (required)")
	fs.Var(&keys, "key", "an API key; give keys of two tenants for the cross-tenant checks (repeatable)")
	fs.StringVar(&cfg.Model, "model", "", "model to probe (default: the first one listed)")
	fs.StringVar(&cfg.CACert, "cacert", "", "PEM file of a CA to trust (a dev CA)")
	fs.StringVar(&cfg.Tokenizer, "tokenizer", "", "model directory with the endpoint's tokenizer: usage is checked exactly")
	fs.IntVar(&cfg.Budget, "budget", 0, "at most this many requests, retries included (default: the plan's maximum, derived from the checks chosen, plus 10%)")
	fs.DurationVar(&cfg.Duration, "duration", probe.DefaultDuration, "at most this long")
	fs.IntVar(&cfg.Concurrency, "concurrency", probe.DefaultConcurrency, "requests in flight per key in the marker test")
	fs.IntVar(&cfg.LadderRounds, "rounds", probe.DefaultLadderRounds, "times each key climbs the prompt-length ladder")
	fs.IntVar(&cfg.AbortRounds, "abort-rounds", probe.DefaultAbortRounds, "aborts before the first token the consistency-after-aborts check lands, each followed by the consistency prompt twice; it tries up to 3× as many rounds (0 skips it)")
	fs.IntVar(&cfg.TimingSamples, "timing-samples", probe.DefaultTimingSamples, "the most rounds of the sequential prefix-cache timing test, 6 requests each (0 skips it)")
	fs.IntVar(&cfg.TimingPrefixTokens, "timing-prefix-tokens", probe.DefaultTimingPrefix, "length of the timing test's secret prefixes (at most a third of the context)")
	fs.Float64Var(&cfg.Alpha, "alpha", probe.DefaultAlpha, "error rate, both ways, of the sequential timing test")
	checks := fs.String("checks", strings.Join(probe.AllChecks, ","), "checks to run, comma-separated: "+strings.Join(probe.AllChecks, ", ")+" (markers includes admission, usage and consistency; caches the cache and proxy leak classes)")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed for markers and filler (default: from the clock)")
	reportPath := fs.String("report", "", "write the JSON report to this file")
	quiet := fs.Bool("quiet", false, "no progress lines")
	allowInconclusive := fs.Bool("allow-inconclusive", false, "exit 0, not 3, when no check found anything but some could not conclude")
	if err := parse(fs, args); err != nil {
		return err
	}
	if cfg.BaseURL == "" || len(keys) == 0 {
		fmt.Fprintln(e.stderr, "warden probe: --base-url and at least one --key are required")
		fs.Usage()
		return errUsage
	}
	cfg.Keys = keys
	// 0 on the command line skips these checks; in Config it means the
	// default and a negative number skips.
	if cfg.AbortRounds == 0 {
		cfg.AbortRounds = -1
	}
	if cfg.TimingSamples == 0 {
		cfg.TimingSamples = -1
	}
	cfg.Checks = strings.Split(*checks, ",")
	if len(keys) == 1 {
		fmt.Fprintln(e.stderr, "warden probe: one key: the cross-tenant checks cannot run, so the run is inconclusive (exit 3) unless --allow-inconclusive")
	}
	if !*quiet {
		cfg.Progress = func(format string, args ...any) {
			fmt.Fprintf(e.stderr, "%s probe: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
		}
	}
	cfg.Plan = func(plan []probe.PlanItem, budget int, d time.Duration) {
		probe.WritePlan(e.stderr, plan, budget, d)
	}
	rep, err := probe.Run(ctx, cfg)
	if err != nil {
		// Run's errors all wrap probe.ErrCannotRun: nothing was judged.
		return exitError{code: probe.ExitCannotRun, msg: "probe: " + err.Error()}
	}
	rep.WriteText(e.stdout)
	if *reportPath != "" {
		f, err := os.Create(*reportPath)
		if err != nil {
			return exitError{code: 2, msg: "probe: " + err.Error()}
		}
		werr := rep.WriteJSON(f)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return exitError{code: 2, msg: "probe: writing the report: " + werr.Error()}
		}
	}
	if code := rep.ExitCode(*allowInconclusive); code != 0 {
		return exitError{code: code}
	}
	return nil
}

package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/warden-ai/warden/internal/probe"
)

var upAdmin = regexp.MustCompile(`(?m)^  admin URL  (\S+) `)

// probeUp starts `warden up` with bin and a KV pool small enough that the
// context is 1024 tokens (so the probe's ladder past it is quick), adds a
// second tenant, and returns what up printed and the second tenant's key.
// args come last, so they override those defaults (--kv-memory).
func probeUp(t *testing.T, bin string, environ []string, args ...string) (upInfo, string) {
	t.Helper()
	state := t.TempDir()
	up, info := launchUp(t, bin, state, environ, append([]string{"--kv-memory", "512KiB"}, args...)...)
	admin := []string{"admin", "--url", match(t, upAdmin, up.Log()), "--token-file", filepath.Join(state, "admin-token"), "--cacert", info.ca}
	if out, err := exec.Command(env.Bin, append(admin, "tenants", "create", "other")...).CombinedOutput(); err != nil {
		t.Fatalf("creating tenant other: %v\n%s", err, out)
	}
	out, err := exec.Command(env.Bin, append(admin, "keys", "issue", "other")...).Output()
	if err != nil {
		t.Fatalf("issuing a key: %v", err)
	}
	key := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	if !strings.HasPrefix(key, "wdn_") {
		t.Fatalf("keys issue printed %q", out)
	}
	return info, key
}

// probeDefaults are the test's probe flags: a short run with every check.
var probeDefaults = []string{"--seed", "7", "--rounds", "2", "--concurrency", "3", "--timing-samples", "12",
	"--alpha", "0.001", "--budget", "400", "--duration", "4m"}

// runProbe runs `warden probe` against up with both keys and flags (or
// probeDefaults) and returns its exit code, its report and its output.
func runProbe(t *testing.T, info upInfo, keyB string, flags ...string) (int, probe.Report, string) {
	t.Helper()
	if len(flags) == 0 {
		flags = probeDefaults
	}
	report := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.Command(env.Bin, append([]string{"probe", "--base-url", info.baseURL, "--key", info.key, "--key", keyB,
		"--cacert", info.ca, "--tokenizer", filepath.Join(filepath.Dir(info.ca), "..", "model"),
		"--report", report}, flags...)...)
	out, err := cmd.CombinedOutput()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var rep probe.Report
	if b, err := os.ReadFile(report); err == nil {
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatalf("report: %v", err)
		}
	}
	return code, rep, string(out)
}

// checkVerdict fails t unless check name has verdict want.
func checkVerdict(t *testing.T, rep probe.Report, name string, want probe.Verdict, out string) {
	t.Helper()
	for _, c := range rep.Checks {
		if c.Name == name {
			if c.Verdict != want {
				t.Errorf("%s: %s (%s), want %s\n%s", name, c.Verdict, c.Summary, want, out)
			}
			return
		}
	}
	t.Errorf("the report has no check %q\n%s", name, out)
}

// TestProbeFindsNothingOnWarden: `warden probe` with two tenants' keys
// against `warden up` in both P/D transfer backends exits 0, having run
// every check to a verdict.
func TestProbeFindsNothingOnWarden(t *testing.T) {
	for _, transfer := range []string{"tcp", "shm"} {
		t.Run(transfer, func(t *testing.T) {
			info, keyB := probeUp(t, env.Bin, nil, "--transfer", transfer)
			code, rep, out := runProbe(t, info, keyB)
			if code != 0 {
				t.Fatalf("warden probe exited %d, want 0:\n%s", code, out)
			}
			if rep.ContextLength != 1024 || rep.ContextSource != "advertised" {
				t.Errorf("context %d (%s), want the advertised 1024", rep.ContextLength, rep.ContextSource)
			}
			for _, name := range []string{"markers (cross-request content)", "admission past the context", "usage prompt tokens", "consistency under load", "consistency after aborts", "prefix-cache timing"} {
				checkVerdict(t, rep, name, probe.VerdictPass, out)
			}
			// warden refuses every client-steered field it knows of.
			checkVerdict(t, rep, "client-steered fields", probe.VerdictPass, out)
		})
	}
}

// timingFlags run only the prefix-cache timing check, with 1024-token
// secret prefixes: on the tiny model a cache hit saves most of the time to
// first token, so the same-key control sees it clearly.
func timingFlags(samples string) []string {
	return []string{"--checks", "timing", "--timing-samples", samples, "--timing-prefix-tokens", "1024", "--budget", "2000", "--duration", "4m"}
}

// timingResult returns the p-values of the timing check's same-key
// control and cross-key comparison from its report.
func timingResult(t *testing.T, rep probe.Report, out string) (control, cross float64) {
	t.Helper()
	for _, c := range rep.Checks {
		if c.Name != "prefix-cache timing" {
			continue
		}
		p := func(k string) float64 {
			m, ok := c.Data[k].(map[string]any)
			if !ok {
				t.Fatalf("timing check has no %s data:\n%s", k, out)
			}
			return m["p"].(float64)
		}
		return p("control"), p("cross")
	}
	t.Fatalf("no timing check in the report:\n%s", out)
	return 0, 0
}

// TestPrefixCacheTimingAcrossTenants: on a worker with the prefix cache
// (role both), tenant A primes secret prefixes and tenant B probes with
// them and with fresh ones (100 each, 200 probes per comparison): B's
// times to first token show no channel — the probe exits 0, which means
// no KS p ≤ 0.01 with B's primed probes the faster (one-sided, so a
// chance failure has probability 0.5%) — while the same-tenant control
// sees the hits (p < 0.001).
func TestPrefixCacheTimingAcrossTenants(t *testing.T) {
	info, keyB := probeUp(t, env.Bin, nil, "--single", "--kv-memory", "4MiB")
	code, rep, out := runProbe(t, info, keyB, timingFlags("100")...)
	if code != 0 {
		t.Fatalf("warden probe exited %d, want 0:\n%s", code, out)
	}
	control, cross := timingResult(t, rep, out)
	if control >= 0.001 {
		t.Errorf("same-tenant control: p = %g, want < 0.001 (the cache hits are not visible)\n%s", control, out)
	}
	t.Logf("KS p-values: same-tenant control %g, across tenants %g", control, cross)
}

// TestProbeFindsBrokenWarden: test-only builds with a deliberate isolation
// failure (internal/brokenmode) are caught: exit 1, naming the check.
func TestProbeFindsBrokenWarden(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "warden-broken")
	build := exec.Command("go", "build", "-tags", "warden_broken", "-o", bin, "github.com/warden-ai/warden/cmd/warden")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the broken warden: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		mode, check string
		upArgs      []string
		flags       []string
	}{
		// The gateway skips the context check: prompts past the context
		// reach the workers and come back as something other than 400.
		{"admission", "admission past the context", nil, nil},
		// One cache domain for every tenant: B's probes on A's prefixes
		// are cache hits, visible in the time to first token.
		{"shared-cache", "prefix-cache timing", []string{"--single", "--kv-memory", "4MiB"}, timingFlags("20")},
		// Aborted pages are freed without the writer's drain and handed
		// to the next reservation while the aborted writer still writes:
		// key A's deterministic answer right after B's aborts changes.
		// One ladder round (no aborts there) keeps the run short.
		{"release-without-drain", "consistency after aborts", []string{"--transfer", "shm"},
			[]string{"--checks", "markers", "--rounds", "1", "--abort-rounds", "6", "--budget", "200", "--duration", "4m"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			info, keyB := probeUp(t, bin, []string{"WARDEN_BROKEN=" + tc.mode}, tc.upArgs...)
			code, rep, out := runProbe(t, info, keyB, tc.flags...)
			if code != 1 {
				t.Fatalf("warden probe against WARDEN_BROKEN=%s exited %d, want 1:\n%s", tc.mode, code, out)
			}
			checkVerdict(t, rep, tc.check, probe.VerdictFinding, out)
			for _, c := range rep.Checks {
				if c.Name == tc.check {
					t.Logf("%s: %s", c.Name, c.Summary)
				}
			}
			// Other checks may find the failure too (release-without-drain
			// can also change an answer under the marker test's load).
			if !regexp.MustCompile(`RESULT: \d+ finding\(s\): (.*, )?` + regexp.QuoteMeta(tc.check)).MatchString(out) {
				t.Errorf("the summary does not name the finding:\n%s", out)
			}
		})
	}
}

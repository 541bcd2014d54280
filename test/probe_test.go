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
func probeUp(t *testing.T, bin string, environ []string, args ...string) (upInfo, string) {
	t.Helper()
	state := t.TempDir()
	args = append([]string{"up", "--state-dir", state, "--listen", "127.0.0.1:0", "--kv-memory", "512KiB"}, args...)
	up := env.NewProcess("warden up", filepath.Join(t.TempDir(), "up.log"), args...)
	up.Bin = bin
	up.Env = append(append(os.Environ(), "WARDEN_WORKER_TRANSFER_SHM_DIR="+env.ShmDir), environ...)
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = up.Kill() })
	info := waitUp(t, up)
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

// runProbe runs `warden probe` against up with both keys and returns its
// exit code, its report and its output.
func runProbe(t *testing.T, info upInfo, keyB string) (int, probe.Report, string) {
	t.Helper()
	report := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.Command(env.Bin, "probe", "--base-url", info.baseURL, "--key", info.key, "--key", keyB,
		"--cacert", info.ca, "--tokenizer", filepath.Join(filepath.Dir(info.ca), "..", "model"),
		"--seed", "7", "--rounds", "2", "--concurrency", "3", "--timing-samples", "12", "--alpha", "0.001", "--budget", "400", "--duration", "4m",
		"--report", report)
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
			for _, name := range []string{"markers (cross-request content)", "admission past the context", "usage prompt tokens", "consistency under load", "prefix-cache timing"} {
				checkVerdict(t, rep, name, probe.VerdictPass, out)
			}
			// warden refuses every client-steered field it knows of.
			checkVerdict(t, rep, "client-steered fields", probe.VerdictPass, out)
		})
	}
}

// TestProbeFindsBrokenAdmission: a test-only build whose gateway skips the
// context check (internal/brokenmode) is caught: exit 1, naming the check.
func TestProbeFindsBrokenAdmission(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "warden-broken")
	build := exec.Command("go", "build", "-tags", "warden_broken", "-o", bin, "github.com/warden-ai/warden/cmd/warden")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the broken warden: %v\n%s", err, out)
	}
	info, keyB := probeUp(t, bin, []string{"WARDEN_BROKEN=admission"})
	code, rep, out := runProbe(t, info, keyB)
	if code != 1 {
		t.Fatalf("warden probe against a broken admission exited %d, want 1:\n%s", code, out)
	}
	checkVerdict(t, rep, "admission past the context", probe.VerdictFinding, out)
	if !strings.Contains(out, "RESULT: 1 finding(s): admission past the context") {
		t.Errorf("the summary does not name the finding:\n%s", out)
	}
}

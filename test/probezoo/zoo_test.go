package probezoo_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warden-ai/warden/internal/probe"
	"github.com/warden-ai/warden/test/harness"
	"github.com/warden-ai/warden/test/probezoo"
)

var env *harness.Env

func TestMain(m *testing.M) {
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

// target is a running `warden up` with a second tenant.
type target struct {
	baseURL, keyA, keyB, ca, model string
}

var (
	upLine = func(label string) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^  ` + label + `\s+(\S+)`)
	}
	upBaseURL, upKey, upCA, upAdmin = upLine("base URL"), upLine("API key"), upLine("CA"), upLine("admin URL")
)

// up starts `warden up` with bin (and environ) in a state directory of
// its own, waits until it serves, and issues a key of a second tenant.
func up(t *testing.T, bin string, environ []string, args ...string) target {
	t.Helper()
	state := t.TempDir()
	p := env.NewProcess("warden up", filepath.Join(t.TempDir(), "up.log"), append([]string{"up", "--state-dir", state, "--listen", "127.0.0.1:0"}, args...)...)
	p.Bin = bin
	p.Env = append(append(os.Environ(), "WARDEN_WORKER_TRANSFER_SHM_DIR="+env.ShmDir), environ...)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	deadline := time.Now().Add(3 * harness.WaitTimeout)
	for !strings.Contains(p.Log(), "Press Ctrl-C to stop.") {
		select {
		case <-p.Done():
			t.Fatalf("warden up exited (%v) before it was ready:\n%s", p.ExitErr(), p.Log())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("warden up not ready:\n%s", p.Log())
		}
	}
	out := p.Log()
	get := func(re *regexp.Regexp) string {
		m := re.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("warden up did not print %s:\n%s", re, out)
		}
		return m[1]
	}
	tg := target{baseURL: get(upBaseURL), keyA: get(upKey), ca: get(upCA), model: filepath.Join(state, "model")}
	admin := []string{"admin", "--url", get(upAdmin), "--token-file", filepath.Join(state, "admin-token"), "--cacert", tg.ca}
	if out, err := exec.Command(env.Bin, append(admin, "tenants", "create", "other")...).CombinedOutput(); err != nil {
		t.Fatalf("creating tenant other: %v\n%s", err, out)
	}
	key, err := exec.Command(env.Bin, append(admin, "keys", "issue", "other")...).Output()
	if err != nil {
		t.Fatalf("issuing a key: %v", err)
	}
	tg.keyB = strings.TrimSpace(strings.SplitN(string(key), "\n", 2)[0])
	return tg
}

// runProbe runs `warden probe` against baseURL with its default flags
// (only what describes the target: keys, CA, tokenizer) and returns its
// exit code, report and output.
func runProbe(t *testing.T, tg target, baseURL string) (int, probe.Report, string) {
	t.Helper()
	report := filepath.Join(t.TempDir(), "report.json")
	args := []string{"probe", "--base-url", baseURL, "--key", tg.keyA, "--key", tg.keyB, "--tokenizer", tg.model, "--report", report}
	if strings.HasPrefix(baseURL, "https:") {
		args = append(args, "--cacert", tg.ca)
	}
	out, err := exec.Command(env.Bin, args...).CombinedOutput()
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
	t.Logf("%s: exit %d, %d requests (%d retried) in %.0f s", baseURL, code, rep.Requests, rep.Retries, rep.Duration)
	return code, rep, string(out)
}

// wantFinding: the probe exits 1 and one of checks is a finding, named in
// the result line.
func wantFinding(t *testing.T, code int, rep probe.Report, out string, checks ...string) {
	t.Helper()
	if code != probe.ExitFinding {
		t.Fatalf("warden probe exited %d, want %d (a finding in %q):\n%s", code, probe.ExitFinding, checks, out)
	}
	for _, c := range rep.Checks {
		if slices.Contains(checks, c.Name) && c.Verdict == probe.VerdictFinding {
			if !regexp.MustCompile(`RESULT: \d+ finding\(s\): (.*, )?` + regexp.QuoteMeta(c.Name)).MatchString(out) {
				t.Errorf("the result line does not name %q:\n%s", c.Name, out)
			}
			t.Logf("%s: %s", c.Name, c.Summary)
			return
		}
	}
	t.Errorf("none of %q is a finding:\n%s", checks, out)
}

// wantClean: the probe exits 0, every check concluded with a pass.
func wantClean(t *testing.T, code int, rep probe.Report, out string) {
	t.Helper()
	if code != probe.ExitPass {
		t.Fatalf("warden probe exited %d, want 0:\n%s", code, out)
	}
	if len(rep.Checks) < 15 {
		t.Errorf("the report has %d checks, want every one:\n%s", len(rep.Checks), out)
	}
	for _, c := range rep.Checks {
		if c.Verdict != probe.VerdictPass {
			t.Errorf("%s: %s (%s), want pass", c.Name, c.Verdict, c.Summary)
		}
	}
}

// zooChecks is the check that must name each proxy's leak.
var zooChecks = map[probezoo.Leak][]string{
	probezoo.ExactCache:        {"identical prompts across keys"},
	probezoo.Prefix64Cache:     {"shared prefixes across keys"},
	probezoo.Replay:            {"foreign content in any answer"},
	probezoo.UsageOffBy2:       {"usage prompt tokens"},
	probezoo.TimingPrefixCache: {"prefix-cache timing"},
	probezoo.StreamMux:         {"concurrent streams (cross-talk)"},
}

// TestProbeZoo: `warden probe` with its default flags exits 0 against a
// healthy `warden up` (P/D over tcp and over shm), and 1, naming the
// right check, against each leaky proxy of the zoo in front of that
// warden and against each deliberately broken warden build
// (internal/brokenmode). The cases run in parallel: a loaded machine is
// part of what the probe must stand.
func TestProbeZoo(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the zoo runs the probe a dozen times")
	}
	brokenBin := filepath.Join(t.TempDir(), "warden-broken")
	built := make(chan error, 1)
	go func() {
		out, err := exec.Command("go", "build", "-tags", "warden_broken", "-o", brokenBin, "github.com/warden-ai/warden/cmd/warden").CombinedOutput()
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, out)
		}
		built <- err
	}()
	t.Run("tcp", func(t *testing.T) {
		t.Parallel()
		tg := up(t, env.Bin, nil, "--transfer", "tcp")
		t.Run("healthy", func(t *testing.T) {
			t.Parallel()
			code, rep, out := runProbe(t, tg, tg.baseURL)
			wantClean(t, code, rep, out)
		})
		upstream := upstreamClient(t, tg)
		u, err := url.Parse(strings.TrimSuffix(tg.baseURL, "/v1"))
		if err != nil {
			t.Fatal(err)
		}
		for _, leak := range probezoo.All {
			t.Run(string(leak), func(t *testing.T) {
				t.Parallel()
				srv := httptest.NewServer(probezoo.New(leak, u, upstream))
				t.Cleanup(srv.Close)
				code, rep, out := runProbe(t, tg, srv.URL+"/v1")
				wantFinding(t, code, rep, out, zooChecks[leak]...)
			})
		}
	})
	t.Run("shm/healthy", func(t *testing.T) {
		t.Parallel()
		tg := up(t, env.Bin, nil, "--transfer", "shm")
		code, rep, out := runProbe(t, tg, tg.baseURL)
		wantClean(t, code, rep, out)
	})
	for _, tc := range []struct {
		mode   string
		upArgs []string
		checks []string
	}{
		// The gateway skips the context check: prompts past the context
		// reach the workers and come back as something other than 400.
		{"admission", nil, []string{"admission past the context"}},
		// One cache domain for every tenant: B's prompts on A's text are
		// served from A's cached prefix (cached_tokens, timing).
		{"shared-cache", []string{"--single"}, []string{"cached_tokens across keys", "prefix-cache timing"}},
		// Aborted pages freed without the writer's drain and handed to the
		// next reservation while the aborted writer still writes: key A's
		// deterministic answer right after B's aborts changes.
		{"release-without-drain", []string{"--transfer", "shm"}, []string{"consistency after aborts", "consistency under load"}},
	} {
		t.Run("broken/"+tc.mode, func(t *testing.T) {
			t.Parallel()
			if err := <-built; err != nil {
				built <- err
				t.Fatalf("building the broken warden: %v", err)
			}
			built <- nil
			tg := up(t, brokenBin, []string{"WARDEN_BROKEN=" + tc.mode}, tc.upArgs...)
			code, rep, out := runProbe(t, tg, tg.baseURL)
			wantFinding(t, code, rep, out, tc.checks...)
		})
	}
}

// upstreamClient is the zoo's HTTPS client to warden, trusting its CA.
func upstreamClient(t *testing.T, tg target) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(tg.ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", tg.ca)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, MaxIdleConnsPerHost: 64}}
}

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
	"sync"
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

// target is a running `warden up` and the keys of two tenants of a
// case's own.
type target struct {
	baseURL, keyA, keyB, ca string
	admin                   []string
}

var (
	upLine = func(label string) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^  ` + label + `\s+(\S+)`)
	}
	upBaseURL, upCA, upAdmin = upLine("base URL"), upLine("CA"), upLine("admin URL")
)

// upArgs are the `warden up` flags of every case: a KV pool that makes
// the context 1024 tokens, so the probe's prompts up to and past it are
// quick to compute on a CPU. They describe the target, not the probe;
// args given to up come after them and override them.
var upArgs = []string{"--kv-memory", "512KiB"}

// up starts `warden up` with bin (and environ) in a state directory of
// its own and waits until it serves. It is called from the zoo's
// goroutines: it returns errors, never fails t.
func up(t *testing.T, bin string, environ []string, args ...string) (target, error) {
	state := t.TempDir()
	p := env.NewProcess("warden up", filepath.Join(t.TempDir(), "up.log"), append(append([]string{"up", "--state-dir", state, "--listen", "127.0.0.1:0"}, upArgs...), args...)...)
	p.Bin = bin
	p.Env = append(append(os.Environ(), "WARDEN_WORKER_TRANSFER_SHM_DIR="+env.ShmDir), environ...)
	if err := p.Start(); err != nil {
		return target{}, err
	}
	t.Cleanup(func() { _ = p.Kill() })
	// A bound on a hang (a loaded machine builds and starts slowly), not
	// a timed assertion.
	deadline := time.Now().Add(5 * harness.WaitTimeout)
	for !strings.Contains(p.Log(), "Press Ctrl-C to stop.") {
		select {
		case <-p.Done():
			return target{}, fmt.Errorf("warden up exited (%v) before it was ready:\n%s", p.ExitErr(), p.Log())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return target{}, fmt.Errorf("warden up not ready:\n%s", p.Log())
		}
	}
	out := p.Log()
	var missing error
	get := func(re *regexp.Regexp) string {
		m := re.FindStringSubmatch(out)
		if m == nil {
			missing = fmt.Errorf("warden up did not print %s:\n%s", re, out)
			return ""
		}
		return m[1]
	}
	tg := target{baseURL: get(upBaseURL), ca: get(upCA)}
	adminURL := get(upAdmin)
	tg.admin = []string{"admin", "--url", adminURL, "--token-file", filepath.Join(state, "admin-token"), "--cacert", tg.ca}
	return tg, missing
}

// tenants returns tg with the keys of two new tenants, name-a and name-b:
// each case probes with tenants of its own, so cases sharing a warden do
// not share tenant limits.
func (tg target) tenants(name string) (target, error) {
	key := func(id string) (string, error) {
		if out, err := exec.Command(env.Bin, append(tg.admin, "tenants", "create", id)...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("creating tenant %s: %v\n%s", id, err, out)
		}
		out, err := exec.Command(env.Bin, append(tg.admin, "keys", "issue", id)...).Output()
		if err != nil {
			return "", fmt.Errorf("issuing a key of %s: %w", id, err)
		}
		return strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0]), nil
	}
	var err error
	if tg.keyA, err = key(name + "-a"); err != nil {
		return tg, err
	}
	tg.keyB, err = key(name + "-b")
	return tg, err
}

// outcome is one probe run.
type outcome struct {
	code int
	rep  probe.Report
	out  string
	err  error
}

// runProbe runs `warden probe` against baseURL with its default flags
// (only what names the target: URL, keys, CA), as a harness
// process (stopped with the test binary), and returns its exit code,
// report and output.
func runProbe(t *testing.T, tg target, name, baseURL string) outcome {
	tg, err := tg.tenants(name)
	if err != nil {
		return outcome{err: err}
	}
	dir := t.TempDir()
	report := filepath.Join(dir, "report.json")
	args := []string{"probe", "--base-url", baseURL, "--key", tg.keyA, "--key", tg.keyB, "--report", report}
	if strings.HasPrefix(baseURL, "https:") {
		args = append(args, "--cacert", tg.ca)
	}
	p := env.NewProcess("warden probe", filepath.Join(dir, "probe.log"), args...)
	if err := p.Start(); err != nil {
		return outcome{err: err}
	}
	<-p.Done()
	o := outcome{out: p.Log()}
	var exit *exec.ExitError
	if err := p.ExitErr(); errors.As(err, &exit) {
		o.code = exit.ExitCode()
	} else if err != nil {
		o.err = err
		return o
	}
	if b, err := os.ReadFile(report); err == nil {
		o.err = json.Unmarshal(b, &o.rep)
	}
	return o
}

// wantFinding: the probe exits 1 and one of checks is a finding, named in
// the result line.
func wantFinding(t *testing.T, o outcome, checks ...string) {
	t.Helper()
	if o.code != probe.ExitFinding {
		t.Fatalf("warden probe exited %d, want %d (a finding in %q):\n%s", o.code, probe.ExitFinding, checks, o.out)
	}
	for _, c := range o.rep.Checks {
		if slices.Contains(checks, c.Name) && c.Verdict == probe.VerdictFinding {
			if !regexp.MustCompile(`RESULT: \d+ finding\(s\): (.*, )?` + regexp.QuoteMeta(c.Name)).MatchString(o.out) {
				t.Errorf("the result line does not name %q:\n%s", c.Name, o.out)
			}
			t.Logf("%s: %s", c.Name, c.Summary)
			return
		}
	}
	t.Errorf("none of %q is a finding:\n%s", checks, o.out)
}

// wantClean: the probe exits 0, every check concluded with a pass.
func wantClean(t *testing.T, o outcome) {
	t.Helper()
	if o.code != probe.ExitPass {
		t.Fatalf("warden probe exited %d, want 0:\n%s", o.code, o.out)
	}
	if len(o.rep.Checks) < 16 {
		t.Errorf("the report has %d checks, want every one:\n%s", len(o.rep.Checks), o.out)
	}
	for _, c := range o.rep.Checks {
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

// brokenModes are the deliberately broken warden builds
// (internal/brokenmode): the `warden up` flags that give each a path to
// misbehave on, and the checks that must name it.
var brokenModes = []struct {
	mode   string
	upArgs []string
	checks []string
}{
	// The gateway skips the context check: prompts past the context
	// reach the workers and come back as something other than 400.
	{"admission", nil, []string{"admission past the context"}},
	// One cache domain for every tenant: B's prompts on A's text are
	// served from A's cached prefix (cached_tokens, timing).
	// The prefix cache keeps pages only while the pool has room: 4 MiB.
	{"shared-cache", []string{"--single", "--kv-memory", "4MiB"}, []string{"cached_tokens across keys", "prefix-cache timing"}},
	// Aborted pages freed without the writer's drain and handed to the
	// next reservation while the aborted writer still writes: key A's
	// deterministic answer right after B's aborts changes.
	{"release-without-drain", []string{"--transfer", "shm"}, []string{"consistency after aborts", "consistency under load"}},
}

// TestProbeZoo: `warden probe` with its default flags exits 0 against a
// healthy `warden up` (P/D over tcp and over shm), and 1, naming the
// right check, against each leaky proxy of the zoo in front of that
// warden and against each deliberately broken warden build. Every case
// runs at once (goroutines, not t.Parallel, which go test limits to the
// core count): a loaded machine is part of what the probe must stand.
func TestProbeZoo(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the zoo runs the probe a dozen times")
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	results := map[string]outcome{}
	record := func(name string, o outcome) {
		mu.Lock()
		defer mu.Unlock()
		results[name] = o
	}
	wg.Go(func() {
		tg, err := up(t, env.Bin, nil, "--transfer", "tcp")
		if err != nil {
			record("tcp/healthy", outcome{err: err})
			return
		}
		u, err := url.Parse(strings.TrimSuffix(tg.baseURL, "/v1"))
		if err != nil {
			record("tcp/healthy", outcome{err: err})
			return
		}
		upstream, err := upstreamClient(tg)
		if err != nil {
			record("tcp/healthy", outcome{err: err})
			return
		}
		var inner sync.WaitGroup
		inner.Go(func() { record("tcp/healthy", runProbe(t, tg, "healthy", tg.baseURL)) })
		for _, leak := range probezoo.All {
			inner.Go(func() {
				srv := httptest.NewServer(probezoo.New(leak, u, upstream))
				defer srv.Close()
				record("tcp/"+string(leak), runProbe(t, tg, string(leak), srv.URL+"/v1"))
			})
		}
		inner.Wait()
	})
	wg.Go(func() {
		tg, err := up(t, env.Bin, nil, "--transfer", "shm")
		if err != nil {
			record("shm/healthy", outcome{err: err})
			return
		}
		record("shm/healthy", runProbe(t, tg, "healthy", tg.baseURL))
	})
	wg.Go(func() {
		bin := filepath.Join(t.TempDir(), "warden-broken")
		out, err := exec.Command("go", "build", "-tags", "warden_broken", "-o", bin, "github.com/warden-ai/warden/cmd/warden").CombinedOutput()
		var inner sync.WaitGroup
		for _, b := range brokenModes {
			name := "broken/" + b.mode
			if err != nil {
				record(name, outcome{err: fmt.Errorf("building the broken warden: %w\n%s", err, out)})
				continue
			}
			inner.Go(func() {
				tg, err := up(t, bin, []string{"WARDEN_BROKEN=" + b.mode}, b.upArgs...)
				if err != nil {
					record(name, outcome{err: err})
					return
				}
				record(name, runProbe(t, tg, b.mode, tg.baseURL))
			})
		}
		inner.Wait()
	})
	wg.Wait()

	check := func(name string, judge func(*testing.T, outcome)) {
		t.Run(name, func(t *testing.T) {
			o, ok := results[name]
			switch {
			case !ok:
				t.Fatal("no result")
			case o.err != nil:
				t.Fatalf("%v\n%s", o.err, o.out)
			}
			t.Logf("exit %d, %d requests (%d retried) in %.0f s", o.code, o.rep.Requests, o.rep.Retries, o.rep.Duration)
			judge(t, o)
		})
	}
	check("tcp/healthy", wantClean)
	check("shm/healthy", wantClean)
	for _, leak := range probezoo.All {
		check("tcp/"+string(leak), func(t *testing.T, o outcome) { wantFinding(t, o, zooChecks[leak]...) })
	}
	for _, b := range brokenModes {
		check("broken/"+b.mode, func(t *testing.T, o outcome) { wantFinding(t, o, b.checks...) })
	}
}

// upstreamClient is the zoo's HTTPS client to warden, trusting its CA.
func upstreamClient(tg target) (*http.Client, error) {
	pem, err := os.ReadFile(tg.ca)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", tg.ca)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, MaxIdleConnsPerHost: 64}}, nil
}

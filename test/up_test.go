package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/test/harness"
	"github.com/warden-ai/warden/worker/model"
)

// upInfo is what `warden up` printed.
type upInfo struct {
	baseURL, key, ca, curl string
	children               []int
	// log returns the process's output so far.
	log func() string
}

var (
	upBaseURL = regexp.MustCompile(`(?m)^  base URL   (\S+)$`)
	upKey     = regexp.MustCompile(`(?m)^  API key    (\S+)$`)
	upCA      = regexp.MustCompile(`(?m)^  CA         (\S+)$`)
	upCurl    = regexp.MustCompile(`(?m)^  (curl .*)$`)
	upPid     = regexp.MustCompile(`\(pid (\d+)\)`)
)

// TestUp: `warden up` in both shapes starts a working cluster of separate
// processes, prints a key, URL and CA that work with a plain HTTPS client,
// and leaves no process behind when stopped with Ctrl-C (exit 0) or when
// it is killed itself. On the way, a worker stopped with SIGTERM is
// started again and serves (P/D tcp), and a second `warden up` on the same
// state directory is refused without touching it (single).
func TestUp(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		children int
		kill     bool
		// restart stops this worker while up runs and expects it back.
		restart string
		// second runs another `warden up` on the same state directory.
		second bool
		// bench runs `warden bench serve` against it.
		bench bool
	}{
		{"P/D tcp, Ctrl-C", nil, 3, false, "decode", false, false},
		{"single, Ctrl-C", []string{"--single"}, 2, false, "", true, true},
		{"P/D shm, killed", []string{"--transfer", "shm"}, 3, true, "", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			up, info := launchUp(t, env.Bin, state, nil, tc.args...)
			if len(info.children) != tc.children {
				t.Fatalf("up started %d processes, want %d:\n%s", len(info.children), tc.children, up.Log())
			}
			for _, pid := range info.children {
				if ppid := parentOf(pid); ppid != up.Pid() {
					t.Errorf("process %d: parent %d, want warden up (%d)", pid, ppid, up.Pid())
				}
			}
			if info.ca != filepath.Join(state, "pki", "ca.pem") || !strings.Contains(info.curl, "--cacert "+info.ca) ||
				!strings.Contains(info.curl, info.baseURL+"/chat/completions") || !strings.Contains(info.curl, "Bearer "+info.key) {
				t.Errorf("printed CA %q and curl line %q do not match the URL %s and state dir", info.ca, info.curl, info.baseURL)
			}
			checkUpServes(t, info)
			if tc.restart != "" {
				info.children = append(info.children, restartUpWorker(t, up, state, tc.restart))
				checkUpServes(t, info)
			}
			if tc.second {
				checkUpStateDirLocked(t, up, state)
			}
			if tc.bench {
				checkBenchServe(t, info)
			}

			if tc.kill {
				if err := up.Kill(); err != nil {
					t.Fatal(err)
				}
			} else {
				interruptUp(t, up)
			}
			waitGone(t, info.children)
			if left, _ := os.ReadDir(env.ShmDir); len(left) > 0 {
				t.Errorf("shared-memory segments left in %s: %v", env.ShmDir, left)
			}
			if pids := env.Orphans(); len(pids) > 0 {
				t.Errorf("processes of warden still run: %v", pids)
			}
		})
	}
}

// restartUpWorker stops up's worker of role with SIGTERM, as an operator
// or the OOM killer might, waits until up has started it again and the new
// process has registered with the gateway, and returns the new pid.
func restartUpWorker(t *testing.T, up *harness.Process, state, role string) int {
	t.Helper()
	started := regexp.MustCompile(`started the ` + role + ` worker \S+ \(pid (\d+)\)`).FindStringSubmatch(up.Log())
	if started == nil {
		t.Fatalf("up did not print the %s worker's pid:\n%s", role, up.Log())
	}
	pid, _ := strconv.Atoi(started[1])
	workerLog := filepath.Join(state, "logs", "worker-"+role+".log")
	registrations := func() int {
		b, _ := os.ReadFile(workerLog)
		return strings.Count(string(b), "registered with gateway")
	}
	before := registrations()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	restarted := regexp.MustCompile(`restarted the ` + role + ` worker \(pid (\d+)\)`)
	deadline := time.Now().Add(harness.WaitTimeout)
	var m []string
	for m = restarted.FindStringSubmatch(up.Log()); m == nil || registrations() <= before; m = restarted.FindStringSubmatch(up.Log()) {
		select {
		case <-up.Done():
			t.Fatalf("warden up exited (%v) after its %s worker stopped:\n%s", up.ExitErr(), role, up.Log())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the %s worker was not restarted and registered within %v:\n%s", role, harness.WaitTimeout, up.Log())
		}
	}
	if !strings.Contains(up.Log(), "the "+role+" worker stopped unexpectedly") {
		t.Errorf("up did not say that the %s worker stopped:\n%s", role, up.Log())
	}
	newPid, _ := strconv.Atoi(m[1])
	if newPid == pid || parentOf(newPid) != up.Pid() {
		t.Errorf("restarted worker pid %d (old %d), parent %d, want a new child of warden up (%d)", newPid, pid, parentOf(newPid), up.Pid())
	}
	return newPid
}

// checkUpStateDirLocked runs a second `warden up` on the state directory
// of the running one: it must exit 1 naming the running one's pid, and
// leave the running one's configs and logs as they were.
func checkUpStateDirLocked(t *testing.T, up *harness.Process, state string) {
	t.Helper()
	gatewayConfig := filepath.Join(state, "gateway.yaml")
	gatewayLog := filepath.Join(state, "logs", "gateway.log")
	configBefore, err := os.ReadFile(gatewayConfig)
	if err != nil {
		t.Fatal(err)
	}
	logBefore, err := os.Stat(gatewayLog)
	if err != nil {
		t.Fatal(err)
	}
	out, code, _ := runUpToExit(t, "--state-dir", state, "--listen", "127.0.0.1:0", "--single")
	if code != 1 {
		t.Errorf("second warden up: exit status %d, want 1:\n%s", code, out)
	}
	if want := fmt.Sprintf("another warden up (pid %d) uses %s", up.Pid(), state); !strings.Contains(out, want) {
		t.Errorf("second warden up does not say %q:\n%s", want, out)
	}
	if strings.Contains(out, "started the") {
		t.Errorf("second warden up started processes:\n%s", out)
	}
	if configAfter, _ := os.ReadFile(gatewayConfig); !bytes.Equal(configAfter, configBefore) {
		t.Errorf("second warden up rewrote %s", gatewayConfig)
	}
	if logAfter, err := os.Stat(gatewayLog); err != nil || logAfter.Size() < logBefore.Size() {
		t.Errorf("second warden up truncated %s (%d bytes before, %v after)", gatewayLog, logBefore.Size(), logAfter)
	}
}

// interruptUp stops up with Ctrl-C and checks that it exits 0.
func interruptUp(t *testing.T, up *harness.Process) {
	t.Helper()
	if err := up.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-up.Done():
	case <-time.After(harness.WaitTimeout):
		t.Fatalf("warden up did not exit after Ctrl-C:\n%s", up.LogTail(20))
	}
	if err := up.ExitErr(); err != nil {
		t.Errorf("warden up after Ctrl-C: %v, want exit 0:\n%s", err, up.LogTail(20))
	}
}

// waitUp waits until up printed its key, and returns what it printed.
func waitUp(t *testing.T, up *harness.Process) upInfo {
	t.Helper()
	deadline := time.Now().Add(harness.WaitTimeout)
	for !strings.Contains(up.Log(), "Press Ctrl-C to stop.") {
		select {
		case <-up.Done():
			t.Fatalf("warden up exited (%v) before it was ready:\n%s", up.ExitErr(), up.Log())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("warden up not ready after %v:\n%s", harness.WaitTimeout, up.Log())
		}
	}
	out := up.Log()
	info := upInfo{baseURL: match(t, upBaseURL, out), key: match(t, upKey, out), ca: match(t, upCA, out), curl: match(t, upCurl, out), log: up.Log}
	for _, m := range upPid.FindAllStringSubmatch(out, -1) {
		pid, _ := strconv.Atoi(m[1])
		info.children = append(info.children, pid)
	}
	return info
}

func match(t *testing.T, re *regexp.Regexp, s string) string {
	t.Helper()
	m := re.FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("warden up did not print %s:\n%s", re, s)
	}
	return m[1]
}

// checkUpServes makes a chat request with a plain net/http client that
// trusts only the printed CA, and compares it with the reference.
func checkUpServes(t *testing.T, info upInfo) {
	t.Helper()
	checkUpServesModel(t, info, harness.ModelTiny, reference(t, harness.ModelTiny))
}

// checkUpServesModel is checkUpServes for the served model name with
// reference ref.
func checkUpServesModel(t *testing.T, info upInfo, name string, ref *harness.Reference) {
	t.Helper()
	client := upClient(t, info)
	msgs := []tokenizer.Message{{Role: "user", Content: "Hello from warden up!"}}
	want, err := ref.Chat(context.Background(), msgs, 24)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"model": name, "messages": wireMessages(msgs), "max_tokens": 24, "temperature": 0})
	req, err := http.NewRequest(http.MethodPost, info.baseURL+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+info.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	checkChatAnswer(t, "warden up", resp, want)
}

// checkBenchServe runs `warden bench serve` against up, comparing it with
// itself under a second name, and checks its JSON report: every request
// succeeded, both endpoints ran, and the token counts are the ones warden
// reported (the prompt holds at least its words, no answer is longer than
// max_tokens).
func checkBenchServe(t *testing.T, info upInfo) {
	t.Helper()
	out, err := runWardenOut("bench", "serve", "--url", info.baseURL, "--key", info.key, "--ca", info.ca, "--model", harness.ModelTiny,
		"--compare", info.baseURL, "--compare-name", "again", "--clients", "2", "--duration", "1s", "--round", "500ms",
		"--prompt-words", "8:16", "--output-tokens", "4", "--warmup", "1", "--json")
	if err != nil {
		t.Fatalf("warden bench serve: %v\n%s", err, out)
	}
	var rep struct {
		Results []struct {
			Requests     int   `json:"requests"`
			Failed       int   `json:"failed"`
			PromptTokens int64 `json:"prompt_tokens"`
			OutputTokens int64 `json:"output_tokens"`
			TTFT         struct {
				P50 int64 `json:"p50_ns"`
			} `json:"ttft"`
		} `json:"results"`
	}
	if err := json.Unmarshal(out, &rep); err != nil || len(rep.Results) != 2 {
		t.Fatalf("warden bench serve --json: %v\n%s", err, out)
	}
	for i, r := range rep.Results {
		if r.Requests == 0 || r.Failed != 0 || r.PromptTokens < 8*int64(r.Requests) ||
			r.OutputTokens < int64(r.Requests) || r.OutputTokens > 4*int64(r.Requests) || r.TTFT.P50 <= 0 {
			t.Errorf("endpoint %d: implausible result %+v\n%s", i, r, out)
		}
	}
}

// parentOf returns the parent pid of pid from /proc, 0 if unknown.
func parentOf(pid int) int {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// waitGone waits until none of pids is alive (reaped or a zombie whose
// parent is gone).
func waitGone(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(harness.WaitTimeout)
	for {
		var alive []int
		for _, pid := range pids {
			if alivePid(pid) {
				alive = append(alive, pid)
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %v still run", alive)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// alivePid reports whether pid runs the warden binary (zombies do not
// count, nor a process that reused the pid).
func alivePid(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	if exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); err == nil && exe != env.Bin {
		return false
	}
	s := string(stat)
	return !strings.HasPrefix(s[strings.LastIndexByte(s, ')')+1:], " Z")
}

// exitCode is a process's exit status from its Wait error.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestUpChildFails: when a child dies during start-up, `warden up` says
// which one, shows its log and where it is, stops the others and exits 1.
// The child here is the worker of a --single stack, given a model
// directory whose weights file is missing.
func TestUpChildFails(t *testing.T) {
	state := t.TempDir()
	modelDir := filepath.Join(t.TempDir(), "broken")
	if err := model.Init(modelDir, model.PresetTiny, 1, model.F32); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(modelDir, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	out, code, children := runUpToExit(t, "--state-dir", state, "--listen", "127.0.0.1:0", "--single", "--model-dir", modelDir)
	if code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	workerLog := filepath.Join(state, "logs", "worker-both.log")
	if !strings.Contains(out, "the both worker stopped unexpectedly") || !strings.Contains(out, workerLog) ||
		!strings.Contains(out, "has neither model.safetensors") {
		t.Errorf("the error does not name the worker, its cause and its log %s:\n%s", workerLog, out)
	}
	if strings.Contains(out, "API key") {
		t.Errorf("a key was printed although start-up failed:\n%s", out)
	}
	waitGone(t, children)
}

// TestUpPortInUse: an address `warden up` needs and cannot bind is
// reported before any process starts, with what to change: --listen for
// the API, the config setting for a port the config pins.
func TestUpPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().String()
	state := t.TempDir()
	cfg := filepath.Join(state, "busy.yaml")
	if err := os.WriteFile(cfg, []byte("gateway:\n  admin_listen: \""+busy+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"API", []string{"--listen", busy}, "--listen HOST:PORT"},
		{"pinned admin", []string{"--listen", "127.0.0.1:0", "--config", cfg}, "change gateway.admin_listen in the config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code, children := runUpToExit(t, append([]string{"--state-dir", state}, tc.args...)...)
			if code != 1 {
				t.Errorf("exit status %d, want 1", code)
			}
			if !strings.Contains(out, busy+" is not free") || !strings.Contains(out, tc.want) {
				t.Errorf("the error does not name %s as taken and say %q:\n%s", busy, tc.want, out)
			}
			if len(children) > 0 || strings.Contains(out, "started the") {
				t.Errorf("processes were started before the port was checked:\n%s", out)
			}
		})
	}
}

// runUpToExit runs `warden up` with args until it exits by itself, and
// returns its output, exit status and the pids it printed.
func runUpToExit(t *testing.T, args ...string) (out string, code int, children []int) {
	t.Helper()
	up := env.NewProcess("warden up", filepath.Join(t.TempDir(), "up.log"), append([]string{"up"}, args...)...)
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = up.Kill() })
	select {
	case <-up.Done():
	case <-time.After(harness.WaitTimeout):
		t.Fatalf("warden up still runs:\n%s", up.Log())
	}
	out = up.Log()
	for _, m := range upPid.FindAllStringSubmatch(out, -1) {
		pid, _ := strconv.Atoi(m[1])
		children = append(children, pid)
	}
	return out, exitCode(up.ExitErr()), children
}

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
// it is killed itself.
func TestUp(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		children int
		kill     bool
	}{
		{"P/D tcp, Ctrl-C", nil, 3, false},
		{"single, Ctrl-C", []string{"--single"}, 2, false},
		{"P/D shm, killed", []string{"--transfer", "shm"}, 3, true},
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
func TestUpChildFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	state := t.TempDir()
	cfg := filepath.Join(state, "busy.yaml")
	if err := os.WriteFile(cfg, []byte("gateway:\n  admin_listen: \""+ln.Addr().String()+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	up := env.NewProcess("warden up", filepath.Join(t.TempDir(), "up.log"),
		"up", "--state-dir", state, "--listen", "127.0.0.1:0", "--config", cfg)
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = up.Kill() })
	select {
	case <-up.Done():
	case <-time.After(harness.WaitTimeout):
		t.Fatalf("warden up still runs with its gateway's port taken:\n%s", up.Log())
	}
	out := up.Log()
	if code := exitCode(up.ExitErr()); code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	gatewayLog := filepath.Join(state, "logs", "gateway.log")
	if !strings.Contains(out, "the gateway stopped unexpectedly") || !strings.Contains(out, gatewayLog) {
		t.Errorf("the error does not name the gateway and its log %s:\n%s", gatewayLog, out)
	}
	if strings.Contains(out, "API key") {
		t.Errorf("a key was printed although start-up failed:\n%s", out)
	}
	var children []int
	for _, m := range upPid.FindAllStringSubmatch(out, -1) {
		pid, _ := strconv.Atoi(m[1])
		children = append(children, pid)
	}
	waitGone(t, children)
}

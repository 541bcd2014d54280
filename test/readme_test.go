package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/warden-ai/warden/internal/obs/obstest"
	"github.com/warden-ai/warden/test/harness"
)

// README's placeholders in "Serving a real model": the model directory
// and the way the binary is run.
const (
	readmeModelDir = "~/models/Llama-3.2-1B-Instruct"
	readmeWarden   = "go run ./cmd/warden"
)

var shBlock = regexp.MustCompile("(?s)```sh\n(.*?)```")

// TestReadmeServingARealModel walks README's "Serving a real model" as a
// user would: it runs the section's commands exactly as written, in a
// fresh directory, with the model directory replaced by the realistic
// model (Llama 3's real tokenizer) and `go run ./cmd/warden` by the binary
// it builds; then it runs the curl line `warden up` prints and checks the
// answer against the reference. The only other difference is the
// environment: WARDEN_GATEWAY_LISTEN picks a free port instead of 8443,
// which other tests may hold.
func TestReadmeServingARealModel(t *testing.T) {
	dir, pkg := llama3Model(t)
	if _, err := exec.LookPath("curl"); err != nil && os.Getenv("CI") == "" {
		t.Skip("curl is not installed")
	}
	readme, err := os.ReadFile(filepath.Join(obstest.RepoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Serving a real model\n")
	if !ok {
		t.Fatal(`README has no "## Serving a real model" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var commands []string
	for _, m := range shBlock.FindAllStringSubmatch(section, -1) {
		commands = append(commands, strings.Split(strings.TrimSpace(m[1]), "\n")...)
	}
	if len(commands) != 1 || !strings.HasPrefix(commands[0], readmeWarden+" up ") || !strings.Contains(commands[0], readmeModelDir) {
		t.Fatalf("the section's commands changed; update this test to walk them: %q", commands)
	}
	line := strings.Replace(strings.Replace(commands[0], readmeModelDir, dir, 1), readmeWarden, "", 1)
	up := env.NewProcess("warden up (README)", filepath.Join(t.TempDir(), "up.log"), strings.Fields(line)...)
	up.Dir = t.TempDir()
	up.Env = append(os.Environ(), "WARDEN_GATEWAY_LISTEN=127.0.0.1:0")
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = up.Kill() })
	info := waitUp(t, up)
	if _, err := os.Stat(filepath.Join(up.Dir, ".warden", "logs")); err != nil {
		t.Errorf("the state is not in .warden of the working directory: %v", err)
	}

	// The printed curl line, run by a shell exactly as printed.
	out, err := exec.Command("sh", "-c", info.curl+" --silent --show-error").Output()
	if err != nil {
		t.Fatalf("%s: %v", info.curl, err)
	}
	var resp struct {
		Model   string `json:"model"`
		Choices []struct {
			Message      struct{ Content string } `json:"message"`
			FinishReason string                   `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("curl answered %s: %v", out, err)
	}
	// What the printed line asks: one user message, "Hello!", up to 32
	// tokens, sampled at the default temperature (so the text is not the
	// greedy reference's; its length and the prompt's count are exact).
	hf := harness.HFChatTokens(t, pkg, dir, realConversations[:1])
	c := resp.Choices
	if resp.Model != filepath.Base(dir) || len(c) != 1 || c[0].Message.Content == "" || !utf8.ValidString(c[0].Message.Content) ||
		resp.Usage.PromptTokens != len(hf[0]) || resp.Usage.CompletionTokens < 1 || resp.Usage.CompletionTokens > 32 ||
		(c[0].FinishReason == "length") != (resp.Usage.CompletionTokens == 32) {
		t.Errorf("curl answered %s, want model %s, some text, usage.prompt_tokens %d and at most 32 completion tokens",
			out, filepath.Base(dir), len(hf[0]))
	}

	if err := up.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-up.Done():
	case <-time.After(harness.WaitTimeout):
		t.Fatalf("warden up did not exit after Ctrl-C:\n%s", up.LogTail(20))
	}
	waitGone(t, info.children)
}

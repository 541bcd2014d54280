package e2e

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/warden-ai/warden/test/harness"
	"github.com/warden-ai/warden/worker/model"
)

// TestUpServesGGUF: `warden up --model-dir tiny.gguf` serves a GGUF file
// written by `model.ExportGGUF` (F16) from a tiny Llama model — the workers
// load the weights and the tokenizer from the file, the gateway tokenizes
// with the tokenizer its metadata describes — and the chat answer equals
// the in-process engine's over the safetensors directory it came from.
func TestUpServesGGUF(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "src")
	if err := model.Init(dir, model.PresetTiny, 1, model.F16); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tiny-gguf.gguf")
	if err := model.ExportGGUF(dir, path, model.GGMLF16); err != nil {
		t.Fatal(err)
	}
	ref, err := harness.NewReference(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ref.Close() })
	up := env.NewProcess("warden up gguf", filepath.Join(t.TempDir(), "up.log"),
		"up", "--state-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--model-dir", path, "--single")
	up.Env = append(os.Environ(), "WARDEN_WORKER_TRANSFER_SHM_DIR="+env.ShmDir)
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = up.Kill() })
	info := waitUp(t, up)
	checkUpServesModel(t, info, "tiny-gguf", ref)
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

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

// TestUpServesFamilies: `warden up --model-dir` serves generated Qwen2
// (q/k/v biases; P/D over tcp) and Qwen3 (q/k norms, head_dim apart from
// hidden/heads; single node) models, and the chat answer equals the
// in-process engine's over the same directory. The engine's numerics per
// family are checked against a float64 reference in worker/internal/cpu.
func TestUpServesFamilies(t *testing.T) {
	for _, tc := range []struct {
		family string
		args   []string
	}{
		{"qwen2", nil},
		{"qwen3", []string{"--single"}},
	} {
		t.Run(tc.family, func(t *testing.T) {
			name := tc.family + "-tiny"
			dir := filepath.Join(t.TempDir(), name)
			if err := model.InitFamily(dir, model.PresetTiny, tc.family, 1, model.BF16); err != nil {
				t.Fatal(err)
			}
			ref, err := harness.NewReference(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ref.Close() })
			args := append([]string{"up", "--state-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--model-dir", dir}, tc.args...)
			up := env.NewProcess("warden up "+tc.family, filepath.Join(t.TempDir(), "up.log"), args...)
			up.Env = append(os.Environ(), "WARDEN_WORKER_TRANSFER_SHM_DIR="+env.ShmDir)
			if err := up.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = up.Kill() })
			info := waitUp(t, up)
			checkUpServesModel(t, info, name, ref)
			if err := up.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			select {
			case <-up.Done():
			case <-time.After(harness.WaitTimeout):
				t.Fatalf("warden up did not exit after Ctrl-C:\n%s", up.LogTail(20))
			}
			waitGone(t, info.children)
		})
	}
}

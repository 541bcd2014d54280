package runtime

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warden-ai/warden/worker/internal/cpu"
	"github.com/warden-ai/warden/worker/model"
)

// TestOpenClampsSlidingWindow opens a Mistral model whose sliding window
// is shorter than its max_position_embeddings (as Mistral 7B v0.1's): the
// runtime serves the window's context and says so in its log.
func TestOpenClampsSlidingWindow(t *testing.T) {
	dir := t.TempDir()
	if err := model.InitFamily(dir, model.PresetTiny, "mistral", 1, model.F32); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, model.ConfigFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["sliding_window"] = 512
	if data, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	r, err := Open(Options{ModelDir: dir, Threads: 1, PageTokens: 16, KVBytes: 1 << 20, ChunkTokens: 32, MaxBatch: 2,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := &r.Model.Config
	if c.ContextLength() != 512 || c.MaxPositionEmbeddings != 16384 || cpu.SpecFor(c).MaxPositions != 512 {
		t.Errorf("context %d of %d positions, backend %d; want 512", c.ContextLength(), c.MaxPositionEmbeddings, cpu.SpecFor(c).MaxPositions)
	}
	if !strings.Contains(logs.String(), "the context is clamped to the window") || !strings.Contains(logs.String(), "sliding_window=512") {
		t.Errorf("no clamp warning in the log:\n%s", logs.String())
	}
}

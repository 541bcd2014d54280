package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warden-ai/warden/worker/model"
)

// TestModelInitFamily writes a tiny model of each family through the
// command line and loads it back as the worker does.
func TestModelInitFamily(t *testing.T) {
	for _, fam := range model.FamilyNames() {
		dir := t.TempDir()
		var out, errOut bytes.Buffer
		args := []string{"model", "init", "--out", dir, "--preset", "tiny", "--family", fam, "--dtype", "bf16"}
		if code := Main(context.Background(), args, &out, &errOut); code != 0 {
			t.Fatalf("%s: exit %d: %s", fam, code, errOut.String())
		}
		m, err := model.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		arch := m.Config.Architectures[0]
		m.Close()
		if m.Config.ModelType != fam || !strings.Contains(out.String(), arch) {
			t.Errorf("%s: wrote model_type %q; output %q", fam, m.Config.ModelType, out.String())
		}
	}
	var errOut bytes.Buffer
	code := Main(context.Background(), []string{"model", "init", "--out", t.TempDir(), "--family", "gemma"}, &bytes.Buffer{}, &errOut)
	if code == 0 || !strings.Contains(errOut.String(), `"gemma"`) {
		t.Errorf("--family gemma: exit %d, %q", code, errOut.String())
	}
}

// TestModelExportGGUF exports a tiny model as Q8_0 GGUF through the
// command line; the file loads with the source's shape, and a Qwen2
// model is refused.
func TestModelExportGGUF(t *testing.T) {
	dir, out := t.TempDir(), filepath.Join(t.TempDir(), "tiny.gguf")
	ctx := context.Background()
	var stdout, errOut bytes.Buffer
	if code := Main(ctx, []string{"model", "init", "--out", dir, "--preset", "tiny"}, &stdout, &errOut); code != 0 {
		t.Fatalf("init: %s", errOut.String())
	}
	if code := Main(ctx, []string{"model", "export-gguf", "--model-dir", dir, "--out", out, "--dtype", "q8_0"}, &stdout, &errOut); code != 0 {
		t.Fatalf("export: exit %d: %s", code, errOut.String())
	}
	m, err := model.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Config.HiddenSize != 64 || m.Config.NumHiddenLayers != 2 || m.GGUFPath != out {
		t.Errorf("loaded %+v", m.Config)
	}
	qwen := t.TempDir()
	if code := Main(ctx, []string{"model", "init", "--out", qwen, "--family", "qwen2"}, &stdout, &errOut); code != 0 {
		t.Fatal(errOut.String())
	}
	errOut.Reset()
	if code := Main(ctx, []string{"model", "export-gguf", "--model-dir", qwen, "--out", out}, &stdout, &errOut); code == 0 || !strings.Contains(errOut.String(), "Llama") {
		t.Errorf("qwen2 export: exit %d, %q", code, errOut.String())
	}
}

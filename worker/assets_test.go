package worker

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/worker/model"
)

// TestGGUFAssetsAndLayout: a worker serving a GGUF file ships the
// tokenizer its metadata describes (it encodes like the source model's
// tokenizer.json) and hashes the GGUF file as its weights.
func TestGGUFAssetsAndLayout(t *testing.T) {
	dir := t.TempDir()
	if err := model.Init(dir, model.PresetTiny, 1, model.F32); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := model.ExportGGUF(dir, path, model.GGMLF16); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	a, err := loadAssets(m, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tokenizer.Parse(a.TokenizerJson, a.TokenizerConfigJson)
	if err != nil {
		t.Fatal(err)
	}
	want, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	const s = "<|begin_of_text|>Hello, world! 123 ünï"
	g, _ := got.EncodeSpecial(s)
	w, _ := want.EncodeSpecial(s)
	if !slices.Equal(g, w) || got.ChatTemplate() != want.ChatTemplate() {
		t.Errorf("shipped tokenizer encodes %v, want %v", g, w)
	}
	l, err := modelLayout(m)
	if err != nil || len(l.weightsSHA256) != 64 {
		t.Fatalf("layout %+v, %v", l, err)
	}
	if weightsBytes(m) == 0 {
		t.Error("weightsBytes of a GGUF model is 0")
	}
	// The shape LoRA adapters are checked against at the gateway.
	c, sh := m.Config, a.GetShape()
	if int(sh.GetNumHiddenLayers()) != c.NumHiddenLayers || int(sh.GetHiddenSize()) != c.HiddenSize ||
		int(sh.GetIntermediateSize()) != c.IntermediateSize || int(sh.GetNumAttentionHeads()) != c.NumAttentionHeads ||
		int(sh.GetNumKeyValueHeads()) != c.NumKeyValueHeads || int(sh.GetHeadDim()) != c.HeadDim || c.HeadDim == 0 {
		t.Errorf("shape %v, want the model's %+v", sh, c)
	}
}

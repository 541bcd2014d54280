package model

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func readTestConfig(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "configs", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestPublishedFamilyConfigs parses the published config.json of each
// supported non-Llama family and checks the family, the context the
// engine serves and the parameter count against the published one.
func TestPublishedFamilyConfigs(t *testing.T) {
	for _, tc := range []struct {
		file            string
		arch            string
		bias, norm      bool
		headDim, ctx    int
		clamped         bool
		params          int64
		theta           float64
		tied, windowSet bool
	}{
		{"qwen2.5-0.5b-instruct.json", ArchQwen2, true, false, 64, 32768, false, 494_032_768, 1e6, true, true},
		{"qwen3-0.6b.json", ArchQwen3, false, true, 128, 40960, false, 596_049_920, 1e6, true, false},
		{"mistral-7b-instruct-v0.3.json", ArchMistral, false, false, 128, 32768, false, 7_248_023_552, 1e6, false, false},
		// Mistral 7B v0.1 attends over a 4096-token window: the engine
		// serves 4096 positions, where full attention is the same.
		{"mistral-7b-v0.1.json", ArchMistral, false, false, 128, 4096, true, 7_241_732_096, 10000, false, true},
	} {
		t.Run(tc.file, func(t *testing.T) {
			c, err := ParseConfig(readTestConfig(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			f := c.Family()
			if f.Arch != tc.arch || f.QKVBias != tc.bias || f.QKNorm != tc.norm {
				t.Errorf("family %+v, want %s bias %v norm %v", f, tc.arch, tc.bias, tc.norm)
			}
			if c.HeadDim != tc.headDim || c.ContextLength() != tc.ctx || c.WindowClamped() != tc.clamped {
				t.Errorf("head_dim %d context %d clamped %v, want %d %d %v", c.HeadDim, c.ContextLength(), c.WindowClamped(), tc.headDim, tc.ctx, tc.clamped)
			}
			if c.RopeTheta != tc.theta || c.TieWordEmbeddings != tc.tied || (c.SlidingWindow != nil) != tc.windowSet {
				t.Errorf("theta %v tied %v window %v", c.RopeTheta, c.TieWordEmbeddings, c.SlidingWindow)
			}
			if got := c.NumParameters(); got != tc.params {
				t.Errorf("NumParameters = %d, want %d", got, tc.params)
			}
			// The family's extra tensors are named as in the checkpoints.
			names := map[string]bool{}
			for _, s := range c.TensorSpecs() {
				names[s.Name] = true
			}
			p := LayerPrefix(c.NumHiddenLayers - 1)
			if names[p+LayerQBias] != tc.bias || names[p+LayerKBias] != tc.bias || names[p+LayerVBias] != tc.bias ||
				names[p+LayerQNorm] != tc.norm || names[p+LayerKNorm] != tc.norm {
				t.Errorf("tensor specs of the last layer do not match the family: %v", names)
			}
		})
	}
}

// TestQwenSlidingWindow checks when a Qwen sliding window clamps the
// context: only with use_sliding_window and a layer selected for it.
func TestQwenSlidingWindow(t *testing.T) {
	base := readTestConfig(t, "qwen2.5-0.5b-instruct.json")
	for _, tc := range []struct {
		name string
		set  map[string]any
		ctx  int
	}{
		{"off", map[string]any{"sliding_window": 4096}, 32768},
		{"on from layer 21", map[string]any{"sliding_window": 4096, "use_sliding_window": true}, 4096},
		{"on but no layer", map[string]any{"sliding_window": 4096, "use_sliding_window": true, "max_window_layers": 24}, 32768},
		{"default max_window_layers 28 > 24 layers", map[string]any{"sliding_window": 4096, "use_sliding_window": true, "max_window_layers": nil}, 32768},
		{"layer_types selects one", map[string]any{"sliding_window": 4096, "use_sliding_window": true, "max_window_layers": 24,
			"layer_types": append(slices.Repeat([]string{"full_attention"}, 23), "sliding_attention")}, 4096},
		{"window covers context", map[string]any{"sliding_window": 65536, "use_sliding_window": true}, 32768},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal(base, &m); err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.set {
				if v == nil {
					delete(m, k)
				} else {
					m[k] = v
				}
			}
			data, _ := json.Marshal(m)
			c, err := ParseConfig(data)
			if err != nil {
				t.Fatal(err)
			}
			if c.ContextLength() != tc.ctx {
				t.Errorf("ContextLength = %d, want %d", c.ContextLength(), tc.ctx)
			}
			// The window survives a round trip through config.json.
			enc, _ := json.Marshal(&c)
			back, err := ParseConfig(enc)
			if err != nil || back.ContextLength() != tc.ctx {
				t.Errorf("after a round trip: %v, context %d", err, back.ContextLength())
			}
		})
	}
}

// TestFamilyPresets writes each family's tiny preset and loads it back:
// the family's tensors are present, bound and shaped as the config says.
func TestFamilyPresets(t *testing.T) {
	for _, fam := range FamilyNames() {
		t.Run(fam, func(t *testing.T) {
			dir := t.TempDir()
			if err := InitFamily(dir, PresetTiny, fam, 1, BF16); err != nil {
				t.Fatal(err)
			}
			m, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			f := m.Config.Family()
			if f.ModelType != fam || m.Config.ModelType != fam {
				t.Fatalf("family %+v, model_type %q", f, m.Config.ModelType)
			}
			for i, l := range m.Weights().Layers {
				if (l.QBias != nil) != f.QKVBias || (l.KBias != nil) != f.QKVBias || (l.VBias != nil) != f.QKVBias ||
					(l.QNorm != nil) != f.QKNorm || (l.KNorm != nil) != f.QKNorm {
					t.Fatalf("layer %d: family tensors not bound as the family says", i)
				}
				if f.QKNorm && (l.QNorm.Shape[0] != m.Config.HeadDim || m.Config.HeadDim == m.Config.HiddenSize/m.Config.NumAttentionHeads) {
					t.Fatalf("qwen3 head_dim %d should differ from hidden/heads", m.Config.HeadDim)
				}
			}
			if m.Config.ContextLength() != m.Config.MaxPositionEmbeddings {
				t.Errorf("preset context clamped to %d", m.Config.ContextLength())
			}
		})
	}
	if _, err := FamilyPresetConfig(PresetTiny, "gemma"); err == nil {
		t.Error("a gemma preset was accepted")
	}
}

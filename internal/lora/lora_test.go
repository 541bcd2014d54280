package lora

import (
	"errors"
	"strings"
	"testing"

	"github.com/warden-ai/warden/worker/model"
)

func tinyConfig(t testing.TB) *model.Config {
	t.Helper()
	c, err := model.PresetConfig(model.PresetTiny)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

// TestRoundTrip: Random's files parse back into the same matrices, with
// PEFT's scale, and the hash is stable and covers both files.
func TestRoundTrip(t *testing.T) {
	base := tinyConfig(t)
	cfg := Config{BaseModel: "tiny", Rank: 4, Alpha: 8, Targets: []Module{Q, V, Down}}
	cj, w, err := Random(base, cfg, 0.05, 1)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Parse(cj, w, base)
	if err != nil {
		t.Fatal(err)
	}
	if a.Config.Scale != 2 || a.Config.Rank != 4 || len(a.Layers) != base.NumHiddenLayers {
		t.Fatalf("config %+v, %d layers", a.Config, len(a.Layers))
	}
	for i, l := range a.Layers {
		if len(l) != 3 {
			t.Fatalf("layer %d has %d modules, want 3", i, len(l))
		}
		out, in, _ := Down.Shape(base)
		if p := l[Down]; len(p.A) != 4*in || len(p.B) != out*4 {
			t.Fatalf("layer %d down: A %d, B %d", i, len(p.A), len(p.B))
		}
	}
	if a.Hash != Hash(cj, w) || !ValidHash(a.Hash) {
		t.Fatalf("hash %q", a.Hash)
	}
	_, w2, _ := Random(base, cfg, 0.05, 2)
	if Hash(cj, w2) == a.Hash || Hash(append([]byte(" "), cj...), w) == a.Hash {
		t.Fatal("the hash does not cover both files")
	}
	if ValidHash(strings.ToUpper(a.Hash)) || ValidHash(a.Hash[1:]) {
		t.Fatal("ValidHash accepts a non-canonical hash")
	}
}

// TestRefused: what warden would serve wrong is refused with a reason.
func TestRefused(t *testing.T) {
	base := tinyConfig(t)
	good := Config{Rank: 2, Alpha: 4, Targets: []Module{Q}}
	cj, w, err := Random(base, good, 0.1, 1)
	if err != nil {
		t.Fatal(err)
	}
	other := *base
	other.HiddenSize *= 2
	deep := *base
	deep.NumHiddenLayers = 1
	for _, c := range []struct {
		name   string
		config string
		base   *model.Config
		want   string
	}{
		{"dora", `{"r":2,"lora_alpha":4,"target_modules":["q_proj"],"use_dora":true}`, base, "DoRA"},
		{"bias", `{"r":2,"lora_alpha":4,"target_modules":["q_proj"],"bias":"all"}`, base, "bias"},
		{"modules_to_save", `{"r":2,"lora_alpha":4,"target_modules":["q_proj"],"modules_to_save":["lm_head"]}`, base, "modules_to_save"},
		{"regex", `{"r":2,"lora_alpha":4,"target_modules":".*proj"}`, base, "regular expressions"},
		{"unknown module", `{"r":2,"lora_alpha":4,"target_modules":["embed_tokens"]}`, base, "embed_tokens"},
		{"no rank", `{"lora_alpha":4,"target_modules":["q_proj"]}`, base, "r must be"},
		{"prefix tuning", `{"peft_type":"PREFIX_TUNING","r":2,"lora_alpha":4,"target_modules":["q_proj"]}`, base, "PREFIX_TUNING"},
		{"rank mismatch", `{"r":3,"lora_alpha":4,"target_modules":["q_proj"]}`, base, "shape"},
		{"other base", string(cj), &other, "shape"},
		{"too few layers", string(cj), &deep, "layers"},
		{"not a target", `{"r":2,"lora_alpha":4,"target_modules":["k_proj"]}`, base, "not in target_modules"},
	} {
		_, err := Parse([]byte(c.config), w, c.base)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalid mentioning %q", c.name, err, c.want)
		}
	}
	if _, err := Parse(cj, w[:len(w)-1], base); !errors.Is(err, ErrInvalid) || !errors.Is(err, model.ErrInvalidSafetensors) {
		t.Errorf("truncated weights: %v", err)
	}
}

// FuzzParse: untrusted adapter files never panic; what parses has the
// shapes the base model needs.
func FuzzParse(f *testing.F) {
	base := tinyConfig(f)
	cj, w, err := Random(base, Config{Rank: 2, Alpha: 4, Targets: []Module{Q, Up}}, 0.1, 1)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(cj, w)
	f.Add([]byte(`{"r":1,"lora_alpha":1,"target_modules":"all-linear"}`), w[:64])
	f.Fuzz(func(t *testing.T, cj, w []byte) {
		a, err := Parse(cj, w, base)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		for _, l := range a.Layers {
			for m, p := range l {
				out, in, _ := m.Shape(base)
				if len(p.A) != a.Config.Rank*in || len(p.B) != out*a.Config.Rank {
					t.Fatalf("%s: A %d, B %d", m, len(p.A), len(p.B))
				}
			}
		}
	})
}

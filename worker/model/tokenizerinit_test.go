package model

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/warden-ai/warden/internal/tokenizer"
)

// TestInitWithTokenizer: the model takes the tokenizer's files byte for
// byte, a vocabulary of its size and its BOS and EOS tokens, and loads.
func TestInitWithTokenizer(t *testing.T) {
	src := t.TempDir()
	info, err := tokenizer.WritePreset(src, 700) // not the tiny preset's 512
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "m")
	if err := InitWithTokenizer(dir, PresetTiny, src, 3, BF16); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{tokenizer.TokenizerFile, tokenizer.TokenizerConfigFile} {
		a, _ := os.ReadFile(filepath.Join(src, name))
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s not copied as is: %v", name, err)
		}
	}
	m, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c := m.Config
	if c.VocabSize != 700 || c.BOSTokenID == nil || *c.BOSTokenID != info.BOS || !slices.Equal(c.EOSTokenIDs, info.EOS) {
		t.Errorf("config: vocab %d, bos %v, eos %v; want 700, %d, %v", c.VocabSize, c.BOSTokenID, c.EOSTokenIDs, info.BOS, info.EOS)
	}
	if c.HiddenSize != 64 || c.NumHiddenLayers != 2 {
		t.Errorf("not the tiny preset's shape: hidden %d, layers %d", c.HiddenSize, c.NumHiddenLayers)
	}
	if err := InitWithTokenizer(t.TempDir(), PresetTiny, t.TempDir(), 3, F32); err == nil {
		t.Error("a directory without tokenizer.json was accepted")
	}
}

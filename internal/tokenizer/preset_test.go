package tokenizer

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
)

func TestWritePreset(t *testing.T) {
	for _, n := range []int{minPresetVocab, 512, 1000, 32000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "model")
			info, err := WritePreset(dir, n)
			if err != nil {
				t.Fatal(err)
			}
			tk, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if tk.VocabSize() != n {
				t.Fatalf("VocabSize = %d, want %d", tk.VocabSize(), n)
			}
			for id := range int32(n) {
				if _, err := tk.TokenBytes(id); err != nil {
					t.Fatalf("id %d: %v", id, err)
				}
			}
			learned := int(info.BOS)
			for i, s := range presetSpecials {
				if id, ok := tk.TokenID(s); !ok || int(id) != learned+i || !tk.IsSpecial(id) {
					t.Errorf("%s: id %d, %v", s, id, ok)
				}
			}
			if bos, ok := tk.BOS(); !ok || bos != info.BOS {
				t.Errorf("BOS %d, PresetInfo %d", bos, info.BOS)
			}
			if !reflect.DeepEqual(tk.EOS(), info.EOS) || len(info.EOS) != 2 {
				t.Errorf("EOS %v, PresetInfo %v", tk.EOS(), info.EOS)
			}
			if eot, _ := tk.TokenID("<|eot_id|>"); info.EOS[1] != eot {
				t.Errorf("EOS %v lacks <|eot_id|> %d", info.EOS, eot)
			}
			reserved := n - learned - len(presetSpecials)
			if _, ok := tk.TokenID("<|reserved_special_token_" + strconv.Itoa(reserved-1) + "|>"); reserved > 0 && !ok {
				t.Errorf("last reserved token missing")
			}
			if _, ok := tk.TokenID("<|reserved_special_token_" + strconv.Itoa(reserved) + "|>"); ok {
				t.Errorf("one reserved token too many")
			}
			if tk.ChatTemplate() != presetChatTemplate {
				t.Errorf("chat template %q", tk.ChatTemplate())
			}
			if n == 32000 && reserved == 0 {
				t.Errorf("expected padding at 32000")
			}
			if n == 512 && (learned != 512-len(presetSpecials) || reserved != 0) {
				t.Errorf("512: %d learned, %d reserved", learned, reserved)
			}
			// Same inputs, byte-identical files.
			dir2 := t.TempDir()
			if _, err := WritePreset(dir2, n); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{TokenizerFile, TokenizerConfigFile} {
				a, _ := os.ReadFile(filepath.Join(dir, f))
				b, _ := os.ReadFile(filepath.Join(dir2, f))
				if len(a) == 0 || !bytes.Equal(a, b) {
					t.Errorf("%s differs between runs (%d vs %d bytes)", f, len(a), len(b))
				}
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 2 {
				t.Errorf("dir holds %d entries (temporary files left?)", len(entries))
			}
		})
	}
	for _, n := range []int{0, minPresetVocab - 1, maxPresetVocab + 1} {
		if _, err := WritePreset(t.TempDir(), n); err == nil {
			t.Errorf("vocab %d accepted", n)
		}
	}
}

func TestPresetMergesArePrefixes(t *testing.T) {
	// Training is incremental and deterministic: a smaller preset's merges
	// are the first merges of a larger one.
	small, large := train(corpus, 300), train(corpus, 2000)
	if len(small.tokens) != 300 || len(small.merges) < 44 {
		t.Fatalf("small: %d tokens, %d merges", len(small.tokens), len(small.merges))
	}
	if !reflect.DeepEqual(small.merges, large.merges[:len(small.merges)]) {
		t.Fatal("merges of the small preset are not a prefix of the large one")
	}
	seen := map[string]bool{}
	for _, tok := range large.tokens {
		if seen[tok] {
			t.Fatalf("token %q twice", tok)
		}
		seen[tok] = true
	}
}

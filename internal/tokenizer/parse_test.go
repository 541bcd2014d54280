package tokenizer

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseRejectsUnsupported(t *testing.T) {
	base := string(helloVocab.json())
	for _, tc := range []struct {
		name, old, new string
		is             error
		msg            string
	}{
		{"model type", `"type": "BPE"`, `"type": "Unigram"`, ErrUnsupported, `tokenizer: unsupported model type "Unigram"`},
		{"normalizer", `"normalizer": null`, `"normalizer": {"type": "Lowercase"}`, ErrUnsupported, `unsupported normalizer type "Lowercase"`},
		{"regex replace", `"normalizer": null`, `"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Replace", "pattern": {"Regex": " "}, "content": "_"}]}`, ErrUnsupported, `normalizer.normalizers[1].pattern`},
		{"deep normalizer", `"normalizer": null`, `"normalizer": {"type": "Sequence", "normalizers": [{"type": "Sequence", "normalizers": [{"type": "Sequence", "normalizers": [{"type": "Sequence", "normalizers": [{"type": "Sequence", "normalizers": []}]}]}]}]}`, ErrUnsupported, `nested deeper`},
		{"long replace", `"normalizer": null`, `"normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`, ErrMalformed, `normalizer.content`},
		{"decoder", `"decoder": {"type": "ByteLevel"}`, `"decoder": {"type": "Metaspace"}`, ErrUnsupported, `unsupported decoder type "Metaspace"`},
		{"byte_fallback", `"ignore_merges"`, `"byte_fallback": true, "ignore_merges"`, ErrUnsupported, `model.byte_fallback`},
		{"dropout", `"ignore_merges"`, `"dropout": 0.1, "ignore_merges"`, ErrUnsupported, `model.dropout`},
		{"suffix", `"ignore_merges"`, `"end_of_word_suffix": "</w>", "ignore_merges"`, ErrUnsupported, `model.end_of_word_suffix`},
		{"split behavior", `"behavior": "Isolated"`, `"behavior": "Removed"`, ErrUnsupported, `pre_tokenizer.pretokenizers[0].behavior "Removed"`},
		{"split invert", `"invert": false`, `"invert": true`, ErrUnsupported, `pre_tokenizer.pretokenizers[0].invert`},
		{"pre-tokenizer type", `"type": "Split"`, `"type": "Whitespace"`, ErrUnsupported, `pre_tokenizer.pretokenizers[0] type "Whitespace"`},
		{"bad regex", `"Regex": "`, `"Regex": "(`, ErrMalformed, `pre_tokenizer.pretokenizers[0].pattern`},
		{"merge of unknown tokens", `"merges": ["h e"`, `"merges": ["q z"`, ErrMalformed, `model.merges[0]`},
		{"merge syntax", `"merges": ["h e"`, `"merges": ["h e x"`, ErrMalformed, `two tokens`},
		{"missing byte token", `"Ā":0,`, ``, ErrMalformed, `no byte-level token for byte 0x00`},
		{"negative id", `"Ā":0,`, `"Ā":-5,`, ErrMalformed, `out of range`},
		{"huge id", `"Ā":0,`, `"Ā":2000000000,`, ErrMalformed, `out of range`},
		{"duplicate id", `"ā":1,`, `"ā":0,`, ErrMalformed, `used by two tokens`},
		{"not json", `{`, `[`, ErrMalformed, `tokenizer.json`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(base, tc.old) {
				t.Fatalf("fixture lacks %q", tc.old)
			}
			_, err := Parse([]byte(strings.Replace(base, tc.old, tc.new, 1)), nil)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v; want %v containing %q", err, tc.is, tc.msg)
			}
		})
	}
	seq := handVocab{extra: helloVocab.extra, merges: helloVocab.merges, preTokenizer: `{"type": "Sequence", "pretokenizers": []}`}
	if _, err := Parse(seq.json(), nil); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("empty Sequence: %v", err)
	}
	if _, err := Parse([]byte(`{"model": null}`), nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("no model: %v", err)
	}
}

func TestParseConfigForms(t *testing.T) {
	h := helloVocab
	h.added = []string{
		`{"id": 265, "content": "<s>", "special": true}`,
		`{"id": 266, "content": "</s>", "special": true}`,
		`{"id": 267, "content": "<|eot_id|>", "special": true}`,
	}
	tj := h.json()
	for _, tc := range []struct {
		name    string
		cfg     string
		bos     int32
		hasBOS  bool
		eos     []int32
		tmplHas string
	}{
		{"no config: fallbacks", ``, 265, true, []int32{267, 266}, "role"},
		{"strings", `{"bos_token": "<s>", "eos_token": "</s>"}`, 265, true, []int32{266, 267}, "role"},
		{"objects", `{"bos_token": {"content": "<s>", "__type": "AddedToken"}, "eos_token": {"content": "<|eot_id|>"}}`, 265, true, []int32{267, 266}, "role"},
		{"null", `{"bos_token": null, "eos_token": null}`, 265, true, []int32{267, 266}, "role"},
		{"unknown bos", `{"bos_token": "<nope>"}`, 0, false, []int32{267, 266}, "role"},
		{"template string", `{"chat_template": "{{ 'T' }}"}`, 265, true, []int32{267, 266}, "'T'"},
		{"template list", `{"chat_template": [{"name": "tool_use", "template": "x"}, {"name": "default", "template": "{{ 'D' }}"}]}`, 265, true, []int32{267, 266}, "'D'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := mustParse(t, tj, []byte(tc.cfg))
			bos, ok := tk.BOS()
			if bos != tc.bos || ok != tc.hasBOS {
				t.Errorf("BOS = %d, %v; want %d, %v", bos, ok, tc.bos, tc.hasBOS)
			}
			if got := tk.EOS(); !reflect.DeepEqual(got, tc.eos) {
				t.Errorf("EOS = %v, want %v", got, tc.eos)
			}
			if !strings.Contains(tk.ChatTemplate(), tc.tmplHas) {
				t.Errorf("template %q lacks %q", tk.ChatTemplate(), tc.tmplHas)
			}
		})
	}
	for _, bad := range []string{
		`{"bos_token": 5}`,
		`{"chat_template": [{"name": "other", "template": "x"}]}`,
		`{"chat_template": 7}`,
		`not json`,
	} {
		if _, err := Parse(tj, []byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("config %s: error %v", bad, err)
		}
	}
	if _, err := Parse(tj, []byte(`{"chat_template": "{% for %}"}`)); !errors.Is(err, ErrChatTemplate) {
		t.Errorf("bad template syntax: %v", err)
	}
}

func TestAccessors(t *testing.T) {
	h := helloVocab
	h.added = []string{`{"id": 265, "content": "<|eot_id|>", "special": true}`, `{"id": 266, "content": "hi there", "special": false}`}
	tk := mustParse(t, h.json(), nil)
	if tk.VocabSize() != 267 {
		t.Errorf("VocabSize = %d", tk.VocabSize())
	}
	for s, want := range map[string]int32{"Ġworld": 264, "<|eot_id|>": 265, "hi there": 266, "a": 'a', "Ġ": ' '} {
		if id, ok := tk.TokenID(s); !ok || id != want {
			t.Errorf("TokenID(%q) = %d, %v; want %d", s, id, ok, want)
		}
	}
	if _, ok := tk.TokenID(" world"); ok {
		t.Error("TokenID takes the byte-level spelling, not raw text")
	}
	if !tk.IsSpecial(265) || tk.IsSpecial(266) || tk.IsSpecial(264) || tk.IsSpecial(-1) {
		t.Error("IsSpecial")
	}
	// A non-special added token is recognised by Encode too.
	if got := mustEncode(t, tk, "say hi there"); !reflect.DeepEqual(got[len(got)-1:], []int32{266}) {
		t.Errorf("Encode = %v", got)
	}
	// Encode passes over a special match as a whole, like Hugging Face's
	// split_special_tokens: an added token inside it is not matched either.
	h.added = append(h.added, `{"content": "eot", "special": false}`)
	tk = mustParse(t, h.json(), nil)
	eotWord, _ := tk.TokenID("eot")
	if got := mustEncode(t, tk, "<|eot_id|>"); slices.Contains(got, eotWord) || slices.Contains(got, 265) {
		t.Errorf("Encode(<|eot_id|>) = %v", got)
	}
	if got := mustEncode(t, tk, "an eot"); got[len(got)-1] != eotWord {
		t.Errorf("Encode(an eot) = %v", got)
	}
	if len(tk.SHA256()) != 64 {
		t.Errorf("SHA256 = %q", tk.SHA256())
	}
}

// TestAddedTokenIDs follows Hugging Face: an added token whose content is in
// the vocabulary takes the vocabulary's ID; the others are numbered after
// the vocabulary, whatever "id" the file says.
func TestAddedTokenIDs(t *testing.T) {
	h := helloVocab
	h.added = []string{
		`{"id": 900, "content": "<a>", "special": true}`,
		`{"id": 901, "content": "hello", "special": false}`,
		`{"id": 902, "content": "<b>", "special": true}`,
		`{"id": 903, "content": "<a>", "special": true}`,
	}
	tk := mustParse(t, h.json(), nil)
	for s, want := range map[string]int32{"<a>": 265, "hello": 259, "<b>": 266} {
		if id, _ := tk.TokenID(s); id != want {
			t.Errorf("%q has id %d, want %d", s, id, want)
		}
	}
	h.added = append(h.added, `{"content": "<a>", "special": false}`)
	if _, err := Parse(h.json(), nil); !errors.Is(err, ErrMalformed) {
		t.Errorf("conflicting repeat: %v", err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); err == nil {
		t.Fatal("Load of an empty directory succeeded")
	}
	if err := os.WriteFile(filepath.Join(dir, TokenizerFile), helloVocab.json(), 0o644); err != nil {
		t.Fatal(err)
	}
	tk, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tk.ChatTemplate(), "': '") {
		t.Errorf("default template = %q", tk.ChatTemplate())
	}
	// chat_template.jinja is used when tokenizer_config.json has none.
	if err := os.WriteFile(filepath.Join(dir, ChatTemplateFile), []byte("{{ 'J' }}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if tk, err = Load(dir); err != nil || tk.ChatTemplate() != "{{ 'J' }}" {
		t.Fatalf("template %q, %v", tk.ChatTemplate(), err)
	}
	if err := os.WriteFile(filepath.Join(dir, TokenizerConfigFile), []byte(`{"chat_template": "{{ 'C' }}"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if tk, err = Load(dir); err != nil || tk.ChatTemplate() != "{{ 'C' }}" {
		t.Fatalf("template %q, %v", tk.ChatTemplate(), err)
	}
}

// FuzzParse feeds arbitrary bytes as tokenizer.json and tokenizer_config.json:
// Parse must return a tokenizer or an error, never panic, and a tokenizer it
// returns must encode, decode and render.
func FuzzParse(f *testing.F) {
	tj, cj := presetBytes(f, 300)
	f.Add(tj, cj)
	f.Add(helloVocab.json(), []byte(`{"bos_token": {"content": "<s>"}, "chat_template": [{"name": "default", "template": "{{ bos_token }}"}]}`))
	g := handVocab{extra: helloVocab.extra, merges: helloVocab.merges, pairMerges: true,
		preTokenizer: `{"type": "ByteLevel", "add_prefix_space": true}`,
		added:        []string{`{"content": "<m>", "lstrip": true, "rstrip": true, "single_word": true, "normalized": true}`}}
	f.Add(g.json(), []byte(`{"chat_template": "{% for m in messages %}{{ m.content | trim }}{% endfor %}"}`))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}`), []byte(nil))
	// SentencePiece-style files: normalizers, Metaspace, byte fallback, the
	// decoder Sequence; and a byte-level one with NFC (Qwen).
	f.Add(spTokenizerJSON(f, nil), []byte(nil))
	f.Add(spTokenizerJSON(f, metaspaceEdit("first", true)), []byte(nil))
	f.Add([]byte(strings.Replace(string(helloVocab.json()), `"normalizer": null`, `"normalizer": {"type": "NFC"}`, 1)), []byte(nil))
	f.Fuzz(func(t *testing.T, tokenizerJSON, configJSON []byte) {
		tk, err := Parse(tokenizerJSON, configJSON)
		if err != nil {
			return
		}
		ids, err := tk.EncodeSpecial("Hi <m> there, 123 ſ's!\n")
		if err != nil {
			return // a fallback regex may time out
		}
		if _, err := tk.Decode(ids); err != nil {
			t.Fatalf("Decode of its own ids: %v", err)
		}
		_, _ = tk.ApplyChatTemplate([]Message{{Role: "user", Content: "x"}}, true)
	})
}

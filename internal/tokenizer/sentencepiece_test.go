package tokenizer

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
)

// spTokenizer parses spTokenizerJSON.
func spTokenizer(t testing.TB, edit func(spec map[string]any)) *Tokenizer {
	t.Helper()
	return mustParse(t, spTokenizerJSON(t, edit), nil)
}

// spTokenizerJSON builds a small SentencePiece-style BPE tokenizer.json
// (text vocabulary with ▁ for spaces, <0xXX> byte fallback tokens, <unk>) in
// the layout of Llama 2 and Mistral files; edit adjusts the JSON object.
func spTokenizerJSON(t testing.TB, edit func(spec map[string]any)) []byte {
	t.Helper()
	vocab := map[string]int{"<unk>": 0, "<s>": 1, "</s>": 2}
	for b := range 256 {
		vocab[fmt.Sprintf("<0x%02X>", b)] = 3 + b
	}
	for i, tok := range []string{"▁", "h", "e", "l", "o", "w", "r", "d", "▁h", "el", "lo", "▁hel",
		"▁hello", "▁w", "or", "▁wor", "▁world", "中", "▁▁", "▁worl"} {
		vocab[tok] = 259 + i
	}
	added := func(id int, content string, lstrip, normalized, special bool) map[string]any {
		return map[string]any{"id": id, "content": content, "single_word": false, "lstrip": lstrip,
			"rstrip": false, "normalized": normalized, "special": special}
	}
	spec := map[string]any{
		"added_tokens": []any{added(0, "<unk>", false, false, true), added(1, "<s>", false, false, true),
			added(2, "</s>", false, false, true), added(280, "[X]", true, true, false)},
		"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Prepend", "prepend": "▁"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"}}},
		"pre_tokenizer": nil,
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
			map[string]any{"type": "ByteFallback"}, map[string]any{"type": "Fuse"},
			map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0}}},
		"model": map[string]any{"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
			"vocab": vocab, "merges": []string{"▁ h", "e l", "l o", "▁h el", "▁hel lo", "▁ w", "o r", "▁w or",
				"▁wor l", "▁ ▁", "▁worl d"}},
	}
	if edit != nil {
		edit(spec)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func metaspaceEdit(scheme string, split bool) func(map[string]any) {
	return func(spec map[string]any) {
		m := map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": split}
		spec["normalizer"], spec["pre_tokenizer"], spec["decoder"] = nil, m, m
	}
}

// TestSentencePieceStyle checks the IDs Hugging Face tokenizers 0.23.2
// gives for spTokenizer's variants (EncodeSpecial = its encode without
// special tokens added). TestConformance does the same on real files.
func TestSentencePieceStyle(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(map[string]any)
		want map[string][]int32
	}{
		{"normalizer", nil, map[string][]int32{
			"hello world": {271, 275}, "hello  world": {271, 259, 275}, "Hello": {259, 75, 268, 269},
			"hello\nworld ü": {271, 13, 264, 273, 262, 266, 259, 198, 191}, "<s>hello</s> world": {1, 271, 2, 259, 275},
			" hello": {259, 271}, "中文 hello": {259, 276, 233, 153, 138, 271},
			"x [X] hello [X]world": {259, 123, 279, 271, 279, 264, 273, 262, 266}, "": {}, " ": {277},
			"éé€ hello": {259, 198, 172, 198, 172, 229, 133, 175, 271},
		}},
		{"unk", func(spec map[string]any) { spec["model"].(map[string]any)["byte_fallback"] = false }, map[string][]int32{
			"Hello": {259, 0, 268, 269}, "hello\nworld ü": {271, 0, 264, 273, 262, 266, 259, 0},
			"中文 hello": {259, 276, 0, 271}, "x [X] hello [X]world": {259, 0, 279, 271, 279, 264, 273, 262, 266},
			"éé€ hello": {259, 0, 271},
		}},
		{"metaspace first", metaspaceEdit("first", false), map[string][]int32{
			"hello  world": {271, 259, 275}, "<s>hello</s> world": {1, 260, 268, 269, 2, 275}, " hello": {271},
			"x [X] hello [X]world": {259, 123, 279, 271, 279, 264, 273, 262, 266}, " ": {259}, "": {},
		}},
		{"metaspace always split", metaspaceEdit("always", true), map[string][]int32{
			"hello  world": {271, 259, 275}, "<s>hello</s> world": {1, 271, 2, 275}, " hello": {271},
			"x [X] hello [X]world": {259, 123, 279, 271, 279, 275}, " ": {259},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := spTokenizer(t, tc.edit)
			for s, want := range tc.want {
				if got := mustEncodeSpecial(t, tk, s); !slices.Equal(got, want) {
					t.Errorf("%q: got %v, want %v", s, got, want)
				}
			}
		})
	}
}

// TestSentencePieceDecode: ▁ decodes to a space and, with the ByteFallback
// decoder, <0xXX> to its byte; the space before the first word is kept
// (see parseDecoder).
func TestSentencePieceDecode(t *testing.T) {
	tk := spTokenizer(t, nil)
	ids := mustEncodeSpecial(t, tk, "hello  world é中\n")
	if got := mustDecode(t, tk, ids); got != " hello  world é中\n" {
		t.Errorf("Decode = %q", got)
	}
	if b, err := tk.TokenBytes(3 + 0xC3); err != nil || string(b) != "\xc3" {
		t.Errorf("TokenBytes(<0xC3>) = %q, %v", b, err)
	}
	if bos, ok := tk.BOS(); !ok || bos != 1 {
		t.Errorf("BOS = %d, %v", bos, ok)
	}
	// Plain Encode leaves <s> as text: "<" and ">" have no tokens, so they
	// fall back to bytes.
	if got := mustEncode(t, tk, "<s>"); !reflect.DeepEqual(got, []int32{259, 3 + '<', 3 + 's', 3 + '>'}) {
		t.Errorf("Encode(<s>) = %v", got)
	}
	// The Metaspace decoder has no byte fallback: <0xXX> stays as written,
	// as in Hugging Face.
	tk = spTokenizer(t, metaspaceEdit("first", false))
	ids = mustEncodeSpecial(t, tk, "hello  world\n")
	if got := mustDecode(t, tk, ids); got != " hello  world<0x0A>" {
		t.Errorf("Metaspace Decode = %q", got)
	}
}

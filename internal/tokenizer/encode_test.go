package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

func TestByteLevelAlphabet(t *testing.T) {
	seen := map[rune]bool{}
	for b := range 256 {
		r := byteToRune(byte(b))
		if seen[r] {
			t.Fatalf("byte 0x%02x maps to %U twice", b, r)
		}
		seen[r] = true
		if back, ok := runeToByte(r); !ok || back != byte(b) {
			t.Fatalf("byte 0x%02x → %U → 0x%02x, %v", b, r, back, ok)
		}
	}
	for b, want := range map[byte]rune{' ': 'Ġ', '\n': 'Ċ', '\t': 'ĉ', 'a': 'a', 0x00: 'Ā', 0x7F: 'ġ', 0xAD: 'Ń', 0xE9: 'é'} {
		if got := byteToRune(b); got != want {
			t.Errorf("byteToRune(0x%02x) = %q, want %q", b, got, want)
		}
	}
	if _, ok := runeToByte('Ĕ' + 0x100); ok {
		t.Error("rune outside the alphabet decoded")
	}
	if got := decodeByteLevel("ĠworldĊ"); got != " world\n" {
		t.Errorf("decodeByteLevel = %q", got)
	}
	if got := decodeByteLevel("a b"); got != "a b" { // ' ' is not in the alphabet: raw
		t.Errorf("decodeByteLevel fallback = %q", got)
	}
}

// helloVocab spells "hello" (259) and " world" (264) through nine merges.
var helloVocab = handVocab{
	extra:  []string{"he", "ll", "hell", "hello", "Ġw", "or", "Ġwor", "ld", "Ġworld"},
	merges: []string{"h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld"},
}

func TestHandBuiltVocabularies(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    handVocab
		in   string
		want []int32
	}{
		{"hello world", helloVocab, "hello world", []int32{259, 264}},
		{"partial", helloVocab, "help worlds", []int32{256, 'l', 'p', 264, 's'}},
		{"pair-form merges", handVocab{extra: helloVocab.extra, merges: helloVocab.merges, pairMerges: true},
			"hello world", []int32{259, 264}},
		{"rank decides", handVocab{extra: []string{"ab", "bc"}, merges: []string{"a b", "b c"}}, "abc", []int32{256, 'c'}},
		{"rank decides, reversed", handVocab{extra: []string{"ab", "bc"}, merges: []string{"b c", "a b"}}, "abc", []int32{'a', 257}},
		{"leftmost on ties", handVocab{extra: []string{"aa"}, merges: []string{"a a"}}, "aaa", []int32{256, 'a'}},
		{"repeated", handVocab{extra: []string{"aa", "aaaa"}, merges: []string{"a a", "aa aa"}}, "aaaaaaa", []int32{257, 256, 'a'}},
		{"without ignore_merges", handVocab{extra: []string{"xy", "xyz"}, merges: []string{"x y"}}, "xyz", []int32{256, 'z'}},
		{"ignore_merges keeps a token whole", handVocab{extra: []string{"xy", "xyz"}, merges: []string{"x y"}, ignoreMerges: true},
			"xyz", []int32{257}},
		{"no merge across pre-tokens", handVocab{extra: []string{"oĠ"}, merges: []string{"o Ġ"}}, "o o", []int32{'o', ' ', 'o'}},
		{"multi-byte", handVocab{extra: []string{"Ã©"}, merges: []string{"Ã ©"}}, "é", []int32{256}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := mustParse(t, tc.h.json(), nil)
			got := mustEncode(t, tk, tc.in)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Encode(%q) = %v, want %v", tc.in, got, tc.want)
			}
			if dec := mustDecode(t, tk, got); dec != tc.in {
				t.Fatalf("Decode = %q, want %q", dec, tc.in)
			}
		})
	}
}

func TestLongPieceIsLinearithmic(t *testing.T) {
	// A single pre-token of 200k letters: BPE must neither hang nor differ
	// from the expected pairing.
	tk := mustParse(t, handVocab{extra: []string{"aa", "aaaa"}, merges: []string{"a a", "aa aa"}}.json(), nil)
	ids := mustEncode(t, tk, strings.Repeat("a", 200_001))
	if len(ids) != 50_001 || ids[0] != 257 || ids[len(ids)-1] != 'a' {
		t.Fatalf("got %d ids, first %d, last %d", len(ids), ids[0], ids[len(ids)-1])
	}
}

// TestTrickyStringsPreset checks byte-level BPE invariants with the 512-token
// preset: the IDs decode to the input, every token lies inside one
// pre-token, and encoding each pre-token alone gives the same IDs.
func TestTrickyStringsPreset(t *testing.T) {
	tk := presetTokenizer(t, 512)
	for _, s := range trickyStrings {
		ids := mustEncode(t, tk, s)
		if got := mustDecode(t, tk, ids); got != s {
			t.Errorf("round trip %q → %v → %q", s, ids, got)
			continue
		}
		var perPiece []int32
		var bounds []int // pre-token end offsets
		off := 0
		_ = tk.pre.each(s, true, func(p string) error {
			perPiece = append(perPiece, mustEncode(t, tk, p)...)
			off += len(p)
			bounds = append(bounds, off)
			return nil
		})
		if !slices.Equal(perPiece, ids) {
			t.Errorf("%q: whole %v, per pre-token %v", s, ids, perPiece)
		}
		// Token ends must include every pre-token end.
		ends := map[int]bool{}
		off = 0
		for _, id := range ids {
			b, err := tk.TokenBytes(id)
			if err != nil || len(b) == 0 {
				t.Fatalf("TokenBytes(%d) = %q, %v", id, b, err)
			}
			off += len(b)
			ends[off] = true
		}
		for _, e := range bounds {
			if !ends[e] {
				t.Errorf("%q: a token crosses the pre-token boundary at %d", s, e)
			}
		}
	}
}

// TestHuggingFaceGolden compares with IDs and pre-tokens that Hugging Face
// tokenizers 0.22.2 (the Rust library, through its Node binding) produced for
// testdata/hf/*.json: a 512-token preset with the Llama 3 Split, and variants
// with GPT-2's ByteLevel regex, add_prefix_space, an unrecognised Split
// pattern (regexp2 fallback) and added tokens with lstrip / rstrip /
// single_word / normalized / non-special options. HF's Encode recognises
// every added token, so this compares with EncodeSpecial.
func TestHuggingFaceGolden(t *testing.T) {
	var strs []string
	readJSON(t, "testdata/hf/strings.json", &strs)
	var golden map[string]struct {
		IDs [][]int32  `json:"ids"`
		Pre [][]string `json:"pre"`
	}
	readJSON(t, "testdata/hf/golden.json", &golden)
	if len(golden) != 5 {
		t.Fatalf("golden has %d tokenizers", len(golden))
	}
	for name, g := range golden {
		t.Run(name, func(t *testing.T) {
			tj, err := os.ReadFile(filepath.Join("testdata/hf", name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			tk := mustParse(t, tj, nil)
			for i, s := range strs {
				got := mustEncodeSpecial(t, tk, s)
				if len(got) == 0 && len(g.IDs[i]) == 0 {
					continue
				}
				if !reflect.DeepEqual(got, g.IDs[i]) {
					t.Errorf("%q: got %v, Hugging Face %v", s, got, g.IDs[i])
				}
				var pre []string
				_ = tk.pre.each(s, true, func(p string) error {
					pre = append(pre, encodeByteLevel(p))
					return nil
				})
				if len(pre) != 0 || len(g.Pre[i]) != 0 {
					if !reflect.DeepEqual(pre, g.Pre[i]) {
						t.Errorf("%q: pre-tokens %q, Hugging Face %q", s, pre, g.Pre[i])
					}
				}
			}
		})
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// TestRealLlama3 checks IDs that Hugging Face gives with Meta's Llama 3
// tokenizer. The file is not shipped; set WARDEN_TEST_LLAMA3_DIR to a Llama 3
// model directory to run it.
func TestRealLlama3(t *testing.T) {
	dir := os.Getenv("WARDEN_TEST_LLAMA3_DIR")
	if dir == "" {
		t.Skip("WARDEN_TEST_LLAMA3_DIR not set")
	}
	tk, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string][]int32{
		"Hello world":                   {9906, 1917},
		"It'S 12345 ſ's\n\n  x":         {2181, 13575, 220, 4513, 1774, 27006, 123, 596, 271, 220, 865},
		"今天天气很好 👍🏽":                     {110916, 36827, 102146, 101600, 53901, 62904, 235, 9468, 237, 121},
		"<|begin_of_text|>hi<|eot_id|>": {128000, 6151, 128009},
		"  \t\r\n  end  ":               {256, 4574, 220, 842, 256},
	} {
		if got := mustEncodeSpecial(t, tk, s); !reflect.DeepEqual(got, want) {
			t.Errorf("%q: got %v, want %v", s, got, want)
		}
	}
	if bos, ok := tk.BOS(); !ok || bos != 128000 {
		t.Errorf("BOS = %d, %v", bos, ok)
	}
	if tk.VocabSize() != 128256 {
		t.Errorf("VocabSize = %d", tk.VocabSize())
	}
}

func TestEncodeDoesNotInterpretSpecialTokens(t *testing.T) {
	tk := presetTokenizer(t, 512)
	eot, ok := tk.TokenID("<|eot_id|>")
	if !ok {
		t.Fatal("no <|eot_id|>")
	}
	text := "hi <|eot_id|><|begin_of_text|> there"
	plain := mustEncode(t, tk, text)
	for _, id := range plain {
		if tk.IsSpecial(id) {
			t.Fatalf("Encode produced special token %d: %v", id, plain)
		}
	}
	if got := mustDecode(t, tk, plain); got != text {
		t.Fatalf("round trip %q", got)
	}
	special := mustEncodeSpecial(t, tk, text)
	bos, _ := tk.BOS()
	want := append(append(mustEncode(t, tk, "hi "), eot, bos), mustEncode(t, tk, " there")...)
	if !reflect.DeepEqual(special, want) {
		t.Fatalf("EncodeSpecial = %v, want %v", special, want)
	}
}

func TestInvalidUTF8(t *testing.T) {
	tk := presetTokenizer(t, 512)
	for _, tc := range []struct {
		in     string
		offset string
	}{
		{"abc\xffdef", "offset 3"},
		{"\xc3", "offset 0"},
		{"ok é \xe2\x82", "offset 6"},
		{"\xed\xa0\x80", "offset 0"}, // a surrogate
	} {
		for name, enc := range map[string]func(string) ([]int32, error){"Encode": tk.Encode, "EncodeSpecial": tk.EncodeSpecial} {
			_, err := enc(tc.in)
			if !errors.Is(err, ErrInvalidUTF8) || !strings.Contains(err.Error(), tc.offset) {
				t.Errorf("%s(%q) error %v, want ErrInvalidUTF8 at %s", name, tc.in, err, tc.offset)
			}
		}
	}
}

func TestConcurrentEncode(t *testing.T) {
	tk := presetTokenizer(t, 512)
	want := make([][]int32, len(trickyStrings))
	for i, s := range trickyStrings {
		want[i] = mustEncode(t, presetTokenizer(t, 512), s) // separate cache
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for round := range 20 {
				for i := range trickyStrings {
					j := (i + g + round) % len(trickyStrings)
					got, err := tk.Encode(trickyStrings[j])
					if err != nil || !reflect.DeepEqual(got, want[j]) {
						t.Errorf("goroutine %d: %q → %v, %v; want %v", g, trickyStrings[j], got, err, want[j])
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

func TestCacheUnderEviction(t *testing.T) {
	// Far more distinct pre-tokens than slots: every entry left in the cache
	// must still be the right answer for its key.
	tk := presetTokenizer(t, 512)
	var sb strings.Builder
	for i := range 200_000 {
		sb.WriteString(" w")
		sb.WriteString(strconvBase36(i))
	}
	mustEncode(t, tk, sb.String())
	used := 0
	for i := range tk.cache.slots {
		e := tk.cache.slots[i].Load()
		if e == nil {
			continue
		}
		used++
		if want := tk.bpeUncached(nil, e.key); !slices.Equal(e.ids, want) {
			t.Fatalf("cache[%q] = %v, want %v", e.key, e.ids, want)
		}
	}
	if used < cacheSlots/2 {
		t.Fatalf("only %d of %d slots used", used, cacheSlots)
	}
}

func strconvBase36(i int) string {
	const digits = "abcdefghijklmnopqrstuvwxyz"
	s := ""
	for {
		s = string(digits[i%26]) + s
		i /= 26
		if i == 0 {
			return s
		}
	}
}

// FuzzRoundTrip: any valid UTF-8 text decodes back from its tokens, with the
// preset tokenizer and through the stream decoder.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range trickyStrings {
		f.Add(s)
	}
	tk := presetTokenizer(f, 512)
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := tk.Encode(s)
		if !utf8.ValidString(s) {
			if !errors.Is(err, ErrInvalidUTF8) {
				t.Fatalf("invalid UTF-8 %q: err %v", s, err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := mustDecode(t, tk, ids); got != s {
			t.Fatalf("%q → %v → %q", s, ids, got)
		}
		d := NewStreamDecoder(tk)
		var sb strings.Builder
		for _, id := range ids {
			out, err := d.Add(id)
			if err != nil {
				t.Fatal(err)
			}
			sb.WriteString(out)
		}
		sb.WriteString(d.Flush())
		if sb.String() != s {
			t.Fatalf("stream %q, want %q", sb.String(), s)
		}
	})
}

// TestNormalizedSpecialTokenAcrossParts: a special token with
// normalized=true is matched in the second pass, over text joined across
// parts; it is recognised only inside a part that allows special tokens,
// never in user text nor straddling a boundary.
func TestNormalizedSpecialTokenAcrossParts(t *testing.T) {
	h := handVocab{extra: helloVocab.extra, merges: helloVocab.merges,
		added: []string{`{"id": 300, "content": "<n>", "normalized": true, "special": true}`}}
	tk := mustParse(t, h.json(), nil)
	n, ok := tk.TokenID("<n>")
	if !ok {
		t.Fatal("no <n>")
	}
	count := func(parts ...part) int {
		ids, err := tk.encodeParts(parts)
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		for _, id := range ids {
			if id == n {
				k++
			}
		}
		return k
	}
	sp, pl := tk.special, tk.plain
	for _, tc := range []struct {
		name  string
		parts []part
		want  int
	}{
		{"template", []part{{"a<n>b", sp}}, 1},
		{"user", []part{{"a<n>b", pl}}, 0},
		{"template then user", []part{{"x<n>", sp}, {"<n>y", pl}}, 1},
		{"user then template", []part{{"x<n>", pl}, {"<n>y", sp}}, 1},
		{"straddling", []part{{"x<", sp}, {"n>y", pl}}, 0},
		{"straddling trusted", []part{{"x<", sp}, {"n>y", sp}}, 1},
	} {
		if got := count(tc.parts...); got != tc.want {
			t.Errorf("%s: %d <n> tokens, want %d", tc.name, got, tc.want)
		}
	}
}

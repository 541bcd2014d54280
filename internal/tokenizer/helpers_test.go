package tokenizer

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// handVocab describes a small hand-built tokenizer: the 256 byte tokens at
// IDs equal to their byte value, then extra tokens from 256 on, in order.
type handVocab struct {
	extra        []string // extra tokens, byte-level spelled
	merges       []string // "a b" rules, byte-level spelled
	pairMerges   bool     // write merges as ["a", "b"]
	ignoreMerges bool
	preTokenizer string   // JSON; default: the Llama 3 Split + ByteLevel
	added        []string // JSON objects for added_tokens
}

func (h handVocab) json() []byte {
	var b bytes.Buffer
	b.WriteString(`{"added_tokens": [` + strings.Join(h.added, ",") + `], "normalizer": null, "pre_tokenizer": `)
	pre := h.preTokenizer
	if pre == "" {
		var p bytes.Buffer
		writeJSONString(&p, llama3Pattern)
		pre = `{"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": ` + p.String() +
			`}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]}`
	}
	b.WriteString(pre)
	b.WriteString(`, "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {`)
	for i := range 256 {
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSONString(&b, string(byteToRune(byte(i))))
		b.WriteString(":" + strconv.Itoa(i))
	}
	for i, tok := range h.extra {
		b.WriteByte(',')
		writeJSONString(&b, tok)
		b.WriteString(":" + strconv.Itoa(256+i))
	}
	b.WriteString(`}, "merges": [`)
	for i, m := range h.merges {
		if i > 0 {
			b.WriteByte(',')
		}
		if h.pairMerges {
			l, r, _ := strings.Cut(m, " ")
			pair, _ := json.Marshal([]string{l, r})
			b.Write(pair)
		} else {
			writeJSONString(&b, m)
		}
	}
	b.WriteString(`], "ignore_merges": ` + map[bool]string{true: "true", false: "false"}[h.ignoreMerges] + `}}`)
	return b.Bytes()
}

func mustParse(t testing.TB, tokenizerJSON, configJSON []byte) *Tokenizer {
	t.Helper()
	tk, err := Parse(tokenizerJSON, configJSON)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// presetFiles caches preset files per vocabulary size across tests.
var presetFiles sync.Map // int → [2][]byte

func presetBytes(t testing.TB, vocabSize int) (tokenizerJSON, configJSON []byte) {
	t.Helper()
	if v, ok := presetFiles.Load(vocabSize); ok {
		f := v.([2][]byte)
		return f[0], f[1]
	}
	tj, cj, _, err := buildPreset(vocabSize)
	if err != nil {
		t.Fatal(err)
	}
	presetFiles.Store(vocabSize, [2][]byte{tj, cj})
	return tj, cj
}

func presetTokenizer(t testing.TB, vocabSize int) *Tokenizer {
	t.Helper()
	tj, cj := presetBytes(t, vocabSize)
	return mustParse(t, tj, cj)
}

func mustEncode(t testing.TB, tk *Tokenizer, s string) []int32 {
	t.Helper()
	ids, err := tk.Encode(s)
	if err != nil {
		t.Fatalf("Encode(%q): %v", s, err)
	}
	return ids
}

func mustEncodeSpecial(t testing.TB, tk *Tokenizer, s string) []int32 {
	t.Helper()
	ids, err := tk.EncodeSpecial(s)
	if err != nil {
		t.Fatalf("EncodeSpecial(%q): %v", s, err)
	}
	return ids
}

func mustDecode(t testing.TB, tk *Tokenizer, ids []int32) string {
	t.Helper()
	b, err := tk.Decode(ids)
	if err != nil {
		t.Fatalf("Decode(%v): %v", ids, err)
	}
	return string(b)
}

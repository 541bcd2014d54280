package tokenizer

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// PresetInfo tells the model package which IDs a preset tokenizer gave its
// control tokens.
type PresetInfo struct {
	// BOS is <|begin_of_text|>.
	BOS int32
	// EOS are the tokens that end generation: <|end_of_text|> and <|eot_id|>.
	EOS []int32
}

// presetChatTemplate is the chat template of the preset tokenizers: Llama 3
// turns with tools, tool calls and tool results in the Hermes format and
// reasoning in <think> blocks, so that the dev model demonstrates every
// documented feature; without tools or reasoning it renders as
// llama3Template does.
//
//go:embed preset_chat_template.jinja
var presetChatTemplate string

// presetSpecials are the special tokens of every preset, in ID order, right
// after the learned tokens.
var presetSpecials = [...]string{
	"<|begin_of_text|>",
	"<|end_of_text|>",
	"<|start_header_id|>",
	"<|end_header_id|>",
	"<|eot_id|>",
}

// Preset vocabulary bounds: the 256 byte tokens plus the specials at least;
// at most the size of the largest real vocabularies.
const (
	minPresetVocab = 256 + len(presetSpecials)
	maxPresetVocab = 1 << 18
)

// WritePreset writes tokenizer.json and tokenizer_config.json for a
// Llama 3 style byte-level BPE tokenizer of exactly vocabSize tokens into dir
// (created if missing): the 256 byte tokens (IDs 0-255), merges learned on
// the package's embedded corpus, then <|begin_of_text|>, <|end_of_text|>,
// <|start_header_id|>, <|end_header_id|>, <|eot_id|>, then
// <|reserved_special_token_N|> up to vocabSize when the corpus has no more
// merges to give. The same vocabSize always yields byte-identical files.
func WritePreset(dir string, vocabSize int) (PresetInfo, error) {
	tok, cfg, info, err := buildPreset(vocabSize)
	if err != nil {
		return PresetInfo{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return PresetInfo{}, fmt.Errorf("tokenizer: preset: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, TokenizerFile), tok); err != nil {
		return PresetInfo{}, err
	}
	if err := writeFileAtomic(filepath.Join(dir, TokenizerConfigFile), cfg); err != nil {
		return PresetInfo{}, err
	}
	return info, nil
}

func buildPreset(vocabSize int) (tokenizerJSON, configJSON []byte, info PresetInfo, err error) {
	if vocabSize < minPresetVocab || vocabSize > maxPresetVocab {
		return nil, nil, info, fmt.Errorf("tokenizer: preset vocabulary size %d out of range [%d, %d]",
			vocabSize, minPresetVocab, maxPresetVocab)
	}
	tr := train(corpus, vocabSize-len(presetSpecials))
	nLearned := len(tr.tokens)
	added := make([]string, 0, vocabSize-nLearned)
	added = append(added, presetSpecials[:]...)
	for i := 0; nLearned+len(added) < vocabSize; i++ {
		added = append(added, "<|reserved_special_token_"+strconv.Itoa(i)+"|>")
	}
	info = PresetInfo{
		BOS: int32(nLearned),
		EOS: []int32{int32(nLearned + 1), int32(nLearned + 4)},
	}
	return presetTokenizerJSON(tr, added), presetConfigJSON(), info, nil
}

func presetTokenizerJSON(tr trained, added []string) []byte {
	var b bytes.Buffer
	b.WriteString("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [")
	for i, content := range added {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "\n    {\"id\": %d, \"content\": ", len(tr.tokens)+i)
		writeJSONString(&b, content)
		b.WriteString(", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}")
	}
	b.WriteString("\n  ],\n  \"normalizer\": null,\n  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [")
	b.WriteString("{\"type\": \"Split\", \"pattern\": {\"Regex\": ")
	writeJSONString(&b, llama3Pattern)
	b.WriteString("}, \"behavior\": \"Isolated\", \"invert\": false}, ")
	b.WriteString("{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}]},\n")
	b.WriteString("  \"post_processor\": null,\n")
	b.WriteString("  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},\n")
	b.WriteString("  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n")
	b.WriteString("    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n")
	b.WriteString("    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n    \"ignore_merges\": true,\n    \"vocab\": {")
	for id, raw := range tr.tokens {
		if id > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n      ")
		writeJSONString(&b, encodeByteLevel(raw))
		fmt.Fprintf(&b, ": %d", id)
	}
	b.WriteString("\n    },\n    \"merges\": [")
	for i, m := range tr.merges {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n      ")
		writeJSONString(&b, encodeByteLevel(tr.tokens[m[0]])+" "+encodeByteLevel(tr.tokens[m[1]]))
	}
	b.WriteString("\n    ]\n  }\n}\n")
	return b.Bytes()
}

func presetConfigJSON() []byte {
	var b bytes.Buffer
	b.WriteString("{\n  \"bos_token\": ")
	writeJSONString(&b, presetSpecials[0])
	b.WriteString(",\n  \"eos_token\": ")
	writeJSONString(&b, presetSpecials[1])
	b.WriteString(",\n  \"chat_template\": ")
	writeJSONString(&b, presetChatTemplate)
	b.WriteString(",\n  \"clean_up_tokenization_spaces\": false,\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\"\n}\n")
	return b.Bytes()
}

// writeJSONString writes s as a JSON string, leaving non-ASCII text as UTF-8
// (Hugging Face writes its files the same way). s must be valid UTF-8.
func writeJSONString(b *bytes.Buffer, s string) {
	const hexDigits = "0123456789abcdef"
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hexDigits[r>>4])
			b.WriteByte(hexDigits[r&0xF])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}

// writeFileAtomic writes data to path through a temporary file and a rename,
// so a reader never sees a half-written file.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp, 0o644)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("tokenizer: writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("tokenizer: %w", err)
	}
	return nil
}

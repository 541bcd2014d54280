// Package tokenizer implements BPE tokenization compatible with Hugging Face
// tokenizer.json files — byte-level (GPT-2, Llama 3, Qwen2/2.5/3, DeepSeek
// V3) and SentencePiece-style (Llama 2, Mistral) — plus chat-template
// rendering and the training of small preset tokenizers.
//
// The gateway uses it to count prompt tokens exactly as the workers' model
// was trained (I1, I7), to apply the chat template and to turn streamed token
// IDs back into valid UTF-8. `warden model init` uses [WritePreset] to write a
// generated tokenizer next to generated weights.
//
// Compatibility: for the files it accepts, Encode/EncodeSpecial give the IDs
// Hugging Face tokenizers gives. TestConformance checks this against the
// Rust library itself (npm `tokenizers`) on the real Llama 3, Qwen3, Llama 2
// and DeepSeek V3 files over a generated corpus of 20,000 strings.
// Supported: model BPE (vocab, merges in both spellings, ignore_merges,
// byte_fallback, unk_token, fuse_unk); added_tokens with their options;
// normalizers NFC, NFD, NFKC, NFKD, Prepend, Replace (String pattern) and
// Sequence; pre_tokenizer ByteLevel or a Sequence of Split (Isolated) ending
// in ByteLevel, or, without ByteLevel, Metaspace or null; decoders ByteLevel,
// Metaspace, or a Sequence of Replace, ByteFallback, Fuse and Strip. Anything
// else is refused with ErrUnsupported naming the field. post_processor,
// truncation and padding are ignored: Encode never adds BOS/EOS (chat
// templates do), and decoding keeps the space SentencePiece-style encoders
// put before the first word (warden decodes continuations, where it is
// text) and does not apply clean_up_tokenization_spaces.
//
// Unicode: the split patterns classify characters (\p{L}, \p{N}, ...) by
// Unicode 16.0, as Hugging Face's regex engine does, from tables generated
// with `go generate` (ucdgen); Go's own unicode package is older.
//
// Safety: [Tokenizer.Encode] never turns text into special (control) tokens,
// whatever the text contains; only [Tokenizer.EncodeSpecial] and
// [Tokenizer.EncodeChat], where the chat template itself wrote them, do.
// Request text therefore cannot inject control tokens such as <|eot_id|>,
// even after the template transformed it. [Parse] treats its input as
// untrusted. The chat template itself is trusted configuration, like the
// weights: the Jinja engine bounds neither loops over range() nor macro
// recursion, so templates must come from the operator's model directory (or
// an authenticated worker), never from clients.
//
// A *Tokenizer is immutable after [Parse] and safe for concurrent use.
package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Sentinel errors; callers map them with errors.Is.
var (
	// ErrInvalidUTF8 reports input text that is not valid UTF-8. The wrapping
	// error names the byte offset of the first invalid byte.
	ErrInvalidUTF8 = errors.New("tokenizer: invalid UTF-8")
	// ErrUnknownToken reports a token ID outside the vocabulary.
	ErrUnknownToken = errors.New("tokenizer: unknown token id")
	// ErrUnsupported reports a tokenizer.json feature this package does not
	// implement; the wrapping error names the field.
	ErrUnsupported = errors.New("tokenizer: unsupported")
	// ErrMalformed reports tokenizer files that are not well-formed.
	ErrMalformed = errors.New("tokenizer: malformed")
	// ErrChatTemplate reports a chat template that failed to compile or
	// render (including the template's own raise_exception).
	ErrChatTemplate = errors.New("tokenizer: chat template")
	// ErrInvalidMessage reports a chat message the tokenizer refuses, such as
	// a role that is not a plain identifier.
	ErrInvalidMessage = errors.New("tokenizer: invalid chat message")
)

// File names inside a model directory.
const (
	TokenizerFile       = "tokenizer.json"
	TokenizerConfigFile = "tokenizer_config.json"
	// ChatTemplateFile is the stand-alone template newer Hugging Face
	// releases write instead of tokenizer_config.json's chat_template.
	ChatTemplateFile = "chat_template.jinja"
)

// Size limits for untrusted input.
const (
	maxTokenizerFileBytes = 256 << 20
	maxConfigFileBytes    = 16 << 20
	maxTemplateBytes      = 1 << 20
	maxVocabEntries       = 1 << 22
	maxTokenBytes         = 1 << 16
	maxPatternBytes       = 16 << 10
)

// Token kinds, per id.
const (
	kindNone    uint8 = iota // no token has this id
	kindModel                // a model (BPE) vocabulary token
	kindAdded                // an added, non-special token
	kindSpecial              // an added special (control) token
)

// Tokenizer is a loaded byte-level BPE tokenizer. It is immutable and safe for
// concurrent use.
type Tokenizer struct {
	pieces []string // id → raw bytes of the token (empty: no such id)
	kinds  []uint8  // id → kind*

	vocab        map[string]int32 // model token string (byte-level alphabet) → id
	added        map[string]int32 // added token content → id
	merges       map[uint64]merge // (left id, right id) → merge
	byteID       [256]int32       // id of the one-byte token for each byte, or -1
	ignoreMerges bool

	// byteLevel: vocabulary entries spell bytes in the byte-level alphabet
	// (GPT-2, Llama 3, Qwen). Otherwise they are text (SentencePiece-style
	// BPE: Llama 2, Mistral), where characters outside the vocabulary fall
	// back to <0xXX> tokens (byteFallback) or to the unknown token.
	byteLevel    bool
	byteFallback bool
	unk          int32
	hasUnk       bool
	fuseUnk      bool

	norm    normalizer // nil: none
	pre     *preTokenizer
	special *addedMatcher // all added tokens: EncodeSpecial, template text
	plain   *addedMatcher // special ones passed over: Encode, user text
	cache   *bpeCache

	bosToken, eosToken string
	bos                int32
	hasBOS             bool
	eos                []int32

	chat    *chatTemplate
	chatSrc string

	sha string
}

// Option adjusts [Parse].
type Option func(*options)

type options struct {
	chatTemplate    string
	hasChatTemplate bool
}

// WithChatTemplate supplies a chat template from outside
// tokenizer_config.json (for example the contents of chat_template.jinja). It
// is used only when tokenizer_config.json has no chat_template of its own,
// matching Hugging Face's precedence.
func WithChatTemplate(template string) Option {
	return func(o *options) { o.chatTemplate, o.hasChatTemplate = template, true }
}

// Load reads tokenizer.json, and tokenizer_config.json and
// chat_template.jinja where present, from dir.
func Load(dir string) (*Tokenizer, error) {
	tj, err := readLimited(filepath.Join(dir, TokenizerFile), maxTokenizerFileBytes)
	if err != nil {
		return nil, err
	}
	cfg, err := readLimited(filepath.Join(dir, TokenizerConfigFile), maxConfigFileBytes)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	var opts []Option
	tmpl, err := readLimited(filepath.Join(dir, ChatTemplateFile), maxTemplateBytes)
	switch {
	case err == nil:
		opts = append(opts, WithChatTemplate(string(tmpl)))
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	t, err := Parse(tj, cfg, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return t, nil
}

func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrMalformed, path, limit)
	}
	return b, nil
}

// Parse builds a tokenizer from the bytes of tokenizer.json and, optionally
// (nil or empty), tokenizer_config.json. The bytes may come from the network:
// Parse validates everything, bounds its work by the input size and never
// panics.
func Parse(tokenizerJSON, tokenizerConfigJSON []byte, opts ...Option) (*Tokenizer, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	t, err := parseTokenizerJSON(tokenizerJSON)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(tokenizerJSON)
	t.sha = hex.EncodeToString(sum[:])
	cfg, err := parseConfig(tokenizerConfigJSON)
	if err != nil {
		return nil, err
	}
	if cfg.chatTemplate == "" && o.hasChatTemplate {
		cfg.chatTemplate = o.chatTemplate
	}
	t.resolveSpecialTokens(cfg)
	if err := t.setChatTemplate(cfg.chatTemplate); err != nil {
		return nil, err
	}
	t.cache = newBPECache()
	return t, nil
}

func (t *Tokenizer) resolveSpecialTokens(cfg config) {
	// Fallbacks, in order of preference, when tokenizer_config.json does not
	// name the token. The EOS list also extends a configured eos_token: chat
	// models end a turn with a token other than the base model's end of
	// text, and the gateway must stop at either.
	knownBOS := [...]string{"<|begin_of_text|>", "<s>", "<|startoftext|>"}
	knownEOS := [...]string{"<|end_of_text|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>", "<|im_end|>", "</s>"}

	if cfg.bosToken != "" {
		t.bosToken = cfg.bosToken
		t.bos, t.hasBOS = t.TokenID(cfg.bosToken)
	} else {
		for _, s := range knownBOS {
			if id, ok := t.added[s]; ok && t.kinds[id] == kindSpecial {
				t.bosToken, t.bos, t.hasBOS = s, id, true
				break
			}
		}
	}
	seen := map[int32]bool{}
	t.eosToken = cfg.eosToken
	if id, ok := t.TokenID(cfg.eosToken); ok && cfg.eosToken != "" {
		t.eos = append(t.eos, id)
		seen[id] = true
	}
	for _, s := range knownEOS {
		id, ok := t.added[s]
		if !ok || t.kinds[id] != kindSpecial || seen[id] {
			continue
		}
		if t.eosToken == "" {
			t.eosToken = s
		}
		t.eos = append(t.eos, id)
		seen[id] = true
	}
}

// VocabSize is one more than the largest token ID (model and added tokens).
func (t *Tokenizer) VocabSize() int { return len(t.pieces) }

// TokenID returns the ID of a token given as it is spelled in tokenizer.json:
// an added token's content (such as "<|eot_id|>") or a model vocabulary entry
// in the byte-level alphabet (such as "Ġworld").
func (t *Tokenizer) TokenID(s string) (int32, bool) {
	if id, ok := t.added[s]; ok {
		return id, true
	}
	id, ok := t.vocab[s]
	return id, ok
}

// IsSpecial reports whether id is an added special (control) token.
func (t *Tokenizer) IsSpecial(id int32) bool {
	return id >= 0 && int(id) < len(t.kinds) && t.kinds[id] == kindSpecial
}

// BOS returns the beginning-of-sequence token: tokenizer_config.json's
// bos_token, else the first of <|begin_of_text|>, <s>, <|startoftext|> that
// is a special token. ok is false when there is none, or when bos_token
// names no token.
func (t *Tokenizer) BOS() (id int32, ok bool) { return t.bos, t.hasBOS }

// EOS returns the tokens that end generation: tokenizer_config.json's
// eos_token first, then whichever of <|end_of_text|>, <|eot_id|>, <|eom_id|>,
// <|endoftext|>, <|im_end|>, </s> are special tokens. The slice is a copy.
func (t *Tokenizer) EOS() []int32 { return append([]int32(nil), t.eos...) }

// SHA256 is the hex SHA-256 of the tokenizer.json bytes; the gateway compares
// it across workers serving one model.
func (t *Tokenizer) SHA256() string { return t.sha }

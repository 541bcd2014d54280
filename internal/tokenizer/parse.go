package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// fileJSON is the subset of Hugging Face's tokenizer.json this package reads.
// truncation, padding and post_processor are ignored: they do not change how
// text maps to tokens (Encode never adds BOS/EOS; chat templates do).
type fileJSON struct {
	AddedTokens  []addedTokenJSON `json:"added_tokens"`
	Normalizer   json.RawMessage  `json:"normalizer"`
	PreTokenizer json.RawMessage  `json:"pre_tokenizer"`
	Decoder      json.RawMessage  `json:"decoder"`
	Model        *modelJSON       `json:"model"`
}

type addedTokenJSON struct {
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string           `json:"type"`
	Dropout                 *float64         `json:"dropout"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	ByteFallback            bool             `json:"byte_fallback"`
	UnkToken                *string          `json:"unk_token"`
	FuseUnk                 bool             `json:"fuse_unk"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	Vocab                   map[string]int64 `json:"vocab"`
	Merges                  []mergeJSON      `json:"merges"`
}

// mergeJSON accepts both spellings of a merge rule: "a b" and ["a", "b"].
type mergeJSON [2]string

func (m *mergeJSON) UnmarshalJSON(b []byte) error {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		left, right, ok := strings.Cut(s, " ")
		if !ok || strings.Contains(right, " ") {
			return fmt.Errorf("merge %q is not two tokens separated by one space", s)
		}
		*m = mergeJSON{left, right}
		return nil
	}
	var pair []string
	if err := json.Unmarshal(b, &pair); err != nil {
		return err
	}
	if len(pair) != 2 {
		return fmt.Errorf("merge has %d parts, want 2", len(pair))
	}
	*m = mergeJSON{pair[0], pair[1]}
	return nil
}

type preTokenizerJSON struct {
	Type           string            `json:"type"`
	AddPrefixSpace *bool             `json:"add_prefix_space"`
	Replacement    string            `json:"replacement"`
	PrependScheme  string            `json:"prepend_scheme"`
	Split          *bool             `json:"split"`
	UseRegex       *bool             `json:"use_regex"`
	Pattern        *patternJSON      `json:"pattern"`
	Behavior       string            `json:"behavior"`
	Invert         bool              `json:"invert"`
	PreTokenizers  []json.RawMessage `json:"pretokenizers"`
}

type patternJSON struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}

func unsupported(field, format string, args ...any) error {
	return fmt.Errorf("%w %s %s", ErrUnsupported, field, fmt.Sprintf(format, args...))
}

func malformed(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrMalformed, field, fmt.Sprintf(format, args...))
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// typeOf returns the "type" member of a JSON object.
func typeOf(raw json.RawMessage) (string, error) {
	var v struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", err
	}
	return v.Type, nil
}

func parseTokenizerJSON(data []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%w: tokenizer.json: %w", ErrMalformed, err)
	}
	if f.Model == nil {
		return nil, malformed("model", "missing")
	}
	m := f.Model
	switch {
	case m.Type == "BPE", m.Type == "" && m.Merges != nil:
	default:
		return nil, unsupported("model type", "%q", m.Type)
	}
	switch {
	case m.Dropout != nil && *m.Dropout != 0:
		return nil, unsupported("model.dropout", "%v", *m.Dropout)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return nil, unsupported("model.continuing_subword_prefix", "%q", *m.ContinuingSubwordPrefix)
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return nil, unsupported("model.end_of_word_suffix", "%q", *m.EndOfWordSuffix)
	}
	norm, err := parseNormalizer("normalizer", f.Normalizer, 0)
	if err != nil {
		return nil, err
	}
	pre, byteLevel, err := parsePreTokenizer(f.PreTokenizer)
	if err != nil {
		return nil, err
	}
	if byteLevel && m.ByteFallback {
		return nil, unsupported("model.byte_fallback", "true with a ByteLevel pre-tokenizer")
	}
	pieceOf, err := parseDecoder(f.Decoder, byteLevel)
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{pre: pre, norm: norm, ignoreMerges: m.IgnoreMerges,
		byteLevel: byteLevel, byteFallback: m.ByteFallback, fuseUnk: m.FuseUnk}
	if err := t.buildVocab(m.Vocab, f.AddedTokens, pieceOf); err != nil {
		return nil, err
	}
	if m.UnkToken != nil && !byteLevel {
		t.unk, t.hasUnk = t.vocab[*m.UnkToken]
		if !t.hasUnk {
			return nil, malformed("model.unk_token", "%q is not in the vocabulary", *m.UnkToken)
		}
	}
	if err := t.buildMerges(m.Merges); err != nil {
		return nil, err
	}
	return t, nil
}

// parsePreTokenizer reads the pre-tokenizer. byteLevel reports a ByteLevel
// one (at the end of a Sequence, or alone): the model then works on bytes.
// Otherwise the model is SentencePiece-style, on text, and the
// pre-tokenizer is null or Metaspace.
func parsePreTokenizer(raw json.RawMessage) (pre *preTokenizer, byteLevel bool, err error) {
	if isNull(raw) {
		return &preTokenizer{}, false, nil
	}
	var p preTokenizerJSON
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, false, malformed("pre_tokenizer", "%v", err)
	}
	if p.Type == "Metaspace" {
		m, err := parseMetaspace(p)
		if err != nil {
			return nil, false, err
		}
		return &preTokenizer{meta: m}, false, nil
	}
	items := []preTokenizerJSON{p}
	if p.Type == "Sequence" {
		items = items[:0]
		for i, r := range p.PreTokenizers {
			var q preTokenizerJSON
			if err := json.Unmarshal(r, &q); err != nil {
				return nil, false, malformed(fmt.Sprintf("pre_tokenizer.pretokenizers[%d]", i), "%v", err)
			}
			items = append(items, q)
		}
	}
	var pt preTokenizer
	for i, q := range items {
		field := "pre_tokenizer"
		if p.Type == "Sequence" {
			field = fmt.Sprintf("pre_tokenizer.pretokenizers[%d]", i)
		}
		last := i == len(items)-1
		switch q.Type {
		case "Split":
			s, err := parseSplit(field, q)
			if err != nil {
				return nil, false, err
			}
			pt.splitters = append(pt.splitters, s)
		case "ByteLevel":
			if !last {
				return nil, false, unsupported(field, "ByteLevel before the end of the sequence")
			}
			if q.AddPrefixSpace != nil && *q.AddPrefixSpace {
				pt.splitters = append(pt.splitters, prefixSpace{})
			}
			if q.UseRegex == nil || *q.UseRegex {
				pt.splitters = append(pt.splitters, scanSplitter(gpt2Next))
			}
		default:
			return nil, false, unsupported(field+" type", "%q", q.Type)
		}
		if last && q.Type != "ByteLevel" {
			return nil, false, unsupported(field, "a Split sequence must end with ByteLevel")
		}
	}
	if len(items) == 0 {
		return nil, false, unsupported("pre_tokenizer", "empty Sequence")
	}
	return &pt, true, nil
}

// parseMetaspace reads a Metaspace pre-tokenizer, in its current form
// (prepend_scheme) or the older one (add_prefix_space).
func parseMetaspace(p preTokenizerJSON) (*metaspace, error) {
	if utf8.RuneCountInString(p.Replacement) != 1 {
		return nil, malformed("pre_tokenizer.replacement", "%q is not one character", p.Replacement)
	}
	m := &metaspace{replacement: p.Replacement, prepend: p.PrependScheme, split: p.Split == nil || *p.Split}
	switch m.prepend {
	case prependAlways, prependFirst, prependNever:
	case "":
		m.prepend = prependAlways
		if p.AddPrefixSpace != nil && !*p.AddPrefixSpace {
			m.prepend = prependNever
		}
	default:
		return nil, unsupported("pre_tokenizer.prepend_scheme", "%q", m.prepend)
	}
	return m, nil
}

func parseSplit(field string, q preTokenizerJSON) (splitter, error) {
	if q.Behavior != "Isolated" {
		return nil, unsupported(field+".behavior", "%q", q.Behavior)
	}
	if q.Invert {
		return nil, unsupported(field+".invert", "true")
	}
	if q.Pattern == nil || q.Pattern.Regex == nil {
		return nil, unsupported(field+".pattern", "(only Regex patterns are supported)")
	}
	pat := *q.Pattern.Regex
	if len(pat) > maxPatternBytes {
		return nil, malformed(field+".pattern", "%d bytes, limit %d", len(pat), maxPatternBytes)
	}
	switch pat {
	case gpt2Pattern:
		return scanSplitter(gpt2Next), nil
	case llama3Pattern:
		return scanSplitter(llama3Next), nil
	case qwen2Pattern:
		return scanSplitter(qwen2Next), nil
	}
	s, err := newRegexSplitter(pat)
	if err != nil {
		return nil, malformed(field+".pattern", "%v", err)
	}
	return s, nil
}

// buildVocab fills the vocabulary; pieceOf gives the bytes a token stands
// for (the decoder's view of it).
func (t *Tokenizer) buildVocab(vocab map[string]int64, added []addedTokenJSON, pieceOf func(string) string) error {
	if len(vocab) == 0 {
		return malformed("model.vocab", "empty")
	}
	if len(vocab)+len(added) > maxVocabEntries {
		return malformed("model.vocab", "%d entries, limit %d", len(vocab)+len(added), maxVocabEntries)
	}
	// Real vocabularies are dense; a sparse one would only be a way to make
	// us allocate, so cap the largest ID by the number of entries.
	limit := int64(2*len(vocab) + 1024)
	maxID := int64(-1)
	for tok, id := range vocab {
		if id < 0 || id >= limit {
			return malformed(fmt.Sprintf("model.vocab[%q]", tok), "id %d out of range", id)
		}
		if tok == "" || len(tok) > maxTokenBytes {
			return malformed("model.vocab", "bad token %q", tok)
		}
		maxID = max(maxID, id)
	}
	toks, err := assignAddedIDs(vocab, added)
	if err != nil {
		return err
	}
	for _, a := range toks {
		maxID = max(maxID, int64(a.id))
	}
	n := int(maxID) + 1
	t.pieces = make([]string, n)
	t.kinds = make([]uint8, n)
	t.vocab = make(map[string]int32, len(vocab))
	for tok, id64 := range vocab {
		id := int32(id64)
		if t.kinds[id] != kindNone {
			return malformed("model.vocab", "id %d used by two tokens", id)
		}
		t.vocab[tok] = id
		t.kinds[id] = kindModel
		t.pieces[id] = pieceOf(tok)
	}
	for b := range 256 {
		if !t.byteLevel {
			// Byte fallback tokens, where the vocabulary has them.
			t.byteID[b] = -1
			if id, ok := t.vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
				t.byteID[b] = id
			}
			continue
		}
		id, ok := t.vocab[string(byteToRune(byte(b)))]
		if !ok {
			return malformed("model.vocab", "no byte-level token for byte 0x%02x", b)
		}
		t.byteID[b] = id
	}
	t.added = make(map[string]int32, len(toks))
	all := make([]addedToken, 0, len(toks))
	for _, a := range toks {
		if t.kinds[a.id] == kindModel && t.vocab[a.content] != a.id {
			return malformed("added_tokens", "%q would get id %d, which is the vocabulary token %q",
				a.content, a.id, t.pieces[a.id])
		}
		t.added[a.content] = a.id
		// Hugging Face runs added tokens through the decoder too (so with
		// ByteLevel, content made only of byte-level runes decodes to
		// those bytes).
		t.pieces[a.id] = pieceOf(a.content)
		t.kinds[a.id] = kindAdded
		if a.special {
			t.kinds[a.id] = kindSpecial
		}
		all = append(all, a)
	}
	t.special = newAddedMatcher(all, t.norm)
	t.plain = t.special.plainView()
	return nil
}

// assignAddedIDs gives added tokens their IDs the way Hugging Face does when
// it loads tokenizer.json (it only checks the "id" written in the file, and
// warns on a mismatch): a token whose content is in the model vocabulary
// takes that ID; any other takes the model vocabulary's entry count or, once
// added IDs reach it, the largest added ID plus one. An exact repeat of an
// entry is ignored; a repeat with different options is refused.
func assignAddedIDs(vocab map[string]int64, added []addedTokenJSON) ([]addedToken, error) {
	var out []addedToken
	byContent := map[string]int{}
	maxAdded := int64(-1)
	for i, a := range added {
		field := fmt.Sprintf("added_tokens[%d]", i)
		if a.Content == "" {
			continue
		}
		if len(a.Content) > maxTokenBytes {
			return nil, malformed(field+".content", "%d bytes, limit %d", len(a.Content), maxTokenBytes)
		}
		tok := addedToken{content: a.Content, singleWord: a.SingleWord,
			lstrip: a.LStrip, rstrip: a.RStrip, normalized: a.Normalized, special: a.Special}
		if j, dup := byContent[a.Content]; dup {
			tok.id = out[j].id
			if tok != out[j] {
				return nil, malformed(field, "%q repeats an earlier entry with different options", a.Content)
			}
			continue
		}
		id, ok := vocab[a.Content]
		if !ok {
			id = int64(len(vocab))
			if maxAdded >= id {
				id = maxAdded + 1
			}
		}
		maxAdded = max(maxAdded, id)
		tok.id = int32(id)
		byContent[a.Content] = len(out)
		out = append(out, tok)
	}
	return out, nil
}

func (t *Tokenizer) buildMerges(merges []mergeJSON) error {
	t.merges = make(map[uint64]merge, len(merges))
	for i, mg := range merges {
		a, okA := t.vocab[mg[0]]
		b, okB := t.vocab[mg[1]]
		c, okC := t.vocab[mg[0]+mg[1]]
		if !okA || !okB || !okC {
			return malformed(fmt.Sprintf("model.merges[%d]", i), "%q + %q: token not in the vocabulary", mg[0], mg[1])
		}
		// A repeated pair keeps its last rank, as Hugging Face's map does.
		t.merges[pairKey(a, b)] = merge{rank: int32(i), id: c}
	}
	return nil
}

// config is what this package reads from tokenizer_config.json.
type config struct {
	bosToken, eosToken string
	chatTemplate       string
}

func parseConfig(data []byte) (config, error) {
	var c config
	if len(bytes.TrimSpace(data)) == 0 {
		return c, nil
	}
	var raw struct {
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return c, fmt.Errorf("%w: tokenizer_config.json: %w", ErrMalformed, err)
	}
	var err error
	if c.bosToken, err = parseTokenField("tokenizer_config.json: bos_token", raw.BOS); err != nil {
		return c, err
	}
	if c.eosToken, err = parseTokenField("tokenizer_config.json: eos_token", raw.EOS); err != nil {
		return c, err
	}
	if c.chatTemplate, err = parseTemplateField(raw.ChatTemplate); err != nil {
		return c, err
	}
	return c, nil
}

// parseTokenField reads a special token given as a string or as an
// AddedToken object {"content": ...}.
func parseTokenField(field string, raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", malformed(field, "want a string or an object with content")
	}
	return *obj.Content, nil
}

// parseTemplateField reads chat_template given as a string or as a list of
// {name, template}, of which the one named "default" is used.
func parseTemplateField(raw json.RawMessage) (string, error) {
	const field = "tokenizer_config.json: chat_template"
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", malformed(field, "want a string or a list of {name, template}")
	}
	for _, e := range list {
		if e.Name == "default" {
			return e.Template, nil
		}
	}
	return "", malformed(field, "no template named \"default\"")
}

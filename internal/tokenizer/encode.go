package tokenizer

import (
	"slices"
	"strings"
)

// Encode tokenizes plain text. Special-token strings in text (such as
// "<|eot_id|>") are NOT recognised: they are tokenized as the characters they
// are made of, so user content cannot inject control tokens. Added tokens
// that are not special are recognised, which matches Hugging Face's encoding
// with split_special_tokens=True. No BOS/EOS is added. Invalid UTF-8 returns
// ErrInvalidUTF8.
func (t *Tokenizer) Encode(text string) ([]int32, error) {
	return t.encodeParts([]part{{text: text, m: t.plain}})
}

// EncodeSpecial tokenizes text in which added tokens, special ones included,
// are recognised — as Hugging Face's Tokenizer.encode does. Use it only for
// trusted text (templates), never for user content. No BOS/EOS is added.
func (t *Tokenizer) EncodeSpecial(text string) ([]int32, error) {
	return t.encodeParts([]part{{text: text, m: t.special}})
}

// part is a stretch of text and the added tokens that may be recognised in it.
type part struct {
	text string
	m    *addedMatcher
}

// encodeParts tokenizes the concatenation of parts. Added tokens with
// normalized=false are looked for only inside each part, with that part's
// matcher. The plain text between them is normalized, searched for added
// tokens with normalized=true and pre-tokenized as one string even where it
// spans parts, so that cutting text into parts changes nothing but which
// added tokens may match. A special token with normalized=true is matched
// there only inside text of a part that allows special tokens (or, when a
// normalizer may move text, only if every part of the stretch allows them).
func (t *Tokenizer) encodeParts(parts []part) ([]int32, error) {
	for _, p := range parts {
		if err := validUTF8(p.text); err != nil {
			return nil, err
		}
	}
	size := 0
	for _, p := range parts {
		size += len(p.text)
	}
	var (
		ids     = make([]int32, 0, size/3+1) // typical text: 3-4 bytes per token
		pending []string                     // plain text not yet tokenized
		trusted []bool                       // per pending text: special tokens allowed
		atStart = true                       // nothing is before the next text
	)
	pretokenize := func(s string) error {
		first := atStart
		atStart = false
		return t.pre.each(s, first, func(piece string) error {
			ids = t.bpe(ids, piece)
			return nil
		})
	}
	normToken := func(id int32) error {
		atStart = false
		ids = append(ids, id)
		return nil
	}
	flush := func() error {
		var text string
		switch len(pending) {
		case 0:
			return nil
		case 1:
			text = pending[0]
		default:
			text = strings.Join(pending, "")
		}
		var skip skipFunc
		switch {
		case t.norm == nil:
			skip = skipWithin(pending, trusted)
		case slices.Contains(trusted, false):
			text, skip = t.norm.normalize(text), skipAll
		default:
			text, skip = t.norm.normalize(text), skipNone
		}
		pending, trusted = pending[:0], trusted[:0]
		return t.special.splitNormalized(text, skip, pretokenize, normToken)
	}
	for _, p := range parts {
		if p.text == "" {
			continue
		}
		text := func(s string) error {
			pending = append(pending, s)
			trusted = append(trusted, !p.m.skipSpecial)
			return nil
		}
		token := func(id int32) error {
			if err := flush(); err != nil {
				return err
			}
			atStart = false
			ids = append(ids, id)
			return nil
		}
		if err := p.m.split(p.text, text, token); err != nil {
			return nil, err
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return ids, nil
}

// skipWithin returns the skipFunc for the concatenation of texts: a special
// token is matched only where it lies inside one text that is trusted.
func skipWithin(texts []string, trusted []bool) skipFunc {
	if !slices.Contains(trusted, false) {
		return skipNone
	}
	if !slices.Contains(trusted, true) {
		return skipAll
	}
	return func(start, end int) bool {
		off := 0
		for i, s := range texts {
			if start < off+len(s) {
				return !trusted[i] || end > off+len(s)
			}
			off += len(s)
		}
		return true
	}
}

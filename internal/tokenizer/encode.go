package tokenizer

import "strings"

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

// encodeParts tokenizes the concatenation of parts. Added tokens are looked
// for only inside each part, with that part's matcher; the plain text between
// added tokens is pre-tokenized as one string even where it spans parts, so
// that cutting text into parts changes nothing but which added tokens may
// match.
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
	)
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
		pending = pending[:0]
		return t.pre.each(text, func(piece string) error {
			ids = t.bpe(ids, piece)
			return nil
		})
	}
	text := func(s string) error {
		pending = append(pending, s)
		return nil
	}
	token := func(id int32) error {
		if err := flush(); err != nil {
			return err
		}
		ids = append(ids, id)
		return nil
	}
	for _, p := range parts {
		if p.text == "" {
			continue
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

package tokenizer

import (
	"fmt"
	"unicode/utf8"
)

// TokenBytes returns the bytes token id stands for: the raw bytes of a
// vocabulary token, or an added token's content (passed through the
// byte-level decoder, as Hugging Face does, which changes only unusual
// content made of byte-level runes). A token may hold part of a UTF-8
// sequence.
func (t *Tokenizer) TokenBytes(id int32) ([]byte, error) {
	p, err := t.piece(id)
	if err != nil {
		return nil, err
	}
	return []byte(p), nil
}

func (t *Tokenizer) piece(id int32) (string, error) {
	if id < 0 || int(id) >= len(t.pieces) || t.kinds[id] == kindNone {
		return "", fmt.Errorf("%w: %d", ErrUnknownToken, id)
	}
	return t.pieces[id], nil
}

// Decode returns the bytes of ids, concatenated. The result may be invalid or
// incomplete UTF-8 (a multi-byte character split across a later token); use a
// StreamDecoder for text. Special tokens decode to their content.
func (t *Tokenizer) Decode(ids []int32) ([]byte, error) {
	var out []byte
	for i, id := range ids {
		p, err := t.piece(id)
		if err != nil {
			return nil, fmt.Errorf("position %d: %w", i, err)
		}
		out = append(out, p...)
	}
	return out, nil
}

// StreamDecoder turns a stream of token IDs into valid UTF-8 text, holding
// back the bytes of a character whose remaining bytes are still to come. It
// is not safe for concurrent use; use one per stream.
type StreamDecoder struct {
	t       *Tokenizer
	pending []byte // an incomplete UTF-8 sequence (at most 3 bytes)
}

// NewStreamDecoder returns a decoder for token IDs of t.
func NewStreamDecoder(t *Tokenizer) *StreamDecoder {
	return &StreamDecoder{t: t}
}

// Add appends one token and returns the text that became complete: valid
// UTF-8, possibly empty. Bytes that can never become valid UTF-8 are replaced
// with U+FFFD (one per maximal invalid subsequence). An unknown id returns
// ErrUnknownToken and leaves the decoder unchanged.
func (d *StreamDecoder) Add(id int32) (string, error) {
	p, err := d.t.piece(id)
	if err != nil {
		return "", err
	}
	buf := append(d.pending, p...)
	out := make([]byte, 0, len(buf))
	i := 0
	for i < len(buf) {
		r, n := utf8.DecodeRune(buf[i:])
		if r != utf8.RuneError || n > 1 {
			out = append(out, buf[i:i+n]...)
			i += n
			continue
		}
		if !utf8.FullRune(buf[i:]) {
			break // the start of a character; keep it for the next token
		}
		out = utf8.AppendRune(out, utf8.RuneError)
		i += invalidLen(buf[i:])
	}
	d.pending = append(d.pending[:0:0], buf[i:]...)
	return string(out), nil
}

// Flush returns what is held back, as U+FFFD since the sequence never
// completed, and resets the decoder.
func (d *StreamDecoder) Flush() string {
	if len(d.pending) == 0 {
		return ""
	}
	d.pending = nil
	return string(utf8.RuneError)
}

// invalidLen returns the length of the maximal invalid subsequence at the
// start of b, which does not start a valid character: the longest prefix
// (at most 3 bytes) that could begin one, or 1.
func invalidLen(b []byte) int {
	for k := min(3, len(b)); k > 1; k-- {
		if !utf8.FullRune(b[:k]) {
			return k
		}
	}
	return 1
}

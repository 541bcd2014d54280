package tokenizer

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
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

type decoderJSON struct {
	Type     string            `json:"type"`
	Pattern  *patternJSON      `json:"pattern"`
	Content  *string           `json:"content"`
	Start    int               `json:"start"`
	Stop     int               `json:"stop"`
	Decoders []json.RawMessage `json:"decoders"`
	// Metaspace
	Replacement string `json:"replacement"`
}

// parseDecoder reads tokenizer.json's decoder and returns what one token
// decodes to. A byte-level model needs the ByteLevel decoder. A
// SentencePiece-style one takes Metaspace, or a Sequence of Replace
// (String pattern), ByteFallback, Fuse and Strip of leading spaces — the
// decoders Llama 2 and Mistral files use. Strip and Metaspace remove the
// space the encoder put before the first word; warden decodes
// continuations of a prompt, where that space is text, so it keeps it.
func parseDecoder(raw json.RawMessage, byteLevel bool) (func(string) string, error) {
	if isNull(raw) {
		return nil, unsupported("decoder", "null")
	}
	var d decoderJSON
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, malformed("decoder", "%v", err)
	}
	if byteLevel {
		if d.Type != "ByteLevel" {
			return nil, unsupported("decoder type", "%q (a ByteLevel pre-tokenizer needs the ByteLevel decoder)", d.Type)
		}
		return decodeByteLevel, nil
	}
	var (
		replacer     *strings.Replacer
		byteFallback bool
	)
	switch d.Type {
	case "Metaspace":
		if utf8.RuneCountInString(d.Replacement) != 1 {
			return nil, malformed("decoder.replacement", "%q is not one character", d.Replacement)
		}
		replacer = strings.NewReplacer(d.Replacement, " ")
	case "Sequence":
		var pairs []string
		for i, r := range d.Decoders {
			field := fmt.Sprintf("decoder.decoders[%d]", i)
			var e decoderJSON
			if err := json.Unmarshal(r, &e); err != nil {
				return nil, malformed(field, "%v", err)
			}
			switch e.Type {
			case "Replace":
				if e.Pattern == nil || e.Pattern.String == nil || *e.Pattern.String == "" || e.Content == nil {
					return nil, unsupported(field, "Replace without a non-empty String pattern and a content")
				}
				if len(*e.Content) > maxNormalizerStringBytes {
					return nil, malformed(field+".content", "longer than %d bytes", maxNormalizerStringBytes)
				}
				if byteFallback || len(pairs) > 0 {
					return nil, unsupported(field, "Replace after ByteFallback or another Replace")
				}
				pairs = append(pairs, *e.Pattern.String, *e.Content)
			case "ByteFallback":
				byteFallback = true
			case "Fuse":
			case "Strip":
				if e.Content == nil || *e.Content != " " || e.Stop != 0 {
					return nil, unsupported(field, "Strip other than of leading spaces")
				}
			default:
				return nil, unsupported(field+" type", "%q", e.Type)
			}
		}
		replacer = strings.NewReplacer(pairs...)
	default:
		return nil, unsupported("decoder type", "%q", d.Type)
	}
	return func(tok string) string {
		if byteFallback {
			if b, ok := byteFallbackToken(tok); ok {
				return string([]byte{b})
			}
		}
		return replacer.Replace(tok)
	}, nil
}

// byteFallbackToken parses a byte-fallback token, <0xXX>.
func byteFallbackToken(tok string) (byte, bool) {
	if len(tok) != 6 || !strings.HasPrefix(tok, "<0x") || tok[5] != '>' {
		return 0, false
	}
	b, err := strconv.ParseUint(tok[3:5], 16, 8)
	return byte(b), err == nil
}

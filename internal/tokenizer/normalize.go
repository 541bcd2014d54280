package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// normalizer is tokenizer.json's normalizer: it rewrites the text between
// added tokens before pre-tokenization.
type normalizer interface {
	normalize(s string) string
}

var (
	_ normalizer = unicodeForm(0)
	_ normalizer = prependNormalizer("")
	_ normalizer = replaceNormalizer{}
	_ normalizer = sequenceNormalizer(nil)
)

// unicodeForm is NFC, NFD, NFKC or NFKD.
type unicodeForm norm.Form

func (f unicodeForm) normalize(s string) string { return norm.Form(f).String(s) }

// prependNormalizer puts its string in front of non-empty text.
type prependNormalizer string

func (p prependNormalizer) normalize(s string) string {
	if s == "" {
		return s
	}
	return string(p) + s
}

// replaceNormalizer replaces every occurrence of a string, left to right.
type replaceNormalizer struct{ old, new string }

func (r replaceNormalizer) normalize(s string) string { return strings.ReplaceAll(s, r.old, r.new) }

// sequenceNormalizer applies its normalizers in order.
type sequenceNormalizer []normalizer

func (q sequenceNormalizer) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}

type normalizerJSON struct {
	Type        string            `json:"type"`
	Prepend     *string           `json:"prepend"`
	Pattern     *patternJSON      `json:"pattern"`
	Content     *string           `json:"content"`
	Normalizers []json.RawMessage `json:"normalizers"`
}

// Bounds on an untrusted file's normalizer: nested Sequences, and the
// strings Prepend and Replace insert (real files insert one character; a
// long one would multiply the size of every text).
const (
	maxNormalizerDepth       = 4
	maxNormalizerStringBytes = 16
)

// parseNormalizer reads tokenizer.json's normalizer; nil means none.
func parseNormalizer(field string, raw json.RawMessage, depth int) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var n normalizerJSON
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil, malformed(field, "%v", err)
	}
	switch n.Type {
	case "NFC":
		return unicodeForm(norm.NFC), nil
	case "NFD":
		return unicodeForm(norm.NFD), nil
	case "NFKC":
		return unicodeForm(norm.NFKC), nil
	case "NFKD":
		return unicodeForm(norm.NFKD), nil
	case "Prepend":
		if n.Prepend == nil || len(*n.Prepend) > maxNormalizerStringBytes {
			return nil, malformed(field+".prepend", "missing or longer than %d bytes", maxNormalizerStringBytes)
		}
		return prependNormalizer(*n.Prepend), nil
	case "Replace":
		if n.Pattern == nil || n.Pattern.String == nil || *n.Pattern.String == "" {
			return nil, unsupported(field+".pattern", "(only non-empty String patterns are supported)")
		}
		if n.Content == nil || len(*n.Content) > maxNormalizerStringBytes {
			return nil, malformed(field+".content", "missing or longer than %d bytes", maxNormalizerStringBytes)
		}
		return replaceNormalizer{old: *n.Pattern.String, new: *n.Content}, nil
	case "Sequence":
		if depth >= maxNormalizerDepth {
			return nil, unsupported(field, "Sequence nested deeper than %d", maxNormalizerDepth)
		}
		var seq sequenceNormalizer
		for i, r := range n.Normalizers {
			sub, err := parseNormalizer(fmt.Sprintf("%s.normalizers[%d]", field, i), r, depth+1)
			if err != nil {
				return nil, err
			}
			if sub != nil {
				seq = append(seq, sub)
			}
		}
		switch len(seq) {
		case 0:
			return nil, nil
		case 1:
			return seq[0], nil
		}
		return seq, nil
	}
	return nil, unsupported(field+" type", "%q", n.Type)
}

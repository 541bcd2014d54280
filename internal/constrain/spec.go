// Package constrain turns a structured-output request — a JSON Schema, any
// JSON object, a choice among strings or a regular expression, optionally
// wrapped between literal prefix and suffix strings — into a token mask
// over a tokenizer's vocabulary, so that a sampler only ever picks tokens
// that keep the output a valid prefix of the grammar, and picks EOS only
// once the output is complete.
//
// Pipeline: a [Spec] is compiled to a regular expression (JSON Schemas
// without recursion are regular once the property order is fixed; the
// "any JSON" value is depth-bounded), the expression to a Go regexp/syntax
// program, the program to a lazily built DFA over Unicode code points, and
// the DFA, walked over a byte trie of the vocabulary ([Vocab]), to one
// allowed-token bitset per DFA state, cached. A [Matcher] follows one
// sequence: Mask before each sample, Advance after.
//
// Output form: JSON values are compact — no whitespace anywhere — and the
// properties of an object come in the schema's order, optional ones
// possibly left out. That is a subset of what each schema accepts, so every
// complete output validates. Termination: the Matcher knows how many tokens
// the sequence may still produce and, when the budget gets short, allows
// only tokens after which the value can still be completed in time, so a
// request whose max_tokens covers the shortest valid output always ends
// with a complete value and EOS (finish_reason "stop"); otherwise it ends
// with "length" and a truncated value.
//
// Keywords outside the supported subset are refused with an
// [*UnsupportedError] naming them, never ignored (see docs/api.md).
package constrain

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// Errors; callers map them with errors.Is.
var (
	// ErrUnsupported reports a schema keyword or regex feature this
	// package cannot enforce; the error is an *UnsupportedError naming it.
	ErrUnsupported = errors.New("constrain: unsupported")
	// ErrInvalid reports a malformed spec, schema or regular expression.
	ErrInvalid = errors.New("constrain: invalid")
	// ErrTooLarge reports a grammar over the size limits.
	ErrTooLarge = errors.New("constrain: grammar too large")
)

// UnsupportedError names a keyword (or feature) that cannot be enforced.
type UnsupportedError struct {
	// Keyword is the schema keyword, e.g. "patternProperties".
	Keyword string
	// Path is a JSON pointer to the schema holding it ("" is the root).
	Path string
	// Detail explains, when the keyword is supported only in part.
	Detail string
}

// Error implements error.
func (e *UnsupportedError) Error() string {
	s := fmt.Sprintf("unsupported JSON Schema keyword %q at %q", e.Keyword, "#"+e.Path)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// Spec is one output constraint. Exactly one of JSONSchema, JSONObject,
// Choice and Regex is set. The output is Prefix, then the constrained
// value, then Suffix, all literal. A Spec travels from gateway to worker as
// its JSON encoding (SamplingParams.constraint).
//
// For tool calls, wrap the arguments' value: for example a Qwen-style call
// is Spec{Prefix: "<tool_call>\n", JSONSchema: <object schema with "name"
// const and "arguments">, Suffix: "\n</tool_call>"}. To compose more
// freely (several calls, alternatives), build a regex from [SchemaRegex]
// pieces and send it as Regex.
type Spec struct {
	// JSONSchema is a JSON Schema (the supported subset, docs/api.md).
	JSONSchema json.RawMessage `json:"json_schema,omitempty"`
	// JSONObject asks for any JSON object (response_format json_object).
	JSONObject bool `json:"json_object,omitempty"`
	// Choice lists the exact strings the output may be.
	Choice []string `json:"choice,omitempty"`
	// Regex is a Go RE2 expression the whole output must match (^ and $
	// are implied; \b and \B are refused).
	Regex string `json:"regex,omitempty"`
	// Prefix and Suffix are literal text around the value.
	Prefix string `json:"prefix,omitempty"`
	Suffix string `json:"suffix,omitempty"`
}

// Limits on untrusted specs (DefaultLimits).
const (
	// MaxSpecBytes bounds a spec's wire form.
	MaxSpecBytes = 256 << 10
	// MaxRegexBytes bounds a user regex (guided_regex).
	MaxRegexBytes = 16 << 10
	// MaxChoices bounds Choice.
	MaxChoices = 1024
	// MaxInsts bounds the compiled grammar's automaton instructions.
	MaxInsts = 400_000
)

// Encode returns the spec's wire form: its JSON encoding, compact, with
// strings escaped minimally and never HTML-escaped (json.Marshal writes
// each of <, > and & as six bytes: a 60 KB enum of '<' became 360 KB,
// past the workers' size limit). The schema is rewritten so too (key
// order kept), whatever escapes the client used.
func (s Spec) Encode() (string, error) {
	b, err := s.encode()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return string(b), nil
}

func (s Spec) encode() ([]byte, error) {
	if len(s.JSONSchema) > 0 {
		// A schema that does not decode is left as it is, for Compile
		// to refuse with its own message.
		if v, err := decodeOrdered(s.JSONSchema); err == nil {
			var canon bytes.Buffer
			if encodeCompact(&canon, v) == nil {
				s.JSONSchema = canon.Bytes()
			}
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// DecodeSpec parses a spec's wire form.
func DecodeSpec(wire string) (Spec, error) {
	var s Spec
	if len(wire) > MaxSpecBytes {
		return s, &LimitError{Limit: "constraint size", Size: len(wire), Max: MaxSpecBytes, Unit: "bytes"}
	}
	if err := json.Unmarshal([]byte(wire), &s); err != nil {
		return s, fmt.Errorf("%w: constraint: %w", ErrInvalid, err)
	}
	return s, nil
}

// Hash identifies the spec (cache key).
func (s Spec) Hash() string {
	b, _ := s.encode()
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Regexp returns the regular expression (RE2 syntax) the whole output must
// match, checking the spec. It is what Compile compiles.
func (s Spec) Regexp() (string, error) {
	n := 0
	if len(s.JSONSchema) > 0 {
		n++
	}
	if s.JSONObject {
		n++
	}
	if s.Choice != nil {
		n++
	}
	if s.Regex != "" {
		n++
	}
	if n != 1 {
		return "", fmt.Errorf("%w: a constraint needs exactly one of json_schema, json_object, choice and regex (got %d)", ErrInvalid, n)
	}
	var body string
	switch {
	case len(s.JSONSchema) > 0:
		re, err := SchemaRegex(s.JSONSchema)
		if err != nil {
			return "", err
		}
		body = re
	case s.JSONObject:
		body = anyObjectRegex(anyDepth)
	case s.Choice != nil:
		re, err := choiceRegex(s.Choice)
		if err != nil {
			return "", err
		}
		body = re
	default:
		if err := DefaultLimits.checkSpec(Spec{Regex: s.Regex}); err != nil {
			return "", err
		}
		body = "(?:" + s.Regex + ")"
	}
	return quote(s.Prefix) + body + quote(s.Suffix), nil
}

func choiceRegex(choices []string) (string, error) {
	if len(choices) == 0 {
		return "", fmt.Errorf("%w: choice needs at least one string", ErrInvalid)
	}
	if err := DefaultLimits.checkSpec(Spec{Choice: choices}); err != nil {
		return "", err
	}
	alts := make([]string, len(choices))
	for i, c := range choices {
		alts[i] = quote(c)
	}
	return alt(alts), nil
}

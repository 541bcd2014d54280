// Package constraintest holds what the tests of constrained decoding
// share (package constrain, the engine, the end-to-end tests): the corpus
// of test JSON schemas, a check of outputs against a schema by an
// independent JSON Schema library, and the constrained-decoding
// vocabulary of a tokenizer directory.
package constraintest

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/warden-ai/warden/internal/constrain"
	"github.com/warden-ai/warden/internal/tokenizer"
)

//go:embed schemas.json
var schemasJSON []byte

// Schemas returns the corpus of test schemas (schemas.json).
func Schemas(t testing.TB) []json.RawMessage {
	t.Helper()
	var list []json.RawMessage
	if err := json.Unmarshal(schemasJSON, &list); err != nil {
		t.Fatal(err)
	}
	return list
}

// Validator checks outputs against one JSON schema with an independent
// JSON Schema library, formats asserted.
type Validator struct {
	schema string
	s      *jsonschema.Schema
}

// NewValidator compiles schema; it fails t when the library cannot.
func NewValidator(t testing.TB, schema string) *Validator {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return &Validator{schema: schema, s: s}
}

// Check says why out is not a JSON document valid against the schema;
// nil when it is.
func (v *Validator) Check(out string) error {
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
	if err != nil {
		return fmt.Errorf("output %q does not parse: %w", out, err)
	}
	if err := v.s.Validate(inst); err != nil {
		return fmt.Errorf("output %q does not validate against %s: %w", out, v.schema, err)
	}
	return nil
}

// Validate fails t unless out is a JSON document valid against schema.
func Validate(t testing.TB, schema, out string) {
	t.Helper()
	if err := NewValidator(t, schema).Check(out); err != nil {
		t.Fatal(err)
	}
}

// Vocab loads the tokenizer in dir and returns it with the
// constrained-decoding vocabulary of its first size tokens, eos ending an
// output; size 0 and nil eos take the tokenizer's own.
func Vocab(dir string, size int, eos []int32) (*constrain.Vocab, *tokenizer.Tokenizer, error) {
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, nil, err
	}
	if size == 0 {
		size = tok.VocabSize()
	}
	if eos == nil {
		eos = tok.EOS()
	}
	return constrain.TokenizerVocab(tok, size, eos), tok, nil
}

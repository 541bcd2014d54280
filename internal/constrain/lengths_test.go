package constrain_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/warden-ai/warden/internal/constrain"
	"github.com/warden-ai/warden/internal/constrain/constraintest"
)

// TestDocumentedLengthsCompile: string and array bounds up to the
// documented maximums (docs/api.md: minLength and maxLength up to 1000,
// minItems and maxItems up to 64) compile, also nested, and the grammar
// holds them exactly: the shortest output has minLength characters, and a
// string of maxLength characters is accepted but not one more. Go's
// parser refuses nested counted repeats beyond 1000 copies together
// ("invalid repeat count"), which these once hit.
func TestDocumentedLengthsCompile(t *testing.T) {
	v, tok := presetVocab(t)
	for _, tc := range []struct {
		schema string
		// shortest is the shortest output's length in bytes, longest an
		// output the grammar holds (strings at maxLength), over one just
		// beyond what it allows.
		shortest      int
		longest, over string
	}{
		{`{"type":"string","maxLength":400}`, 2, quoted(400), quoted(401)},
		{`{"type":"string","maxLength":1000}`, 2, quoted(1000), quoted(1001)},
		{`{"type":"string","minLength":500}`, 502, quoted(5000), ""},
		{`{"type":"string","minLength":1000,"maxLength":1000}`, 1002, quoted(1000), quoted(1001)},
		{`{"type":"array","items":{"type":"string","minLength":300},"minItems":64}`, 64*303 + 1, array(100, quoted(300)), ""},
		{`{"type":"array","items":{"type":"string","maxLength":1000},"maxItems":64}`, 2, array(64, quoted(1000)), array(65, quoted(1))},
		{`{"type":"array","items":{"type":"array","items":{"type":"integer"},"maxItems":64},"maxItems":64}`, 2, array(64, array(64, "-1234567890123456")), array(1, array(65, "1"))},
	} {
		g, err := constrain.Compile(constrain.Spec{JSONSchema: json.RawMessage(tc.schema)})
		if err != nil {
			t.Errorf("%s: %v", tc.schema, err)
			continue
		}
		if got := g.MinLen(); got != tc.shortest {
			t.Errorf("%s: the shortest output has %d bytes, want %d", tc.schema, got, tc.shortest)
		}
		if !g.Matches(tc.longest) {
			t.Errorf("%s: %.40s… (%d bytes) is refused", tc.schema, tc.longest, len(tc.longest))
		}
		if tc.over != "" && g.Matches(tc.over) {
			t.Errorf("%s: %.40s… (%d bytes) is accepted", tc.schema, tc.over, len(tc.over))
		}
		if tc.shortest > 2000 {
			continue // sampling it takes seconds
		}
		val := constraintest.NewValidator(t, tc.schema)
		out, ok := generate(t, g, v, tok, 3, 4000)
		if !ok {
			t.Errorf("%s: no EOS within 4000 tokens: %.80q…", tc.schema, out)
		} else if err := val.Check(out); err != nil {
			t.Errorf("%s: %v", tc.schema, err)
		}
	}
}

// TestLengthBoundaries: above the documented maximums a larger maximum is
// lowered to it (maxLength 1001 is maxLength 1000, maxItems 65 is 64)
// and a larger minimum is refused, naming the keyword.
func TestLengthBoundaries(t *testing.T) {
	for _, tc := range []struct{ schema, same string }{
		{`{"type":"string","maxLength":1001}`, `{"type":"string","maxLength":1000}`},
		{`{"type":"string","minLength":20,"maxLength":100000}`, `{"type":"string","minLength":20,"maxLength":1000}`},
		{`{"type":"array","items":{"type":"null"},"maxItems":65}`, `{"type":"array","items":{"type":"null"},"maxItems":64}`},
	} {
		a, err := constrain.Spec{JSONSchema: json.RawMessage(tc.schema)}.Regexp()
		if err != nil {
			t.Fatalf("%s: %v", tc.schema, err)
		}
		b, err := constrain.Spec{JSONSchema: json.RawMessage(tc.same)}.Regexp()
		if err != nil {
			t.Fatalf("%s: %v", tc.same, err)
		}
		if a != b {
			t.Errorf("%s is not lowered to %s", tc.schema, tc.same)
		}
		if _, err := constrain.Compile(constrain.Spec{JSONSchema: json.RawMessage(tc.schema)}); err != nil {
			t.Errorf("%s: %v", tc.schema, err)
		}
	}
	for schema, keyword := range map[string]string{
		`{"type":"string","minLength":1001}`:                              "minLength",
		`{"type":"array","items":{"type":"null"},"minItems":65}`:          "minItems",
		`{"type":"array","items":{"type":"null"},"minItems":100000}`:      "minItems",
		`{"type":"string","minLength":1000000000,"maxLength":1000000000}`: "minLength",
	} {
		_, err := constrain.Compile(constrain.Spec{JSONSchema: json.RawMessage(schema)})
		var ue *constrain.UnsupportedError
		if !errors.As(err, &ue) || ue.Keyword != keyword {
			t.Errorf("%s: got %v, want an unsupported %s", schema, err, keyword)
		}
	}
}

// TestNestedLengthsTooLarge: nesting the maximums beyond the grammar's
// instruction limit is refused as too large, naming the size, before the
// program is built (no unbounded expansion).
func TestNestedLengthsTooLarge(t *testing.T) {
	schema := `{"type":"array","items":{"type":"array","items":{"type":"array","items":{"type":"string","minLength":1000},"minItems":64},"minItems":64},"minItems":64}`
	_, err := constrain.Compile(constrain.Spec{JSONSchema: json.RawMessage(schema)})
	if !errors.Is(err, constrain.ErrTooLarge) || !strings.Contains(err.Error(), "instructions") {
		t.Fatalf("got %v, want too large naming the instructions", err)
	}
}

func quoted(n int) string { return `"` + strings.Repeat("é", n/2) + strings.Repeat("a", n-n/2) + `"` }

func array(n int, item string) string {
	return "[" + strings.TrimSuffix(strings.Repeat(item+",", n), ",") + "]"
}

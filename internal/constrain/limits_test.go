package constrain_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/warden-ai/warden/internal/constrain"
)

// ltEnum is the audit's schema: an enum of 60 strings of 1,000 '<'.
func ltEnum() json.RawMessage {
	vals := make([]string, 60)
	for i := range vals {
		vals[i] = strings.Repeat("<", 999) + string(rune('A'+i%26)) + string(rune('a'+i/26))
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]any{"type": "string", "enum": vals})
	return b.Bytes()
}

// TestEncodeDoesNotEscapeHTML: the wire form writes <, > and & as
// themselves (json.Marshal made each six bytes: the 60 KB enum became
// 360 KB, over the workers' 256 KiB limit), and a worker accepts it.
func TestEncodeDoesNotEscapeHTML(t *testing.T) {
	schema := ltEnum()
	spec := constrain.Spec{JSONSchema: schema, Prefix: "<a&b>", Choice: nil}
	wire, err := spec.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if len(wire) > len(schema)+100 || strings.Contains(wire, `\u003c`) {
		t.Fatalf("the wire form of a %d-byte schema is %d bytes (%.60s…)", len(schema), len(wire), wire)
	}
	g, err := constrain.DefaultLimits.Accept(nil, wire)
	if err != nil {
		t.Fatalf("a worker refuses it: %v", err)
	}
	if want := "<a&b>\"" + strings.Repeat("<", 999) + "Ba\""; !g.Matches(want) {
		t.Errorf("the grammar does not match %.20q…", want)
	}
	// A client that escaped them (Go's json.Marshal does) gets the same
	// wire form.
	escaped, _ := json.Marshal(json.RawMessage(schema))
	if w2, err := (constrain.Spec{JSONSchema: escaped, Prefix: "<a&b>"}).Encode(); err != nil || w2 != wire || len(escaped) < 5*len(schema) {
		t.Errorf("an HTML-escaped schema (%d bytes) encodes to %d bytes, not to the same %d (%v)", len(escaped), len(w2), len(wire), err)
	}
	back, err := constrain.DecodeSpec(wire)
	if err != nil || back.Hash() != spec.Hash() || back.Prefix != spec.Prefix {
		t.Fatalf("round trip: %+v %v", back.Prefix, err)
	}
}

// TestAcceptNamesTheLimit: a constraint over a worker's limits is a
// *LimitError naming the limit, the measured size and the limit, for each
// limit, and the smaller of two workers' limits applies.
func TestAcceptNamesTheLimit(t *testing.T) {
	choices := make([]string, 90)
	for i := range choices {
		choices[i] = strings.Repeat("x", 3000) + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	big, _ := constrain.Spec{Choice: choices}.Encode()
	small, _ := constrain.Spec{Regex: "[a-z]{1,5}"}.Encode()
	sixChoices, _ := constrain.Spec{Choice: []string{"a", "b", "c", "d", "e", "f"}}.Encode()
	word, _ := constrain.Spec{Regex: "[a-z]{1,20}"}.Encode()
	tight := constrain.Limits{SpecBytes: 1 << 20, RegexBytes: 10, Choices: 5, Insts: 30}.Min(constrain.DefaultLimits)
	for _, tc := range []struct {
		lim  constrain.Limits
		wire string
		want string
	}{
		{constrain.DefaultLimits, big, "constraint size limit exceeded: 270462 bytes, the limit is 262144 bytes"},
		{tight, small, "regex size limit exceeded: 10 bytes"}, // not over: 10 bytes is the limit
		{tight, `{"regex":"[a-z]{1,5}|[0-9]"}`, "regex size limit exceeded: 16 bytes, the limit is 10 bytes"},
		{tight, sixChoices, "choices limit exceeded: 6 strings, the limit is 5 strings"},
		{constrain.Limits{Insts: 30}.Or(constrain.DefaultLimits), word, "grammar instructions limit exceeded: "},
	} {
		_, err := tc.lim.Accept(nil, tc.wire)
		if tc.wire == small {
			if err != nil {
				t.Errorf("%s at its limits: %v", tc.wire, err)
			}
			continue
		}
		var le *constrain.LimitError
		if !errors.As(err, &le) || !errors.Is(err, constrain.ErrTooLarge) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%.40s: got %v, want %q", tc.wire, err, tc.want)
		}
	}
	if got := (constrain.Limits{SpecBytes: 100}).Or(constrain.DefaultLimits).Min(constrain.Limits{SpecBytes: 200, RegexBytes: 7, Choices: 9, Insts: 11}); got != (constrain.Limits{SpecBytes: 100, RegexBytes: 7, Choices: 9, Insts: 11}) {
		t.Errorf("Or and Min: %+v", got)
	}
}

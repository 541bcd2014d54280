package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/warden-ai/warden/internal/constrain"
)

// constraintSeeds are the audit's reproductions (issue 25) and the
// boundaries of the documented limits.
func constraintSeeds() []string {
	schema := func(s string) string {
		return chatWith(`"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":` + s + `}}`)
	}
	quoted := func(n int, s string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf(`"%s%d"`, strings.Repeat(s, 1000), i)
		}
		return out
	}
	choices := make([]string, 90)
	for i := range choices {
		choices[i] = fmt.Sprintf(`"%s%02d"`, strings.Repeat("y", 2999), i)
	}
	return []string{
		schema(`{"type":"string","enum":[` + strings.Join(quoted(60, "<"), ",") + `]}`),
		schema(`{"type":"string","enum":[` + strings.Join(quoted(60, `\u003c`), ",") + `]}`),
		chatWith(`"guided_choice":[` + strings.Join(choices, ",") + `]`),
		chatWith(`"guided_choice":[` + strings.Join(choices[:80], ",") + `]`),
		schema(`{"type":"string","maxLength":400}`),
		schema(`{"type":"string","maxLength":1000}`),
		schema(`{"type":"string","maxLength":1001}`),
		schema(`{"type":"string","minLength":500}`),
		schema(`{"type":"string","minLength":1001}`),
		schema(`{"type":"array","items":{"type":"string","minLength":300},"minItems":64}`),
		schema(`{"type":"array","items":{"type":"string","minLength":30},"minItems":65}`),
		schema(`{"type":"array","items":{"type":"array","items":{"type":"string","minLength":1000},"minItems":64},"minItems":64}`),
		chatWith(`"guided_regex":"(?P<wrep_1000_1000>(?P<wrep_1000_1000>a))"`),
		chatWith(`"guided_regex":"<a>&amp;[<>&]{1,3}"`),
		chatWith(`"structured_outputs":{"choice":["<", ">", "&"]}`),
	}
}

// FuzzConstraintToWorker follows a request body from the gateway's
// decoder to a worker's acceptance of its constraint: the body is either
// refused with a 400, or its constraint is one a worker with the default
// limits accepts (constrain.Limits.Accept, the check workers run). Under
// smaller limits (a worker advertising them), the admission check refuses
// it with a 400 naming the limit. Never a panic, never a 5xx.
func FuzzConstraintToWorker(f *testing.F) {
	// The audit's cases scaled down (TestConstraintSeeds runs them whole:
	// inputs of hundreds of KB leave the fuzzer no time to mutate).
	for _, s := range []string{
		chatWith(`"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"enum":["<<<a","<>&b","\u003c\u003e"]}}}`),
		chatWith(`"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"array","items":{"type":"string","minLength":3,"maxLength":1001},"minItems":2,"maxItems":65}}}`),
		chatWith(`"guided_json":{"type":"string","minLength":500}`),
		chatWith(`"guided_choice":["<a>","b&c","d"]`),
		chatWith(`"guided_regex":"(?P<wrep_3_inf>[<>&])"`),
	} {
		f.Add([]byte(s))
	}
	for _, s := range fuzzSeeds() {
		f.Add([]byte(s))
	}
	tight := constrain.Limits{SpecBytes: 512, RegexBytes: 64, Choices: 3, Insts: 2000}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, e := decodeRequest(KindChat, body, DefaultMaxTokensLimit, nil)
		checkDecodeResult(t, KindChat, req, e)
		if req == nil || req.Constraint == "" {
			return
		}
		if req.ConstraintParam == "" {
			t.Fatal("a constraint without its param")
		}
		if _, err := constrain.DefaultLimits.Accept(nil, req.Constraint); err != nil {
			t.Fatalf("a worker refuses the constraint the gateway accepted: %v", err)
		}
		if strings.Contains(req.Constraint, `\u003c`) && !strings.Contains(string(body), `\\u003c`) {
			t.Fatalf("the wire form is HTML-escaped: %.200s", req.Constraint)
		}
		_, err := tight.Accept(nil, req.Constraint)
		if err == nil {
			return
		}
		var le *constrain.LimitError
		if !errors.As(err, &le) || le.Size <= le.Max {
			t.Fatalf("under smaller limits: %v, want a limit error", err)
		}
		ae := ConstraintError(req.ConstraintParam, err)
		if ae.Status != http.StatusBadRequest || ae.Param != req.ConstraintParam || !strings.Contains(ae.Message, le.Limit+" limit exceeded") {
			t.Fatalf("admission error %+v", ae)
		}
	})
}

// TestConstraintSeeds: the audit's reproductions, when decoded: the enum
// of 60 strings of 1,000 '<' (also sent \u003c-escaped) is accepted with
// a wire form of its own size; 90 choices of 3,001 characters are over
// the 256 KiB limit, a 400 naming it and the size; lengths up to the
// documented maximums are accepted (a larger maxLength lowered), larger
// minimums refused naming the keyword, and nesting beyond the instruction
// limit is a 400 saying so. None of them fails the worker's check.
func TestConstraintSeeds(t *testing.T) {
	seeds := constraintSeeds()
	for i, want := range []string{
		"", "", "constraint size limit exceeded: 270", "",
		"", "", "", "", "'minLength'",
		"", "'minItems'", "grammar instructions limit exceeded", "grammar instructions limit exceeded",
		"", "",
	} {
		req, e := decodeRequest(KindChat, []byte(seeds[i]), DefaultMaxTokensLimit, nil)
		if want != "" {
			if e == nil || e.Status != http.StatusBadRequest || !strings.Contains(e.Message, want) {
				t.Errorf("seed %d: %+v, want a 400 saying %q", i, e, want)
			}
			continue
		}
		if e != nil {
			t.Errorf("seed %d: %v", i, e.Message)
			continue
		}
		if len(req.Constraint) > len(seeds[i]) {
			t.Errorf("seed %d: the wire form (%d bytes) is larger than the request (%d)", i, len(req.Constraint), len(seeds[i]))
		}
		if _, err := constrain.DefaultLimits.Accept(nil, req.Constraint); err != nil {
			t.Errorf("seed %d: a worker refuses it: %v", i, err)
		}
	}
}

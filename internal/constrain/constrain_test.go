package constrain_test

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/warden-ai/warden/internal/constrain"
	"github.com/warden-ai/warden/internal/constrain/constraintest"
	"github.com/warden-ai/warden/internal/tokenizer"
)

var (
	vocabOnce sync.Once
	vocab     *constrain.Vocab
	vocabTok  *tokenizer.Tokenizer
	vocabErr  error
)

// presetVocab is the tiny preset's tokenizer (512 byte-level BPE tokens).
func presetVocab(t testing.TB) (*constrain.Vocab, *tokenizer.Tokenizer) {
	t.Helper()
	vocabOnce.Do(func() {
		dir, err := os.MkdirTemp("", "warden-constrain-")
		if err != nil {
			vocabErr = err
			return
		}
		defer os.RemoveAll(dir)
		if _, vocabErr = tokenizer.WritePreset(dir, 512); vocabErr != nil {
			return
		}
		vocab, vocabTok, vocabErr = constraintest.Vocab(dir, 0, nil)
	})
	if vocabErr != nil {
		t.Fatal(vocabErr)
	}
	return vocab, vocabTok
}

// generate samples from random logits (a stand-in for a random model) at
// temperature 1 through the matcher's mask.
func generate(t testing.TB, g *constrain.Grammar, v *constrain.Vocab, tok *tokenizer.Tokenizer, seed uint64, maxTokens int) (string, bool) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 7))
	m := g.NewMatcher(v)
	logits := make([]float32, v.Size())
	eos := tok.EOS()
	var out []byte
	for step := 0; step < maxTokens; step++ {
		for i := range logits {
			logits[i] = float32(r.NormFloat64() * 3)
		}
		m.Mask(logits, maxTokens-step)
		id := sampleSoftmax(logits, r.Float64())
		if id < 0 {
			t.Fatalf("every logit is masked after %q", out)
		}
		for _, e := range eos {
			if id == e {
				if !m.Complete() {
					t.Fatalf("EOS allowed before the output %q is complete", out)
				}
				return string(out), true
			}
		}
		b, err := tok.TokenBytes(id)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
		m.Advance(id)
	}
	return string(out), false
}

func sampleSoftmax(logits []float32, u float64) int32 {
	mx := math.Inf(-1)
	for _, l := range logits {
		mx = max(mx, float64(l))
	}
	if math.IsInf(mx, -1) {
		return -1
	}
	var sum float64
	for _, l := range logits {
		sum += math.Exp(float64(l) - mx)
	}
	target, acc := u*sum, 0.0
	last := int32(-1)
	for i, l := range logits {
		if math.IsInf(float64(l), -1) {
			continue
		}
		acc += math.Exp(float64(l) - mx)
		last = int32(i)
		if target < acc {
			return int32(i)
		}
	}
	return last
}

func TestSchemasOutputsValidate(t *testing.T) {
	v, tok := presetVocab(t)
	schemas := constraintest.Schemas(t)
	if len(schemas) < 50 {
		t.Fatalf("only %d schemas", len(schemas))
	}
	for i, schema := range schemas {
		g, err := constrain.Compile(constrain.Spec{JSONSchema: schema})
		if err != nil {
			t.Fatalf("schema %d %s: %v", i, schema, err)
		}
		val := constraintest.NewValidator(t, string(schema))
		for seed := uint64(0); seed < 8; seed++ {
			out, ok := generate(t, g, v, tok, seed, 400)
			if !ok {
				t.Fatalf("schema %d seed %d: no EOS within 400 tokens: %q", i, seed, out)
			}
			if err := val.Check(out); err != nil {
				t.Fatalf("schema %d seed %d: %v", i, seed, err)
			}
			if seed == 0 {
				t.Logf("schema %d: %s", i, out)
			}
		}
	}
}

func TestBudgetForcesCompletion(t *testing.T) {
	v, tok := presetVocab(t)
	schema := json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"array","items":{"type":"string"}}},"required":["a","b"]}`)
	g, err := constrain.Compile(constrain.Spec{JSONSchema: schema})
	if err != nil {
		t.Fatal(err)
	}
	val := constraintest.NewValidator(t, string(schema))
	// The shortest output, {"a":"","b":[]}, is 15 bytes: 16 tokens with
	// EOS always suffice.
	for seed := uint64(0); seed < 20; seed++ {
		out, ok := generate(t, g, v, tok, seed, 16)
		if !ok {
			t.Fatalf("seed %d: not complete within 16 tokens: %q", seed, out)
		}
		if err := val.Check(out); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

func TestChoiceRegexAndWrapping(t *testing.T) {
	v, tok := presetVocab(t)
	cases := []struct {
		spec  constrain.Spec
		check *regexp.Regexp
	}{
		{constrain.Spec{Choice: []string{"yes", "no", "maybe so", "naïve"}}, regexp.MustCompile(`^(?:yes|no|maybe so|naïve)$`)},
		{constrain.Spec{Regex: `[0-9]{3}-[a-z]{2,4}`}, regexp.MustCompile(`^[0-9]{3}-[a-z]{2,4}$`)},
		{constrain.Spec{Regex: `^(?:héllo|wörld)+ \p{Greek}{1,3}$`}, regexp.MustCompile(`^(?:héllo|wörld)+ \p{Greek}{1,3}$`)},
		{constrain.Spec{Prefix: "<tool_call>\n", JSONSchema: json.RawMessage(`{"type":"object","properties":{"name":{"const":"f"},"arguments":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}},"required":["name","arguments"]}`), Suffix: "\n</tool_call>"},
			regexp.MustCompile(`^<tool_call>\n\{"name":"f","arguments":\{"x":-?[0-9]+\}\}\n</tool_call>$`)},
		{constrain.Spec{JSONObject: true}, regexp.MustCompile(`^\{.*\}$`)},
	}
	for i, c := range cases {
		g, err := constrain.Compile(c.spec)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		for seed := uint64(0); seed < 10; seed++ {
			out, ok := generate(t, g, v, tok, seed, 300)
			if !ok || !c.check.MatchString(out) {
				t.Fatalf("case %d seed %d: %q (complete %v)", i, seed, out, ok)
			}
			if c.spec.JSONObject && !json.Valid([]byte(out)) {
				t.Fatalf("json_object output %q is not JSON", out)
			}
		}
	}
}

func TestUnsupportedKeywordsAreNamed(t *testing.T) {
	cases := map[string]string{
		`{"type":"string","pattern":"^a$"}`:                                                   "pattern",
		`{"type":"object","patternProperties":{"x":{}}}`:                                      "patternProperties",
		`{"oneOf":[{"type":"string"}]}`:                                                       "oneOf",
		`{"allOf":[{"type":"string"}]}`:                                                       "allOf",
		`{"not":{"type":"string"}}`:                                                           "not",
		`{"type":"number","multipleOf":2}`:                                                    "multipleOf",
		`{"type":"object","properties":{"a":{"type":"string","format":"email"}}}`:             "format",
		`{"type":"array","items":[{"type":"string"}]}`:                                        "items",
		`{"type":"array","uniqueItems":true}`:                                                 "uniqueItems",
		`{"$defs":{"n":{"anyOf":[{"type":"null"},{"$ref":"#/$defs/n"}]}},"$ref":"#/$defs/n"}`: "$ref",
		`{"$ref":"https://example.com/s.json"}`:                                               "$ref",
		`{"type":"number","exclusiveMinimum":0}`:                                              "exclusiveMinimum",
		`{"type":"number","minimum":0.5}`:                                                     "minimum",
		`{"type":"object","minProperties":1}`:                                                 "minProperties",
		`{"type":"string","minLength":5000}`:                                                  "minLength",
	}
	for schema, kw := range cases {
		_, err := constrain.Compile(constrain.Spec{JSONSchema: json.RawMessage(schema)})
		var ue *constrain.UnsupportedError
		if !errors.As(err, &ue) || ue.Keyword != kw || !errors.Is(err, constrain.ErrUnsupported) {
			t.Errorf("%s: got %v, want unsupported %q", schema, err, kw)
		}
	}
	if _, err := constrain.Compile(constrain.Spec{Regex: `a\bb`}); !errors.Is(err, constrain.ErrUnsupported) {
		t.Errorf(`regex \b: got %v`, err)
	}
	for _, bad := range []constrain.Spec{
		{JSONSchema: json.RawMessage(`{"type":"strng"}`)},
		{JSONSchema: json.RawMessage(`{"type":`)},
		{JSONSchema: json.RawMessage(`false`)},
		{Regex: `(`},
		{Choice: []string{}},
		{},
		{JSONObject: true, Regex: "a"},
	} {
		if _, err := constrain.Compile(bad); !errors.Is(err, constrain.ErrInvalid) {
			t.Errorf("%+v: got %v, want ErrInvalid", bad, err)
		}
	}
}

func TestSpecWireRoundTrip(t *testing.T) {
	s := constrain.Spec{JSONSchema: json.RawMessage(`{"type":"integer"}`), Prefix: "a", Suffix: "b"}
	w, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := constrain.DecodeSpec(w)
	if err != nil || back.Hash() != s.Hash() {
		t.Fatalf("%+v %v", back, err)
	}
}

// TestCache: an equal spec is a hit, the least recently used grammar goes
// first, and both bounds (entries, bytes) hold.
func TestCache(t *testing.T) {
	s := constrain.Spec{JSONSchema: json.RawMessage(`{"type":"integer"}`), Prefix: "a", Suffix: "b"}
	w, _ := s.Encode()
	back, _ := constrain.DecodeSpec(w)
	x, y := constrain.Spec{Choice: []string{"x"}}, constrain.Spec{Choice: []string{"y"}}
	c := constrain.NewCache(constrain.CacheLimits{Entries: 2})
	g1, _ := c.Compile(s)
	g2, _ := c.Compile(back)
	if st := c.Stats(); g1 != g2 || st.Entries != 1 || st.Hits != 1 || st.Misses != 1 || st.Bytes != g1.Size() || st.Bytes <= 0 {
		t.Fatalf("an equal spec: same grammar %v, stats %+v", g1 == g2, st)
	}
	c.Compile(x)
	c.Compile(s) // s is now the most recent: x goes next
	c.Compile(y)
	if g, _ := c.Compile(s); g != g1 {
		t.Error("the most recently used grammar was evicted")
	}
	if st := c.Stats(); st.Entries != 2 || st.Hits != 3 || st.Misses != 3 {
		t.Fatalf("stats %+v, want 2 entries, 3 hits, 3 misses", st)
	}
	if _, err := c.Compile(constrain.Spec{Regex: "("}); err == nil || c.Stats().Entries != 2 {
		t.Errorf("a bad spec: %v, %d entries", err, c.Stats().Entries)
	}

	// A byte bound below two grammars keeps only the latest.
	gx, _ := constrain.Compile(x)
	b := constrain.NewCache(constrain.CacheLimits{Entries: 10, Bytes: 2*gx.Size() - 1})
	b.Compile(x)
	gy, _ := b.Compile(y)
	if st := b.Stats(); st.Entries != 1 || st.Bytes != gy.Size() {
		t.Fatalf("byte-bounded cache: %+v", st)
	}
	var nilCache *constrain.Cache
	if g, err := nilCache.Compile(x); err != nil || g == nil {
		t.Fatalf("a nil cache compiles: %v", err)
	}
}

func FuzzCompileSchema(f *testing.F) {
	for _, s := range constraintest.Schemas(f) {
		f.Add([]byte(s))
	}
	v, tok := presetVocab(f)
	f.Fuzz(func(t *testing.T, schema []byte) {
		g, err := constrain.Compile(constrain.Spec{JSONSchema: schema})
		if err != nil {
			if !errors.Is(err, constrain.ErrInvalid) && !errors.Is(err, constrain.ErrUnsupported) && !errors.Is(err, constrain.ErrTooLarge) {
				t.Fatalf("unclassified error: %v", err)
			}
			return
		}
		// A few steps must not panic and must leave some token allowed.
		generate(t, g, v, tok, 1, 8)
	})
}

// BenchmarkCompile measures compiling the test schemas (each to its
// automaton's start state) and, on the tiny preset's vocabulary, the
// first token mask.
// Run with: go test -run '^$' -bench Compile ./internal/constrain/
func BenchmarkCompile(b *testing.B) {
	schemas := constraintest.Schemas(b)
	v, _ := presetVocab(b)
	logits := make([]float32, v.Size())
	b.Run("schemas", func(b *testing.B) {
		for b.Loop() {
			for _, s := range schemas {
				if _, err := constrain.Compile(constrain.Spec{JSONSchema: s}); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(schemas)), "ns/schema")
	})
	b.Run("schemas+first-mask", func(b *testing.B) {
		for b.Loop() {
			for _, s := range schemas {
				g, err := constrain.Compile(constrain.Spec{JSONSchema: s})
				if err != nil {
					b.Fatal(err)
				}
				g.NewMatcher(v).Mask(logits, 100)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(schemas)), "ns/schema")
	})
}

// BenchmarkCompileCache compares compiling the test schemas with taking
// them from a warm Cache; "uncached/cached" is the compile time a hit
// saves, as a ratio in the same run.
// Run with: go test -run '^$' -bench CompileCache ./internal/constrain/
func BenchmarkCompileCache(b *testing.B) {
	schemas := constraintest.Schemas(b)
	c := constrain.NewCache(constrain.CacheLimits{Entries: len(schemas)})
	for _, s := range schemas {
		if _, err := c.Compile(constrain.Spec{JSONSchema: s}); err != nil {
			b.Fatal(err)
		}
	}
	var cold, warm time.Duration
	for b.Loop() {
		for _, s := range schemas {
			spec := constrain.Spec{JSONSchema: s}
			t0 := time.Now()
			if _, err := constrain.Compile(spec); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if _, err := c.Compile(spec); err != nil {
				b.Fatal(err)
			}
			cold, warm = cold+t1.Sub(t0), warm+time.Since(t1)
		}
	}
	n := float64(b.N * len(schemas))
	b.ReportMetric(float64(cold.Nanoseconds())/n, "uncached-ns/schema")
	b.ReportMetric(float64(warm.Nanoseconds())/n, "cached-ns/schema")
	b.ReportMetric(float64(cold)/float64(warm), "uncached/cached")
}

func FuzzCompileRegex(f *testing.F) {
	for _, s := range []string{`[0-9]{3}-[a-z]{2,4}`, `^(?:héllo|wörld)+ \p{Greek}{1,3}$`, `(?i)abc|x*`, `a\bb`, `(`, `.{0,1000}`, `[^\x00-\x{10FFFF}]`,
		`(?P<wrep_1000_1000>(?P<wrep_1000_1000>a))`, `(?P<wrep_5_3>a)`, `(?P<wrep_2_inf>b)c`, `(?P<wrep_1001_inf>b)`, `(?P<wrep_x>a)`} {
		f.Add(s)
	}
	v, tok := presetVocab(f)
	f.Fuzz(func(t *testing.T, re string) {
		g, err := constrain.Compile(constrain.Spec{Regex: re})
		if err != nil {
			if !errors.Is(err, constrain.ErrInvalid) && !errors.Is(err, constrain.ErrUnsupported) && !errors.Is(err, constrain.ErrTooLarge) {
				t.Fatalf("unclassified error: %v", err)
			}
			return
		}
		generate(t, g, v, tok, 1, 8)
	})
}

package reasoning

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// run feeds chunks to a parser and returns the whole output, checking
// every released piece is valid UTF-8.
func run(t testing.TB, o Options, chunks []string) Output {
	t.Helper()
	p := NewParser(o)
	var r Output
	add := func(out Output) {
		if !utf8.ValidString(out.Reasoning) || !utf8.ValidString(out.Content) {
			t.Fatalf("released invalid UTF-8: %+v", out)
		}
		r.Reasoning += out.Reasoning
		r.Content += out.Content
	}
	for _, c := range chunks {
		add(p.Add(c))
	}
	add(p.End())
	return r
}

// splits returns text whole, by bytes (cutting UTF-8 sequences and tags
// everywhere), and cut in two and in three at every pair of byte
// boundaries.
func splits(text string) map[string][]string {
	var bytes []string
	for i := range len(text) {
		bytes = append(bytes, text[i:i+1])
	}
	s := map[string][]string{"whole": {text}, "bytes": bytes}
	for i := 1; i < len(text); i++ {
		s[fmt.Sprintf("at%d", i)] = []string{text[:i], text[i:]}
		for j := i + 1; j < len(text); j++ {
			s[fmt.Sprintf("at%d,%d", i, j)] = []string{text[:i], text[i:j], text[j:]}
		}
	}
	return s
}

func TestParser(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		text string
		want Output
	}{
		{"qwen3 thinks then answers", Options{Format: FormatQwen3},
			"<think>\nLet me see: 2+2 → 4.\n</think>\n\nIt is 4.", Output{"Let me see: 2+2 → 4.", "It is 4."}},
		{"qwen3 no thinking is content", Options{Format: FormatQwen3},
			"It is 4. <think>not</think>", Output{"", "It is 4. <think>not</think>"}},
		{"qwen3 leading whitespace before think", Options{Format: FormatQwen3},
			" \n<think>hm</think>ok", Output{"hm", "ok"}},
		{"qwen3 unclosed thinking is reasoning", Options{Format: FormatQwen3},
			"<think>\nstill thinking ü", Output{"still thinking ü", ""}},
		{"qwen3 empty thinking", Options{Format: FormatQwen3},
			"<think>\n\n</think>\n\nHi", Output{"", "Hi"}},
		{"qwen3 partial tag at the end is content", Options{Format: FormatQwen3}, "<thi", Output{"", "<thi"}},
		{"qwen3 only whitespace", Options{Format: FormatQwen3}, " \n", Output{"", " \n"}},
		{"qwen3 second think is content", Options{Format: FormatQwen3},
			"<think>a</think>b<think>c</think>", Output{"a", "b<think>c</think>"}},
		{"qwen3 tool call after thinking", Options{Format: FormatQwen3},
			"<think>call it</think>\n<tool_call>{\"name\": \"f\"}</tool_call>", Output{"call it", "<tool_call>{\"name\": \"f\"}</tool_call>"}},
		{"qwen3 prompt opened thinking", Options{Format: FormatQwen3, InThinking: true},
			"\nhm </th </think>\n\nok", Output{"hm </th", "ok"}},
		{"r1 starts inside thinking", Options{Format: FormatDeepSeekR1},
			"Okay, so 2+2.\n</think>\n\nFour.", Output{"Okay, so 2+2.", "Four."}},
		{"r1 writes its own think", Options{Format: FormatDeepSeekR1},
			"<think>\nOkay.\n</think>Four.", Output{"Okay.", "Four."}},
		{"r1 never closes: all reasoning", Options{Format: FormatDeepSeekR1},
			"Okay, so", Output{"Okay, so", ""}},
		{"r1 partial open tag at the end", Options{Format: FormatDeepSeekR1}, "<thi", Output{"<thi", ""}},
		{"none is content", Options{Format: FormatNone, InThinking: false},
			"<think>x</think>y", Output{"", "<think>x</think>y"}},
		{"whitespace inside reasoning kept", Options{Format: FormatQwen3},
			"<think>a  \n b</think>  c  d ", Output{"a  \n b", "c  d "}},
		{"empty", Options{Format: FormatQwen3}, "", Output{}},
	} {
		for how, chunks := range splits(tc.text) {
			got := run(t, tc.o, chunks)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("%s/%s: got %+v, want %+v", tc.name, how, got, tc.want)
			}
		}
	}
}

// TestParserStreams: reasoning is released as it arrives, held back only
// while it may be the start of </think> or trailing whitespace.
func TestParserStreams(t *testing.T) {
	p := NewParser(Options{Format: FormatQwen3})
	for i, step := range []struct {
		in   string
		want Output
	}{
		{"<thi", Output{}},
		{"nk>\nI ", Output{Reasoning: "I"}},
		{"think</", Output{Reasoning: " think"}},
		{"x", Output{Reasoning: "</x"}},
		{"</think>\n", Output{}},
		{"Yes", Output{Content: "Yes"}},
		{"\xc3", Output{}},
		{"\xbc", Output{Content: "ü"}},
	} {
		if got := p.Add(step.in); got != step.want {
			t.Fatalf("step %d %q: %+v, want %+v", i, step.in, got, step.want)
		}
	}
	if got := p.End(); got != (Output{}) {
		t.Fatalf("end: %+v", got)
	}
}

func TestDetect(t *testing.T) {
	for tmpl, want := range map[string]Format{
		`{%- if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}`: FormatQwen3,
		`{% if add_generation_prompt %}{{'<｜Assistant｜><think>\n'}}{% endif %}`:                                                                                          FormatDeepSeekR1,
		`{% for m in messages %}{{ m.content }}{% endfor %}`:                                                                                                             FormatNone,
	} {
		if got := Detect(tmpl); got != want {
			t.Errorf("Detect(%q) = %q, want %q", tmpl, got, want)
		}
	}
}

func TestParseFormat(t *testing.T) {
	for in, want := range map[string]Format{"": "", "auto": "", "none": FormatNone, "qwen3": FormatQwen3, "deepseek_r1": FormatDeepSeekR1} {
		if got, err := ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseFormat("qwen"); err == nil {
		t.Error("ParseFormat(qwen): no error")
	}
}

func TestPromptOpensThinking(t *testing.T) {
	for prompt, want := range map[string]bool{
		"<｜Assistant｜><think>\n":                         true,
		"<|im_start|>assistant\n":                        false,
		"<|im_start|>assistant\n<think>\n\n</think>\n\n": false,
	} {
		if got := PromptOpensThinking(prompt); got != want {
			t.Errorf("PromptOpensThinking(%q) = %v", prompt, got)
		}
	}
}

// FuzzParser: any output, cut anywhere, parses into valid UTF-8 whose
// result does not depend on the cuts, and the released text is made of
// the output's own bytes (no more than it).
func FuzzParser(f *testing.F) {
	f.Add("<think>\nhm\n</think>\n\nok", uint8(0), uint8(3))
	f.Add("okay </think> four", uint8(1), uint8(1))
	f.Add("\n<thi</think>nk>ü", uint8(2), uint8(5))
	f.Fuzz(func(t *testing.T, text string, mode, step uint8) {
		if !utf8.ValidString(text) {
			return
		}
		o := []Options{{Format: FormatQwen3}, {Format: FormatDeepSeekR1}, {Format: FormatQwen3, InThinking: true}}[mode%3]
		whole := run(t, o, []string{text})
		var chunks []string
		n := int(step%8) + 1
		for rest := text; len(rest) > 0; rest = rest[min(n, len(rest)):] {
			chunks = append(chunks, rest[:min(n, len(rest))])
		}
		if cut := run(t, o, chunks); cut != whole {
			t.Fatalf("whole %+v\ncut   %+v", whole, cut)
		}
		if len(whole.Reasoning)+len(whole.Content) > len(text) || !strings.Contains(text, whole.Reasoning) || !strings.HasSuffix(text, whole.Content) {
			t.Fatalf("%q parsed into %+v", text, whole)
		}
	})
}

package tokenizer

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// strictCase is a template rendered with one conversation: want is the
// text Python jinja2 renders, or class the exception it raises.
type strictCase struct {
	name, src string
	msgs      []Message
	opts      ChatOptions
	want      string
	class     string
}

// toolHistory is an assistant turn with a tool call whose arguments are an
// object, as transformers passes them.
var toolHistory = []Message{
	{Role: "user", Content: "Weather?"},
	{Role: "assistant", ToolCalls: []ToolCall{{ID: "c1", Name: "get_weather", Arguments: json.RawMessage(`{"city": "Zürich", "n": 1}`)}}},
	{Role: "tool", ToolCallID: "c1", Content: "21"},
}

func strictCases() []strictCase {
	user := []Message{{Role: "user", Content: "hi"}}
	emptyTools := ChatOptions{Tools: []json.RawMessage{}}
	return []strictCase{
		// The audit's two minimal reproductions.
		{name: "str + dict", src: `{% set a = {"k": 1} %}{{ 'x' + a }}`, msgs: user, class: "TypeError"},
		{name: "for over tools none", src: `{% for t in tools %}{% endfor %}ok`, msgs: user, class: "TypeError"},
		// DeepSeek-R1-Distill's tool history: arguments concatenated as a string.
		{name: "tool arguments concatenated", msgs: toolHistory, class: "TypeError",
			src: "{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}" +
				"{{ '<call>' + c.function.name + '\\n```json\\n' + c.function.arguments + '\\n```' }}{% endfor %}{% endif %}{% endfor %}"},
		{name: "tool arguments through tojson", msgs: toolHistory, want: `get_weather {"city": "Zürich", "n": 1}`,
			src: "{% for m in messages if m.tool_calls %}{{ m.tool_calls[0].function.name + ' ' + m.tool_calls[0].function.arguments | tojson }}{% endfor %}"},
		{name: "for over empty tools", src: `{% for t in tools %}x{% endfor %}ok`, msgs: user, opts: emptyTools, want: "ok"},
		{name: "for over undefined", src: `{% for t in nothing %}x{% else %}none{% endfor %}`, msgs: user, want: "none"},
		{name: "for over an int", src: `{% for t in 3 %}{% endfor %}`, msgs: user, class: "TypeError"},
		{name: "attribute of undefined", src: `{{ nothing.x }}`, msgs: user, class: "UndefinedError"},
		{name: "item of undefined", src: `{{ messages[5]['role'] }}`, msgs: user, class: "UndefinedError"},
		{name: "method of missing key", src: `{{ messages[0].reasoning_content.strip() }}`, msgs: user, class: "UndefinedError"},
		{name: "call of undefined", src: `{{ nothing() }}`, msgs: user, class: "UndefinedError"},
		{name: "unknown method", src: `{{ messages[0].content.nosuchmethod() }}`, msgs: user, class: "UndefinedError"},
		{name: "method of none", src: `{{ tools.items() }}`, msgs: user, class: "UndefinedError"},
		{name: "attribute of none", src: `[{{ tools.x }}]`, msgs: user, want: "[]"},
		{name: "missing key tested", src: `{{ messages[0].name is defined }}`, msgs: user, want: "False"},
		{name: "undefined printed", src: `[{{ nothing }}]`, msgs: user, want: "[]"},
		{name: "str + int", src: `{{ 'n' + 1 }}`, msgs: user, class: "TypeError"},
		{name: "int + str", src: `{{ 1 + 'n' }}`, msgs: user, class: "TypeError"},
		{name: "str + none", src: `{{ 'n' + tools }}`, msgs: user, class: "TypeError"},
		{name: "str + undefined", src: `{{ 'n' + nothing }}`, msgs: user, class: "UndefinedError"},
		{name: "list + list", src: `{{ ([1] + [2, 3]) | length }}`, msgs: user, want: "3"},
		{name: "list + str", src: `{{ [1] + 'a' }}`, msgs: user, class: "TypeError"},
		{name: "numbers", src: `{{ 1 + 2 }} {{ 1 + 0.5 }} {{ true + 1 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 3 }} {{ 3 - 5 }} {{ 7 / 2 }}`,
			msgs: user, want: "3 1.5 2 3 -4 2 8 -2 3.5"},
		{name: "division by zero", src: `{{ 1 // 0 }}`, msgs: user, class: "ZeroDivisionError"},
		{name: "str * int", src: `{{ 'ab' * 2 }}{{ 2 * 'c' }}`, msgs: user, want: "ababcc"},
		{name: "str * str", src: `{{ 'ab' * 'c' }}`, msgs: user, class: "TypeError"},
		{name: "str - str", src: `{{ 'ab' - 'b' }}`, msgs: user, class: "TypeError"},
		{name: "negate str", src: `{{ -messages[0].content }}`, msgs: user, class: "TypeError"},
		{name: "concat with ~", src: `{{ 'n' ~ 1 ~ nothing ~ true }}`, msgs: user, want: "n1True"},
		{name: "compare numbers and strings", src: `{{ 1 < 2.5 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }}`, msgs: user, want: "True True True"},
		{name: "compare none", src: `{{ tools < 1 }}`, msgs: user, class: "TypeError"},
		{name: "compare undefined", src: `{{ nothing > 1 }}`, msgs: user, class: "UndefinedError"},
		{name: "in string, list, dict", src: `{{ 'i' in 'hi' }} {{ 2 in [1, 2.0] }} {{ 'role' in messages[0] }} {{ 'x' not in messages[0] }}`,
			msgs: user, want: "True True True True"},
		{name: "in undefined", src: `{{ 'x' in nothing }}`, msgs: user, want: "False"},
		{name: "in none", src: `{{ 'x' in tools }}`, msgs: user, class: "TypeError"},
		{name: "int in string", src: `{{ 1 in 'a1' }}`, msgs: user, class: "TypeError"},
		{name: "length of none", src: `{{ tools | length }}`, msgs: user, class: "TypeError"},
		{name: "length", src: `{{ 'héllo' | length }} {{ nothing | length }} {{ messages | count }}`, msgs: user, want: "5 0 1"},
		{name: "raise_exception", src: `{{ raise_exception('no ' + 'way') }}`, msgs: user, class: "TemplateError"},
		{name: "tojson of undefined", src: `{{ nothing | tojson }}`, msgs: user, class: "TypeError"},
		{name: "dict literal and conditional", src: `{{- {'a': {'b': 1 + 1} }['a']['b'] if messages else 0 -}}`, msgs: user, want: "2"},
		{name: "namespace and loop", src: `{% set ns = namespace(n=0) %}{% for m in messages + messages if m.role == 'user' %}{% set ns.n = ns.n + loop.index %}{% endfor %}{{ ns.n }}`,
			msgs: user, want: "3"},
		{name: "slices and methods", src: `{{ messages[0].content[::-1] }}{{ messages[-1:][0]['content'].upper() }}{{ 'a,b'.split(',')[1] }}`, msgs: user, want: "ihHIb"},
		{name: "printf formatting", src: `{{ '%s=%d %.2f %5s|%-4d|%03d %x %e %g %%' % ('a', 7.9, 2.5, 'b', 3, 5, 255, 12345.678, 0.0001) }} {{ '%(k)s' % {'k': none} }}`,
			msgs: user, want: "a=7 2.50     b|3   |005 ff 1.234568e+04 0.0001 % None"},
		{name: "printf with too few arguments", src: `{{ '%s %s' % ('a',) }}`, msgs: user, class: "TypeError"},
		{name: "printf with too many arguments", src: `{{ '%s' % ('a', 'b') }}`, msgs: user, class: "TypeError"},
		{name: "printf %d of a string", src: `{{ '%d' % 'a' }}`, msgs: user, class: "TypeError"},
		{name: "list append", src: `{% set l = [] %}{% set _ = l.append(1) %}{{ l }}`, msgs: user, class: "SecurityError"},
		{name: "dict update", src: `{% set d = {} %}{{ d.update({'a': 1}) }}`, msgs: user, class: "SecurityError"},
		{name: "dict get and items", src: `{{ messages[0].get('role') }}{% for k, v in messages[0].items() %}{{ k }}{% endfor %}`, msgs: user, want: "userrolecontent"},
		{name: "strings with tag syntax", src: `{{ '}}' + "%}" + '{{' }}`, msgs: user, want: "}}%}{{"},
	}
}

// TestTemplatesFailWherePythonFails renders each case and checks the text,
// or that the render fails with ErrChatTemplate and Python's exception
// class (TestStrictCasesMatchReference checks the expectations against
// Python jinja2 itself).
func TestTemplatesFailWherePythonFails(t *testing.T) {
	tk := presetTokenizer(t, 512)
	for _, c := range strictCases() {
		if err := tk.setChatTemplate(c.src); err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		got, err := tk.RenderChat(c.msgs, c.opts)
		switch {
		case c.class == "" && err != nil:
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		case c.class == "" && got != c.want:
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		case c.class != "" && err == nil:
			t.Errorf("%s: rendered %q, want a %s", c.name, got, c.class)
		case c.class != "" && (!errors.Is(err, ErrChatTemplate) || pyClassOf(err) != c.class):
			t.Errorf("%s: error %v (class %q), want a chat template %s", c.name, err, pyClassOf(err), c.class)
		}
	}
}

// TestTemplateErrorNamesTheError checks that the error says what failed,
// in Python's words.
func TestTemplateErrorNamesTheError(t *testing.T) {
	tk := withTemplate(t, 512, `{% for m in messages %}{{ m.content + m.tool_calls[0].function.arguments }}{% endfor %}`)
	_, err := tk.RenderChat(toolHistory[1:2], ChatOptions{})
	if err == nil || !strings.Contains(err.Error(), `TypeError: can only concatenate str (not "dict") to str`) {
		t.Fatalf("error %v, want the TypeError", err)
	}
	tk = withTemplate(t, 512, `{% for t in tools %}{% endfor %}`)
	_, err = tk.RenderChat(toolHistory[:1], ChatOptions{})
	if err == nil || !strings.Contains(err.Error(), "TypeError: 'NoneType' object is not iterable") {
		t.Fatalf("error %v, want the TypeError", err)
	}
}

func TestCheckTagRewrites(t *testing.T) {
	for _, c := range []struct {
		body string
		expr bool
		want string
	}{
		{" a + b ", true, " __warden_add(a, b) "},
		{" a ~ b + c * d ", true, " (a ~ __warden_add(b, __warden_mul(c, d))) "},
		{" x.y[0](1, k=2) ", true, " __warden_get(__warden_get(__warden_get(x).y)[0])(1, k=2) "},
		{" for a, b in x.items() if a not in y recursive ", false, " for a, b in __warden_iter(__warden_get(__warden_get(x).items)()) if (not __warden_in(a, y)) recursive "},
		{" x.strip() + x.strip('a') ", true, " __warden_add(__warden_get(__warden_get(x).strip)(__warden_pyspace), __warden_get(__warden_get(x).strip)('a')) "},
		{" set ns.x = ns.x + 1 ", false, " set ns.x = __warden_add(__warden_get(ns).x, 1) "},
		{" elif not a is defined and b >= 1 ", false, " elif ((not (a is defined)) and __warden_ge(b, 1)) "},
		{" endfor ", false, " endfor "},
		{" macro m(a=1 + 1) ", false, " macro m(a=1 + 1) "},
		{" a + ", true, " a + "}, // not understood: left for the engine to refuse
		{" {'a': {'b': 1}} ", true, " { 'a': { 'b': 1 } } "},
		{" x|trim|length > 0 ", true, " __warden_gt(((x|trim)|length), 0) "},
	} {
		if got := checkTag(c.body, c.expr); got != c.want {
			t.Errorf("checkTag(%q) = %q, want %q", c.body, got, c.want)
		}
	}
}

// FuzzRewriteTemplate checks that rewriting never panics and that a
// template the engine compiles still compiles after the rewrite.
func FuzzRewriteTemplate(f *testing.F) {
	for _, c := range strictCases() {
		f.Add(c.src)
	}
	f.Add(llama3Template)
	f.Add(featuresTemplate)
	f.Add(`{{ -1 }}{{- x -}}{% if a %}{{ (a, ) }}{{ [a b] }}{{ x[1:2:3] }}{{ x[:] }}{% endif %}{{ 'unterminated`)
	f.Fuzz(func(t *testing.T, src string) {
		if _, err := compileTemplate(src); err != nil {
			return
		}
		if _, err := compileTemplate(rewriteTemplate(src, nil)); err != nil {
			t.Fatalf("the rewrite of %q does not compile: %v", src, err)
		}
	})
}

// TestStrictCasesMatchReference checks strictCases' expectations against
// Python jinja2 set up as transformers sets it up.
func TestStrictCasesMatchReference(t *testing.T) {
	needPython(t)
	tk := presetTokenizer(t, 512)
	cases := strictCases()
	templates := map[string]string{}
	var reqCases []map[string]any
	for _, c := range cases {
		templates[c.name] = c.src
		reqCases = append(reqCases, map[string]any{"template": c.name, "vars": refCase{msgs: c.msgs, opts: c.opts}.vars(tk)})
	}
	res := renderReference(t, map[string]any{"now": referenceNow.Format("2006-01-02T15:04:05"), "templates": templates, "cases": reqCases})
	for i, c := range cases {
		switch r := res[i]; {
		case r.Text != nil && (c.class != "" || *r.Text != c.want):
			t.Errorf("%s: Python renders %q; the case wants %q %s", c.name, *r.Text, c.want, c.class)
		case r.Text == nil && r.Class != c.class:
			t.Errorf("%s: Python raises %s; the case wants %q %s", c.name, r.Error, c.want, c.class)
		}
	}
}

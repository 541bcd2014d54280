// Package toolcall finds function calls in a model's output text: the
// tool-call formats of the chat templates warden serves, detected from the
// template itself, and a streaming parser that turns output text into
// content and OpenAI-style tool-call deltas.
//
// # Formats
//
// Detect reads a chat template's source:
//
//   - FormatHermes: the template contains "<tool_call>" (Qwen 2.5, Qwen 3,
//     QwQ, Hermes 2 Pro and their derivatives). The model writes each call
//     as <tool_call>{"name": ..., "arguments": {...}}</tool_call>, possibly
//     after some text.
//   - FormatLlama3JSON: the template tells the model to answer
//     {"name": function name, "parameters": ...} (Llama 3.1, 3.2, 3.3).
//     The model's whole answer is then one JSON object, or several
//     separated by ";", possibly after <|python_tag|>.
//   - FormatUnsupported: the template reads tools but in neither way
//     (Mistral's [TOOL_CALLS], for instance): tools cannot be served.
//   - FormatNone: the template does not read tools at all.
//
// # Untrusted output
//
// Model output is untrusted text: the parser never fails on it. Text that
// does not make a valid call (not JSON, no name, a name that was not
// offered, arguments that are not an object) is content.
package toolcall

import "strings"

// Format is a model's tool-call output format.
type Format string

// The formats Detect tells apart.
const (
	FormatNone        Format = ""
	FormatUnsupported Format = "unsupported"
	FormatHermes      Format = "hermes"
	FormatLlama3JSON  Format = "llama3_json"
)

// Detect returns the tool-call format of a chat template (see the package
// documentation).
func Detect(template string) Format {
	switch {
	case strings.Contains(template, hermesOpen):
		return FormatHermes
	case strings.Contains(template, `{"name": function name, "parameters"`):
		return FormatLlama3JSON
	case strings.Contains(template, "tools"):
		return FormatUnsupported
	}
	return FormatNone
}

// Serves reports whether warden can parse the format's calls.
func (f Format) Serves() bool { return f == FormatHermes || f == FormatLlama3JSON }

const (
	hermesOpen  = "<tool_call>"
	hermesClose = "</tool_call>"
	pythonTag   = "<|python_tag|>"
)

// space is the whitespace around calls.
const space = " \t\r\n"

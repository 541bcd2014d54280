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
//   - FormatMistral: the template contains "[TOOL_CALLS]" (Mistral 7B
//     v0.3, Mixtral, Nemo, Small, Large, Devstral, Magistral). After the
//     [TOOL_CALLS] marker the model writes its calls either as a JSON
//     array [{"name": ..., "arguments": {...}}, ...] (older templates; a
//     single object is read too) or, in recent templates, as
//     name[ARGS]{...} (optionally name[CALL_ID]id[ARGS]{...}), each call
//     after its own [TOOL_CALLS]. Mistral's templates require every call
//     ID to be 9 letters and digits (MistralCallID).
//   - FormatUnsupported: the template reads tools but in none of these
//     ways: tools cannot be served.
//   - FormatNone: the template does not read tools at all.
//
// # Untrusted output
//
// Model output is untrusted text: the parser never fails on it. Text that
// does not make a valid call (not JSON, no name, a name that was not
// offered, arguments that are not an object) is content.
package toolcall

import (
	"crypto/sha256"
	"strings"
)

// Format is a model's tool-call output format.
type Format string

// The formats Detect tells apart.
const (
	FormatNone        Format = ""
	FormatUnsupported Format = "unsupported"
	FormatHermes      Format = "hermes"
	FormatLlama3JSON  Format = "llama3_json"
	FormatMistral     Format = "mistral"
)

// Detect returns the tool-call format of a chat template (see the package
// documentation).
func Detect(template string) Format {
	switch {
	case strings.Contains(template, hermesOpen):
		return FormatHermes
	case strings.Contains(template, `{"name": function name, "parameters"`):
		return FormatLlama3JSON
	case strings.Contains(template, mistralCalls):
		return FormatMistral
	case strings.Contains(template, "tools"):
		return FormatUnsupported
	}
	return FormatNone
}

// Serves reports whether warden can parse the format's calls.
func (f Format) Serves() bool {
	return f == FormatHermes || f == FormatLlama3JSON || f == FormatMistral
}

// Markers are the format's markup tokens, which the output text must keep
// for the parser to see them (tokenizers mark some of them special).
// Llama's <|python_tag|> is not among them: the parser needs no marker
// to read Llama's calls, so it stays out of the text as before.
func (f Format) Markers() []string {
	switch f {
	case FormatHermes:
		return []string{hermesOpen, hermesClose}
	case FormatMistral:
		return []string{mistralCalls, mistralArgs, mistralCallID}
	}
	return nil
}

const (
	hermesOpen  = "<tool_call>"
	hermesClose = "</tool_call>"
	pythonTag   = "<|python_tag|>"

	mistralCalls  = "[TOOL_CALLS]"
	mistralArgs   = "[ARGS]"
	mistralCallID = "[CALL_ID]"
)

// space is the whitespace around calls.
const space = " \t\r\n"

// mistralIDLen is the length of the call IDs Mistral's templates accept.
const mistralIDLen = 9

// MistralCallID returns a call ID as Mistral's templates require it: 9
// ASCII letters and digits. An ID already of that shape is returned as
// it is; any other is mapped to one by a hash, so the same ID always maps
// to the same one (an assistant's call and the tool message answering it
// stay paired).
func MistralCallID(id string) string {
	if len(id) == mistralIDLen && strings.IndexFunc(id, func(r rune) bool { return !isAlnum(r) }) < 0 {
		return id
	}
	const digits = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	sum := sha256.Sum256([]byte(id))
	out := make([]byte, mistralIDLen)
	for i := range out {
		out[i] = digits[int(sum[i])%len(digits)]
	}
	return string(out)
}

func isAlnum(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
}

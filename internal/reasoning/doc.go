// Package reasoning separates a reasoning model's thinking from its
// answer: the text a model writes between <think> and </think> becomes
// reasoning (reasoning_content in chat completions, a reasoning item in
// the Responses API), the rest content.
//
// # Formats
//
// Detect reads a chat template's source; configuration may override it
// (ParseFormat):
//
//   - FormatQwen3: the template mentions <think> (Qwen3, QwQ, warden's
//     preset template). The model opens its thinking with <think> at the
//     very start of its output; output that does not start so is all
//     content (enable_thinking false renders an empty <think></think> in
//     the prompt, and the model then answers directly).
//   - FormatDeepSeekR1: the template mentions <think> and uses DeepSeek's
//     "<｜Assistant｜>" turn marker (DeepSeek-R1 and its Qwen and Llama
//     distills). The model's output starts inside the thinking whether
//     or not it writes <think> itself (recent R1 templates open it in the
//     prompt); everything up to </think> is reasoning, and output that
//     never closes it is all reasoning.
//   - FormatNone: no reasoning parsing; <think> is content.
//
// Whatever the format but none, a prompt that already ends with an open <think>
// (Options.InThinking) starts the output inside the thinking.
//
// Whitespace around the tags is not part of either text: reasoning is
// trimmed at both ends, content of the whitespace that follows </think>.
//
// # Untrusted output
//
// Model output is untrusted text: the parser never fails on it, and the
// result does not depend on how the output was cut into pieces (a tag
// split across pieces is held back until it is known). Released text
// always ends on a UTF-8 character boundary.
package reasoning

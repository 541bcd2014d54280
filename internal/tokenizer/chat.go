package tokenizer

import (
	"encoding/json"
	"fmt"
	"time"
)

// Message is one chat message, with the fields Hugging Face chat templates
// read. Empty optional fields are left out of the message the template sees,
// as a client would leave them out of its JSON (templates test whether a key
// is defined).
type Message struct {
	// Role is "system", "user", "assistant", "tool" or another role the
	// template accepts: 1-64 characters of [A-Za-z0-9_-].
	Role string
	// Content is the message text, always passed as a string: "" for an
	// assistant message with only tool calls (as vLLM passes an OpenAI
	// client's null; Qwen3's template fails on none).
	Content string
	// ReasoningContent is an assistant's reasoning from an earlier turn
	// (reasoning_content; Qwen3 and DeepSeek-R1 templates read it).
	ReasoningContent string
	// ToolCalls are the function calls an assistant message made.
	ToolCalls []ToolCall
	// ToolCallID is, in a "tool" message, the id of the call it answers.
	ToolCallID string
	// Name is the optional name of the author (name).
	Name string
}

// ToolCall is one function call an assistant made. Templates see it as
// {"id", "type", "function": {"name", "arguments"}}, arguments an object, as
// transformers expects.
type ToolCall struct {
	// ID is the call's id; left out when empty.
	ID string
	// Name is the called function's name.
	Name string
	// Arguments is the JSON value of the arguments, normally an object.
	// The OpenAI API carries it as a string that holds JSON: pass that
	// string's bytes. Empty means {}.
	Arguments json.RawMessage
}

// ChatOptions are the template inputs besides the messages.
type ChatOptions struct {
	// AddGenerationPrompt appends the header that cues the assistant's reply
	// (add_generation_prompt).
	AddGenerationPrompt bool
	// Tools are the tool definitions the model may call (tools), each a JSON
	// object as in the OpenAI API's tools array:
	// {"type": "function", "function": {"name", "description", "parameters"}}.
	// Key order is kept. Nil passes tools = none.
	Tools []json.RawMessage
	// EnableThinking, when set, is passed as enable_thinking (Qwen3's switch
	// for reasoning); nil leaves it undefined, the template's default.
	EnableThinking *bool
	// Now is the time strftime_now formats; zero means the current time.
	Now time.Time
}

// llama3Template is the default chat template when the tokenizer has Llama
// 3's header tokens but no template of its own; WritePreset writes it too.
const llama3Template = `{{- bos_token }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}`

// plainTemplate is the default for other tokenizers: "role: content" lines,
// then "assistant:" when a reply is wanted.
const plainTemplate = `{{- bos_token }}
{%- for message in messages %}
    {{- message['role'] + ': ' + message['content'] + '\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- 'assistant:' }}
{%- endif %}`

// maxRoleLen bounds a message role.
const maxRoleLen = 64

// setChatTemplate compiles src, or the default template when src is empty:
// llama3Template when <|start_header_id|>, <|end_header_id|> and <|eot_id|>
// are special tokens, else plainTemplate.
func (t *Tokenizer) setChatTemplate(src string) error {
	if src == "" {
		src = plainTemplate
		if t.IsSpecial(t.addedID("<|start_header_id|>")) && t.IsSpecial(t.addedID("<|end_header_id|>")) &&
			t.IsSpecial(t.addedID("<|eot_id|>")) {
			src = llama3Template
		}
	}
	if len(src) > maxTemplateBytes {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrChatTemplate, len(src), maxTemplateBytes)
	}
	ct, err := compileChatTemplate(src, t.specialTokens())
	if err != nil {
		return err
	}
	t.chat, t.chatSrc = ct, src
	return nil
}

func (t *Tokenizer) addedID(content string) int32 {
	if id, ok := t.added[content]; ok {
		return id
	}
	return -1
}

// specialTokens returns the added tokens that are special.
func (t *Tokenizer) specialTokens() []addedToken {
	var out []addedToken
	for _, tr := range t.special.passes {
		for _, tok := range tr.toks {
			if tok.special {
				out = append(out, tok)
			}
		}
	}
	return out
}

// ChatTemplate returns the source of the template ApplyChatTemplate renders.
func (t *Tokenizer) ChatTemplate() string { return t.chatSrc }

// ApplyChatTemplate renders the chat template for msgs and tokenizes the
// result: EncodeChat with only AddGenerationPrompt set.
func (t *Tokenizer) ApplyChatTemplate(msgs []Message, addGenerationPrompt bool) ([]int32, error) {
	return t.EncodeChat(msgs, ChatOptions{AddGenerationPrompt: addGenerationPrompt})
}

// RenderChat returns the text the chat template renders for msgs: the same
// string as Hugging Face's apply_chat_template(msgs, tokenize=False) with
// the same tools and options (see docs/api.md for the deliberate
// differences). EncodeChat tokenizes exactly this string.
func (t *Tokenizer) RenderChat(msgs []Message, opts ChatOptions) (string, error) {
	r, err := t.renderChat(msgs, opts)
	if err != nil {
		return "", err
	}
	return r.text, nil
}

// EncodeChat renders the chat template for msgs (see RenderChat) and
// tokenizes the result.
//
// Injection safety. Special (control) tokens are recognised only where the
// template itself wrote them: in its literal text and in bos_token and
// eos_token. Everything that comes from the request (contents, roles, names,
// tool calls, tool definitions) is tokenized as plain text, even when the
// template transforms it (tojson, split, trim, slicing), so a message
// containing "<|eot_id|>" yields the tokens of those characters. Without
// such text the tokens equal Hugging Face's tokenization of the rendered
// string. How it works: the template is compiled a second time with every
// special-token literal replaced by a marker carrying a secret random
// number, and bos_token/eos_token passed as markers; the markers in that
// render are the only places special tokens are matched. The render with the
// markers put back must equal the plain render, otherwise the template used
// a special-token literal other than by printing it and the call fails with
// ErrChatTemplate.
//
// Roles must be 1–64 characters of [A-Za-z0-9_-]; all text must be valid
// UTF-8; tool-call arguments and tools must be JSON.
func (t *Tokenizer) EncodeChat(msgs []Message, opts ChatOptions) ([]int32, error) {
	r, err := t.renderChat(msgs, opts)
	if err != nil {
		return nil, err
	}
	parts := r.parts(t)
	ids, err := t.encodeParts(parts)
	if err != nil {
		return nil, err
	}
	// Belt and braces: every special token must be one the template wrote
	// (a vocabulary in which plain text could merge into a special token's
	// ID would break that).
	written := 0
	for _, p := range parts {
		if p.m == t.special {
			written++
		}
	}
	for _, id := range ids {
		if t.IsSpecial(id) {
			written--
		}
	}
	if written != 0 {
		return nil, fmt.Errorf("%w: plain text tokenized into a special token", ErrChatTemplate)
	}
	return ids, nil
}

func checkRole(role string) error {
	if role == "" || len(role) > maxRoleLen {
		return fmt.Errorf("%w: role must be 1-%d characters", ErrInvalidMessage, maxRoleLen)
	}
	for i := range len(role) {
		c := role[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%w: role %q: only letters, digits, '_' and '-' are allowed", ErrInvalidMessage, role)
		}
	}
	return nil
}

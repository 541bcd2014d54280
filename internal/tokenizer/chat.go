package tokenizer

import (
	"crypto/rand"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/ardanlabs/jinja"
)

// Message is one chat message.
type Message struct {
	Role    string
	Content string
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
	tmpl, err := compileTemplate(src)
	if err != nil {
		return err
	}
	t.chat, t.chatSrc = tmpl, src
	return nil
}

func (t *Tokenizer) addedID(content string) int32 {
	if id, ok := t.added[content]; ok {
		return id
	}
	return -1
}

// ChatTemplate returns the source of the template ApplyChatTemplate renders.
func (t *Tokenizer) ChatTemplate() string { return t.chatSrc }

// compileTemplate compiles a Jinja template, turning a panic of the engine
// into an error.
func compileTemplate(src string) (tmpl *jinja.Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			tmpl, err = nil, fmt.Errorf("%w: compile panicked: %v", ErrChatTemplate, r)
		}
	}()
	tmpl, err = jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrChatTemplate, err)
	}
	return tmpl, nil
}

func renderTemplate(tmpl *jinja.Template, data map[string]any) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("%w: render panicked: %v", ErrChatTemplate, r)
		}
	}()
	out, err = tmpl.Render(data)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrChatTemplate, err)
	}
	return out, nil
}

// ApplyChatTemplate renders the chat template for msgs and tokenizes the
// result. With addGenerationPrompt the template appends the header that cues
// the assistant's reply.
//
// Injection safety. Message content is never tokenized as template text: the
// template is rendered with a placeholder in place of each content, made of
// private-use characters and a random per-call number. The rendered string is
// cut at the placeholders; template text is tokenized with special tokens
// recognised (EncodeSpecial) and each content as plain text (Encode), so a
// message containing "<|eot_id|>" yields the tokens of those characters.
// Plain text on both sides of a cut is still pre-tokenized as one string, so
// for content without special-token strings the result equals Hugging Face's
// tokenization of the rendered text.
//
// Whitespace trimming of content by the template (`| trim`, `.strip()`) is
// honoured: the placeholder carries the content's leading and trailing
// whitespace, which the template keeps or drops. Other transformations of
// content (slicing, replace, upper) see the placeholder, not the text; a
// template that alters a placeholder is reported as an error.
//
// Roles must be 1–64 characters of [A-Za-z0-9_-]; they are rendered into the
// template text.
func (t *Tokenizer) ApplyChatTemplate(msgs []Message, addGenerationPrompt bool) ([]int32, error) {
	tag, err := newPlaceholderTag()
	if err != nil {
		return nil, err
	}
	list := make([]any, len(msgs))
	cores := make([]string, len(msgs))
	for i, m := range msgs {
		if err := checkRole(m.Role); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		if err := validUTF8(m.Content); err != nil {
			return nil, fmt.Errorf("message %d content: %w", i, err)
		}
		// Same whitespace as the engine's trim (strings.TrimSpace).
		afterLead := strings.TrimLeftFunc(m.Content, unicode.IsSpace)
		lead := m.Content[:len(m.Content)-len(afterLead)]
		core := strings.TrimRightFunc(afterLead, unicode.IsSpace)
		trail := afterLead[len(core):]
		cores[i] = core
		list[i] = map[string]any{"role": m.Role, "content": lead + tag.placeholder(i) + trail}
	}
	out, err := renderTemplate(t.chat, map[string]any{
		"messages":              list,
		"add_generation_prompt": addGenerationPrompt,
		"bos_token":             t.bosToken,
		"eos_token":             t.eosToken,
	})
	if err != nil {
		return nil, err
	}
	parts, err := tag.cut(out, cores, t)
	if err != nil {
		return nil, err
	}
	return t.encodeParts(parts)
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

// Placeholders are phOpen + tag + "." + message index + phClose. The tag is
// decimal so that case-changing filters leave it intact; the private-use
// delimiters are not whitespace, so trimming leaves them intact too.
const (
	phOpen  = "\uE000"
	phClose = "\uE001"
)

type placeholderTag string

func newPlaceholderTag() (placeholderTag, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("tokenizer: placeholder: %w", err)
	}
	var n uint64
	for _, x := range b {
		n = n<<8 | uint64(x)
	}
	return placeholderTag(phOpen + strconv.FormatUint(n, 10) + "."), nil
}

func (tag placeholderTag) placeholder(i int) string {
	return string(tag) + strconv.Itoa(i) + phClose
}

// cut splits rendered template output at the placeholders into template
// text (special tokens recognised) and message contents (plain text).
func (tag placeholderTag) cut(out string, cores []string, t *Tokenizer) ([]part, error) {
	errAltered := fmt.Errorf("%w: the template altered a message placeholder", ErrChatTemplate)
	var parts []part
	template := func(text string) error {
		if strings.Contains(text, phOpen) || strings.Contains(text, phClose) {
			return errAltered
		}
		parts = append(parts, part{text: text, m: t.special})
		return nil
	}
	for {
		i := strings.Index(out, string(tag))
		if i < 0 {
			break
		}
		if err := template(out[:i]); err != nil {
			return nil, err
		}
		rest := out[i+len(tag):]
		j := strings.Index(rest, phClose)
		if j < 0 {
			return nil, errAltered
		}
		k, err := strconv.Atoi(rest[:j])
		if err != nil || k < 0 || k >= len(cores) {
			return nil, errAltered
		}
		parts = append(parts, part{text: cores[k], m: t.plain})
		out = rest[j+len(phClose):]
	}
	if err := template(out); err != nil {
		return nil, err
	}
	return parts, nil
}

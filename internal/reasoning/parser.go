package reasoning

import (
	"fmt"
	"strings"

	"github.com/warden-ai/warden/internal/streamtext"
)

// Format is a model's reasoning output format.
type Format string

// The reasoning formats.
const (
	FormatNone       Format = "none"
	FormatQwen3      Format = "qwen3"
	FormatDeepSeekR1 Format = "deepseek_r1"
)

// The tags around the thinking.
const (
	OpenTag  = "<think>"
	CloseTag = "</think>"
)

// deepSeekTurn is the assistant turn marker of DeepSeek's templates.
const deepSeekTurn = "<｜Assistant｜>"

// Detect returns the reasoning format of a chat template (see the package
// documentation).
func Detect(template string) Format {
	switch {
	case !strings.Contains(template, OpenTag):
		return FormatNone
	case strings.Contains(template, deepSeekTurn):
		return FormatDeepSeekR1
	}
	return FormatQwen3
}

// ErrUnknownFormat is returned by ParseFormat for a name it does not know.
var ErrUnknownFormat = fmt.Errorf("reasoning: unknown format")

// ParseFormat reads a configured format name: "qwen3", "deepseek_r1" or
// "none"; "" and "auto" return "" (detect from the template).
func ParseFormat(name string) (Format, error) {
	switch f := Format(name); f {
	case FormatNone, FormatQwen3, FormatDeepSeekR1:
		return f, nil
	case "", "auto":
		return "", nil
	}
	return "", fmt.Errorf("%w %q (want qwen3, deepseek_r1, none or auto)", ErrUnknownFormat, name)
}

// PromptOpensThinking reports whether a rendered prompt's text ends with
// an open <think> (whitespace after it allowed): the model's output then
// starts inside its thinking.
func PromptOpensThinking(prompt string) bool {
	return strings.HasSuffix(strings.TrimRight(prompt, space), OpenTag)
}

// Options configure a Parser.
type Options struct {
	Format Format
	// InThinking starts the output inside the thinking: the prompt ends
	// with an open <think> (PromptOpensThinking).
	InThinking bool
}

// Output is what one step of the parser releases.
type Output struct {
	Reasoning string
	Content   string
}

type state int

const (
	stStart     state = iota // before the output's first significant text: <think>, or content
	stThinkOpen              // inside the thinking from the start: a leading <think> is dropped
	stThinkLead              // inside the thinking, before its first significant text
	stThink                  // inside the thinking
	stAnswer                 // after </think>, before the answer's first significant text
	stContent                // the answer
)

// space is the whitespace around the tags.
const space = " \t\r\n"

// Parser splits one output, fed as it is generated, into reasoning and
// content.
type Parser struct {
	st  state
	buf string // pending text
	// scanned is how far buf was searched for </think> without a match
	// (stThink), so a long run of held whitespace is not searched again.
	scanned int
}

// NewParser returns a parser for one output.
func NewParser(o Options) *Parser {
	p := &Parser{}
	switch {
	case o.Format == FormatNone:
		p.st = stContent // no parsing: all content
	case o.InThinking || o.Format == FormatDeepSeekR1:
		p.st = stThinkOpen
	}
	return p
}

// Add feeds the next piece of output text and returns what can be
// released.
func (p *Parser) Add(text string) Output {
	var out Output
	if text != "" {
		p.buf += text
		p.step(&out, false)
	}
	return out
}

// End releases the rest once the output is complete.
func (p *Parser) End() Output {
	var out Output
	p.step(&out, true)
	return out
}

func (p *Parser) step(out *Output, end bool) {
	for p.next(out, end) {
	}
}

// next advances by one state and reports whether it should go on.
func (p *Parser) next(out *Output, end bool) bool {
	rest := strings.TrimLeft(p.buf, space)
	switch p.st {
	case stStart, stThinkOpen:
		if !end && strings.HasPrefix(OpenTag, rest) {
			return false // nothing yet, or maybe the start of <think>
		}
		if r, ok := strings.CutPrefix(rest, OpenTag); ok {
			p.buf, p.st = r, stThinkLead
		} else if p.st == stThinkOpen {
			p.buf, p.st = rest, stThinkLead
		} else {
			p.st = stContent
		}
		return true
	case stThinkLead, stAnswer:
		p.buf = rest
		if rest == "" {
			return false
		}
		if p.st == stThinkLead {
			p.st = stThink
		} else {
			p.st = stContent
		}
		return true
	case stThink:
		return p.think(out, end)
	case stContent:
		n := len(p.buf)
		if !end {
			n -= streamtext.PartialRune(p.buf)
		}
		out.Content += p.buf[:n]
		p.buf = p.buf[n:]
	}
	return false
}

// think releases reasoning up to </think>, holding back trailing
// whitespace and a suffix that may be the start of the tag.
func (p *Parser) think(out *Output, end bool) bool {
	from := max(p.scanned-len(CloseTag)+1, 0)
	if i := strings.Index(p.buf[from:], CloseTag); i >= 0 {
		i += from
		out.Reasoning += strings.TrimRight(p.buf[:i], space)
		p.buf, p.scanned, p.st = p.buf[i+len(CloseTag):], 0, stAnswer
		return true
	}
	if end {
		out.Reasoning += strings.TrimRight(p.buf, space)
		p.buf, p.scanned = "", 0
		return false
	}
	keep := streamtext.PartialSuffix(p.buf, CloseTag)
	n := len(strings.TrimRight(p.buf[:len(p.buf)-keep], space))
	n -= streamtext.PartialRune(p.buf[:n])
	out.Reasoning += p.buf[:n]
	p.buf = p.buf[n:]
	p.scanned = len(p.buf)
	return false
}

package toolcall

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Delta is one step of one tool call as OpenAI streams it: the first delta
// of a call carries its ID and Name (and empty Arguments), the following
// ones fragments of its arguments, a JSON text, in order.
type Delta struct {
	Index     int    // the call's position among the request's calls
	ID        string // first delta only
	Name      string // first delta only
	Arguments string // a fragment of the arguments
}

// Output is what one step of the parser releases: content text, then
// tool-call deltas (content always comes before the calls it precedes in
// the model's output).
type Output struct {
	Content string
	Calls   []Delta
}

// Options configure a Parser.
type Options struct {
	Format Format
	// Names are the offered functions' names; a call to another name is
	// not a call (it stays content).
	Names []string
	// Single keeps only the first call (parallel_tool_calls false); later
	// calls are dropped.
	Single bool
	// ID returns the ID of call i ("call_…"); it must be unique per call.
	ID func(i int) string
}

// state is where the parser is in the output.
type state int

const (
	stStart  state = iota // nothing decided yet (leading whitespace, <|python_tag|>)
	stText                // content (Hermes: watching for <tool_call>)
	stHermes              // inside <tool_call>, waiting for </tool_call>
	stSeq                 // between the JSON objects of a Llama call sequence
	stObj                 // inside one JSON object of a Llama call sequence
)

// Parser splits a model's output, fed as it is generated, into content and
// tool-call deltas. Text that may still turn out to be a call is held back
// until it is known; a call is released once complete and valid, as a
// first delta and argument fragments cut where the text arrived.
type Parser struct {
	o     Options
	names map[string]bool
	st    state

	buf   string // pending text; it starts at absolute offset base
	base  int
	marks []int // absolute offsets where fed chunks ended

	calls     int    // calls released
	committed bool   // a call of the sequence was released: the output is calls
	held      int    // stSeq/stObj/stHermes: offset in buf up to which the text was scanned
	gap       string // stHermes: the whitespace before <tool_call>
	obj       int    // stObj: offset in buf where the object starts
	scan      scanner
}

// NewParser returns a parser for one output.
func NewParser(o Options) *Parser {
	p := &Parser{o: o, names: make(map[string]bool, len(o.Names))}
	for _, n := range o.Names {
		p.names[n] = true
	}
	return p
}

// Calls returns how many calls were released so far.
func (p *Parser) Calls() int { return p.calls }

// Add feeds the next piece of output text (valid UTF-8) and returns what
// can be released.
func (p *Parser) Add(text string) Output {
	var out Output
	if text == "" {
		return out
	}
	p.buf += text
	p.marks = append(p.marks, p.base+len(p.buf))
	p.step(&out, false)
	return out
}

// End releases the rest once the output is complete: held text that did
// not become a call is content, a call cut short too.
func (p *Parser) End() Output {
	var out Output
	p.step(&out, true)
	p.consume(&out, len(p.buf), true)
	return out
}

// consume drops n bytes of buf, released as content when asContent.
func (p *Parser) consume(out *Output, n int, asContent bool) {
	if asContent {
		out.Content += p.buf[:n]
	}
	p.buf = p.buf[n:]
	p.base += n
	i := 0
	for i < len(p.marks) && p.marks[i] <= p.base {
		i++
	}
	p.marks = p.marks[i:]
}

// step advances through buf as far as the text allows.
func (p *Parser) step(out *Output, end bool) {
	for {
		var more bool
		switch p.st {
		case stStart:
			more = p.start(out, end)
		case stText:
			more = p.text(out, end)
		case stHermes:
			more = p.hermes(out, end)
		case stSeq:
			more = p.seq(out, end)
		case stObj:
			more = p.object(out, end)
		}
		if !more {
			return
		}
	}
}

// start decides what the output is once its first significant text is in.
func (p *Parser) start(out *Output, end bool) bool {
	rest := strings.TrimLeft(p.buf, space)
	if p.o.Format == FormatLlama3JSON {
		if r, ok := strings.CutPrefix(rest, pythonTag); ok {
			rest = strings.TrimLeft(r, space)
		}
		if rest == "" || strings.HasPrefix(pythonTag, rest) {
			return p.undecided(end)
		}
		if rest[0] == '{' {
			p.held = len(p.buf) - len(rest)
			p.st = stSeq
			return true
		}
	}
	p.st = stText
	return true
}

// undecided holds the leading text until more comes; at the end it is
// content.
func (p *Parser) undecided(end bool) bool {
	if end {
		p.st = stText
		return true
	}
	return false
}

// text releases content; in the Hermes format it stops at <tool_call>,
// holding back a suffix that may be its start and trailing whitespace (the
// whitespace before a call, or between calls, is no content).
func (p *Parser) text(out *Output, end bool) bool {
	if p.o.Format != FormatHermes {
		p.consume(out, len(p.buf), true)
		return false
	}
	if i := strings.Index(p.buf, hermesOpen); i >= 0 {
		pre := strings.TrimRight(p.buf[:i], space)
		out.Content += pre
		p.gap = p.buf[len(pre):i]
		p.consume(out, i+len(hermesOpen), false)
		p.st = stHermes
		return true
	}
	if end {
		if p.calls > 0 {
			out.Content += strings.TrimRight(p.buf, space)
			p.consume(out, len(p.buf), false)
		}
		return false
	}
	keep := partialSuffix(p.buf, hermesOpen)
	rest := p.buf[:len(p.buf)-keep]
	n := len(strings.TrimRight(rest, space))
	p.consume(out, n, true)
	return false
}

// hermes waits for </tool_call> and releases the call in between, or the
// whole tagged text as content when it is not a valid call. At the end an
// unclosed call counts if its JSON is complete (models may stop instead of
// closing the tag).
func (p *Parser) hermes(out *Output, end bool) bool {
	from := max(p.held-len(hermesClose)+1, 0)
	i := strings.Index(p.buf[from:], hermesClose)
	switch {
	case i >= 0:
		i += from
	case end:
		i = len(p.buf)
	default:
		p.held = len(p.buf) // searched so far
		return false
	}
	p.held = 0
	body := p.buf[:i]
	if !p.release(out, body, p.base) {
		out.Content += p.gap + hermesOpen + body
		if i < len(p.buf) {
			out.Content += hermesClose
		}
	}
	p.consume(out, min(i+len(hermesClose), len(p.buf)), false)
	p.st = stText
	return true
}

// seq is between the objects of Llama's call sequence {...}; {...}.
func (p *Parser) seq(out *Output, end bool) bool {
	i := p.held
	for i < len(p.buf) && strings.IndexByte(" \t\r\n;", p.buf[i]) >= 0 {
		i++
	}
	if i == len(p.buf) {
		if end {
			return p.giveUp(out, i)
		}
		return false
	}
	switch c := p.buf[i]; {
	case c == '{':
		p.obj, p.held, p.scan = i, i, scanner{}
		p.st = stObj
		return true
	case c == '<' && strings.HasPrefix(pythonTag, p.buf[i:]) && !end:
		return false // maybe <|python_tag|> before the next call
	case c == '<' && strings.HasPrefix(p.buf[i:], pythonTag):
		p.held = i + len(pythonTag)
		return true
	}
	return p.giveUp(out, i)
}

// object scans one JSON object of a sequence; once it is complete it must
// be a valid call.
func (p *Parser) object(out *Output, end bool) bool {
	n := p.scan.feed(p.buf[p.held:])
	if n < 0 {
		p.held = len(p.buf)
		if end {
			return p.giveUp(out, p.obj)
		}
		return false
	}
	stop := p.held + n
	if !p.release(out, p.buf[p.obj:stop], p.base+p.obj) {
		return p.giveUp(out, p.obj)
	}
	p.committed = true
	p.consume(out, stop, false)
	p.held = 0
	p.st = stSeq
	return true
}

// giveUp ends a call sequence at offset at of buf, where the text is not
// a call: before the first call all of the output is content; after it,
// the rest from at is.
func (p *Parser) giveUp(out *Output, at int) bool {
	if p.committed {
		p.consume(out, at, false)
	}
	p.held = 0
	p.st = stText
	return true
}

// release parses one call's JSON text (at absolute offset abs) and, when
// it is a valid call to an offered function, releases it. A call is
// {"name": ..., "arguments": {...}} ("parameters" in Llama's words), keys
// matched exactly.
func (p *Parser) release(out *Output, text string, abs int) bool {
	var c map[string]json.RawMessage
	var name string
	if json.Unmarshal([]byte(text), &c) != nil || json.Unmarshal(c["name"], &name) != nil || !p.names[name] {
		return false
	}
	args, ok := c["arguments"]
	if !ok {
		args = c["parameters"]
	}
	argsAt := -1
	switch {
	case args == nil || string(args) == "null":
		args = json.RawMessage("{}")
	case args[0] == '{':
		argsAt = abs + strings.Index(text, string(args))
	case args[0] == '"':
		// Some models write the arguments as a string holding JSON.
		var s string
		if json.Unmarshal(args, &s) != nil || !isObject(s) {
			return false
		}
		args = json.RawMessage(s)
	default:
		return false
	}
	if p.o.Single && p.calls > 0 {
		return true // parallel_tool_calls false: only the first call
	}
	i := p.calls
	p.calls++
	out.Calls = append(out.Calls, Delta{Index: i, ID: p.id(i), Name: name})
	p.fragments(out, i, string(args), argsAt)
	return true
}

// fragments releases a call's arguments, cut where the fed chunks ended
// (when argsAt, their absolute offset, is known).
func (p *Parser) fragments(out *Output, index int, args string, argsAt int) {
	from := 0
	if argsAt >= 0 {
		for _, m := range p.marks {
			cut := m - argsAt
			if cut <= from || cut >= len(args) || !utf8.RuneStart(args[cut]) {
				continue
			}
			out.Calls = append(out.Calls, Delta{Index: index, Arguments: args[from:cut]})
			from = cut
		}
	}
	out.Calls = append(out.Calls, Delta{Index: index, Arguments: args[from:]})
}

func (p *Parser) id(i int) string {
	if p.o.ID == nil {
		return ""
	}
	return p.o.ID(i)
}

func isObject(s string) bool {
	var v map[string]json.RawMessage
	return json.Unmarshal([]byte(s), &v) == nil
}

// partialSuffix returns the length of the longest suffix of text that is a
// proper, non-empty prefix of tag.
func partialSuffix(text, tag string) int {
	for n := min(len(tag)-1, len(text)); n > 0; n-- {
		if strings.HasPrefix(tag, text[len(text)-n:]) {
			return n
		}
	}
	return 0
}

// scanner finds the end of one JSON object fed in pieces, starting at its
// "{": it tracks nesting, strings and escapes only (validity is checked by
// encoding/json once the object is complete).
type scanner struct {
	depth         int
	inString, esc bool
}

// feed scans s and returns the length of s up to and including the
// object's closing brace, or -1 when the object continues past s.
func (s *scanner) feed(text string) int {
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case s.esc:
			s.esc = false
		case s.inString && c == '\\':
			s.esc = true
		case c == '"':
			s.inString = !s.inString
		case s.inString:
		case c == '{' || c == '[':
			s.depth++
		case c == '}' || c == ']':
			s.depth--
			if s.depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}

package toolcall

import (
	"encoding/json"
	"strings"

	"github.com/warden-ai/warden/internal/streamtext"
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
	stStart       state = iota // nothing decided yet (leading whitespace, <|python_tag|>)
	stText                     // content (Hermes: watching for <tool_call>)
	stHermes                   // after <tool_call>: reading the call's head
	stHermesWhole              // after <tool_call>, a call without a streamable head: waiting for </tool_call>
	stSeq                      // between the JSON objects of a Llama call sequence
	stObj                      // at one JSON object of a Llama call sequence: reading its head
	stObjWhole                 // inside a Llama object without a streamable head: scanning to its end
	stArgs                     // streaming the arguments of a recognised call
	stTail                     // after a streamed call's arguments: the rest of its markup (dropped)
	stMistral                  // after [TOOL_CALLS]: which form the calls take
	stMistralName              // at name[ARGS]{ (Mistral's recent form): reading up to the arguments
)

// mistralForm is the form of the calls after one [TOOL_CALLS].
type mistralForm int

const (
	mistralArray  mistralForm = iota // [{...}, {...}]
	mistralObject                    // one {...}
	mistralNamed                     // name[ARGS]{...}
)

// Parser splits a model's output, fed as it is generated, into content and
// tool-call deltas. Text that may still turn out to be markup is held
// back until it is known.
//
// A call whose text starts with a streamable head, {"name": "<offered
// name>", "arguments": { ("parameters" in Llama's words), is recognised
// there: its first delta is released at once and its arguments stream as
// they arrive, up to the object's matching brace, as OpenAI streams them
// (so arguments cut short by the end of the output stay cut short). A
// call written otherwise (keys in another order, arguments as a string)
// is released once it is complete and valid.
type Parser struct {
	o     Options
	names map[string]bool
	st    state

	buf string // pending text, not yet released or dropped

	calls     int    // calls released
	committed bool   // Llama: a call of the sequence was released: the output is calls (Mistral: of this [TOOL_CALLS])
	drop      bool   // the streamed call is not released (Single, after the first)
	held      int    // stHermesWhole/stSeq/stObjWhole/stArgs: offset in buf up to which the text was scanned
	gap       string // Hermes, Mistral: the whitespace before <tool_call> or [TOOL_CALLS]
	form      mistralForm
	obj       int     // stObj/stObjWhole: offset in buf where the object starts
	scan      scanner // stObjWhole/stArgs/stTail (Llama): the object being scanned
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

// Add feeds the next piece of output text and returns what can be
// released. Pieces may split a UTF-8 sequence: released text always ends
// on a character boundary.
func (p *Parser) Add(text string) Output {
	var out Output
	if text == "" {
		return out
	}
	p.buf += text
	p.step(&out, false)
	return out
}

// End releases the rest once the output is complete: held text that did
// not become a call is content.
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
			more = p.hermesHead(out, end)
		case stHermesWhole:
			more = p.hermesWhole(out, end)
		case stSeq:
			more = p.seq(out, end)
		case stObj:
			more = p.objectHead(out, end)
		case stObjWhole:
			more = p.objectWhole(out, end)
		case stArgs:
			more = p.args(out, end)
		case stTail:
			more = p.tail(out, end)
		case stMistral:
			more = p.mistral(out, end)
		case stMistralName:
			more = p.mistralName(out, end)
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

// text releases content; in the Hermes and Mistral formats it stops at
// <tool_call> or [TOOL_CALLS], holding back a suffix that may be its start
// and trailing whitespace (the whitespace before a call, or between
// calls, is no content).
func (p *Parser) text(out *Output, end bool) bool {
	tag := map[Format]string{FormatHermes: hermesOpen, FormatMistral: mistralCalls}[p.o.Format]
	if tag == "" {
		p.consume(out, len(p.buf)-streamtext.PartialRune(p.buf), true)
		return false
	}
	if i := strings.Index(p.buf, tag); i >= 0 {
		pre := strings.TrimRight(p.buf[:i], space)
		out.Content += pre
		p.gap = p.buf[len(pre):i]
		if p.o.Format == FormatMistral {
			// The marker stays in buf until a call is released, so
			// that text which is no call is content as written.
			p.consume(out, i, false)
			p.held, p.committed = len(tag), false
			p.st = stMistral
			return true
		}
		p.consume(out, i+len(tag), false)
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
	keep := streamtext.PartialSuffix(p.buf, tag)
	n := len(strings.TrimRight(p.buf[:len(p.buf)-keep], space))
	p.consume(out, n-streamtext.PartialRune(p.buf[:n]), true)
	return false
}

// hermesHead reads the start of a call after <tool_call>: a streamable
// head starts the call's stream; anything else waits for </tool_call>.
func (p *Parser) hermesHead(out *Output, end bool) bool {
	name, argsAt, m := p.head(p.buf)
	switch {
	case m == headYes:
		p.open(out, name, argsAt)
	case m == headNo || end:
		p.st, p.held = stHermesWhole, 0
	default:
		return false
	}
	return true
}

// hermesWhole waits for </tool_call> and releases the call in between, or
// the whole tagged text as content when it is not a valid call. At the end
// an unclosed call counts if its JSON is complete (models may stop instead
// of closing the tag).
func (p *Parser) hermesWhole(out *Output, end bool) bool {
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
	if !p.release(out, body) {
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
	seps := " \t\r\n;"
	if p.o.Format == FormatMistral {
		seps = " \t\r\n,"
	}
	i := p.held
	for i < len(p.buf) && strings.IndexByte(seps, p.buf[i]) >= 0 {
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
		p.obj, p.held = i, i
		p.st = stObj
		return true
	case p.o.Format == FormatMistral:
		if c == ']' && p.form == mistralArray && p.committed {
			p.consume(out, i+1, false) // the end of the array
			p.held = 0
			p.st = stText
			return true
		}
		return p.giveUp(out, i)
	case c == '<' && strings.HasPrefix(pythonTag, p.buf[i:]) && !end:
		return false // maybe <|python_tag|> before the next call
	case c == '<' && strings.HasPrefix(p.buf[i:], pythonTag):
		p.held = i + len(pythonTag)
		return true
	}
	return p.giveUp(out, i)
}

// objectHead reads the start of one JSON object of a Llama sequence: a
// streamable head starts the call's stream (and commits the output to
// calls); anything else is scanned whole.
func (p *Parser) objectHead(out *Output, end bool) bool {
	name, argsAt, m := p.head(p.buf[p.obj:])
	switch {
	case m == headYes:
		p.consume(out, p.obj, false) // the separators and <|python_tag|> before it
		p.committed = true
		p.open(out, name, argsAt)
	case m == headNo || end:
		p.held, p.scan = p.obj, scanner{}
		p.st = stObjWhole
	default:
		return false
	}
	return true
}

// objectWhole scans one JSON object of a sequence; once it is complete it
// must be a valid call.
func (p *Parser) objectWhole(out *Output, end bool) bool {
	n := p.scan.feed(p.buf[p.held:])
	if n < 0 {
		p.held = len(p.buf)
		if end {
			return p.giveUp(out, p.obj)
		}
		return false
	}
	stop := p.held + n
	if !p.release(out, p.buf[p.obj:stop]) {
		return p.giveUp(out, p.obj)
	}
	p.committed = true
	p.consume(out, stop, false)
	p.held = 0
	p.st = p.afterObject()
	return true
}

// afterObject is the state after one JSON object of a call sequence:
// the next object or the end of Llama's sequence or Mistral's array, or
// text after Mistral's single object.
func (p *Parser) afterObject() state {
	if p.o.Format == FormatMistral && p.form == mistralObject {
		return stText
	}
	return stSeq
}

// giveUp ends a call sequence at offset at of buf, where the text is not
// a call: before the first call all of the output is content; after it,
// the rest from at is.
//
// In the Mistral format a give-up concerns one [TOOL_CALLS] only: before
// its first call, the text from the marker to at is content as written,
// and the text from at on is read again as text.
func (p *Parser) giveUp(out *Output, at int) bool {
	switch {
	case p.o.Format == FormatMistral && !p.committed:
		out.Content += p.gap
		p.gap = ""
		p.consume(out, at, true)
	case p.committed:
		p.consume(out, at, false)
	}
	p.held = 0
	p.st = stText
	return true
}

// open starts the stream of a call recognised by its head: its first
// delta, then its arguments from buf[argsAt] (their "{") on.
func (p *Parser) open(out *Output, name string, argsAt int) {
	p.drop = p.o.Single && p.calls > 0
	if !p.drop {
		out.Calls = append(out.Calls, Delta{Index: p.calls, ID: p.id(p.calls), Name: name})
		p.calls++
	}
	p.consume(out, argsAt, false)
	p.held, p.scan = 0, scanner{}
	p.st = stArgs
}

// args releases the streamed call's arguments as far as they arrived, up
// to the brace that closes them.
func (p *Parser) args(out *Output, end bool) bool {
	n := p.scan.feed(p.buf[p.held:])
	stop := len(p.buf)
	if n >= 0 {
		stop = p.held + n
	}
	p.held = stop
	if n < 0 && !end {
		stop -= streamtext.PartialRune(p.buf[:stop])
	}
	if stop > 0 && !p.drop {
		out.Calls = append(out.Calls, Delta{Index: p.calls - 1, Arguments: p.buf[:stop]})
	}
	p.consume(out, stop, false)
	p.held -= stop
	if n < 0 {
		return false
	}
	p.held, p.scan = 0, scanner{depth: 1} // inside the call's object
	p.st = stTail
	if p.o.Format == FormatMistral && p.form == mistralNamed {
		p.st = stText // name[ARGS]{...}: the arguments were all of the call
	}
	return true
}

// tail drops the rest of a streamed call's markup: in the Hermes format
// up to </tool_call> (or the end), in Llama's up to the brace that closes
// the call's object.
func (p *Parser) tail(out *Output, end bool) bool {
	if p.o.Format == FormatHermes {
		if i := strings.Index(p.buf, hermesClose); i >= 0 {
			p.consume(out, i+len(hermesClose), false)
			p.st = stText
			return true
		}
		p.consume(out, len(p.buf)-streamtext.PartialSuffix(p.buf, hermesClose), false)
		if end {
			p.consume(out, len(p.buf), false)
		}
		return false
	}
	n := p.scan.feed(p.buf)
	if n < 0 {
		p.consume(out, len(p.buf), false)
		return false
	}
	p.consume(out, n, false)
	p.held = 0
	p.st = p.afterObject()
	return true
}

// mistral decides the form of the calls after [TOOL_CALLS] (buf starts
// with the marker; held is where to read on).
func (p *Parser) mistral(out *Output, end bool) bool {
	i := p.held
	for i < len(p.buf) && strings.IndexByte(space, p.buf[i]) >= 0 {
		i++
	}
	if i == len(p.buf) {
		if end {
			return p.giveUp(out, i)
		}
		return false
	}
	switch c := p.buf[i]; {
	case c == '[':
		p.form, p.held = mistralArray, i+1
		p.st = stSeq
	case c == '{':
		p.form, p.held = mistralObject, i
		p.st = stSeq
	case isNameByte(c):
		p.form, p.obj = mistralNamed, i
		p.st = stMistralName
	default:
		return p.giveUp(out, i)
	}
	return true
}

// mistralName reads name[ARGS]{ or name[CALL_ID]id[ARGS]{ from buf[obj]
// (at most maxHead bytes); an offered name starts the call's stream at
// the arguments' "{".
func (p *Parser) mistralName(out *Output, end bool) bool {
	text := p.buf[p.obj:min(len(p.buf), p.obj+maxHead)]
	i := 0
	for i < len(text) && isNameByte(text[i]) {
		i++
	}
	name, m := text[:i], headYes
	lit := func(s string) {
		switch rest := text[i:]; {
		case m != headYes:
		case strings.HasPrefix(rest, s):
			i += len(s)
		case strings.HasPrefix(s, rest):
			m = headMore
		default:
			m = headNo
		}
	}
	switch rest := text[i:]; {
	case strings.HasPrefix(rest, mistralCallID): // the model's own call ID, replaced by ours
		i += len(mistralCallID)
		for i < len(text) && isNameByte(text[i]) {
			i++
		}
	case rest != "" && strings.HasPrefix(mistralCallID, rest):
		m = headMore
	}
	lit(mistralArgs)
	for m == headYes && i < len(text) && strings.IndexByte(space, text[i]) >= 0 {
		i++
	}
	lit("{")
	switch {
	case m == headYes && p.names[name]:
		p.committed = true
		p.open(out, name, p.obj+i-1)
		return true
	case m == headMore && !end && len(text) < maxHead:
		return false
	}
	return p.giveUp(out, p.obj)
}

// release parses one whole call's JSON text and, when it is a valid call
// to an offered function, releases it. A call is {"name": ...,
// "arguments": {...}} ("parameters" in Llama's words), keys matched
// exactly.
func (p *Parser) release(out *Output, text string) bool {
	var c map[string]json.RawMessage
	var name string
	if json.Unmarshal([]byte(text), &c) != nil || json.Unmarshal(c["name"], &name) != nil || !p.names[name] {
		return false
	}
	args, ok := c["arguments"]
	if !ok {
		args = c["parameters"]
	}
	switch {
	case args == nil || string(args) == "null":
		args = json.RawMessage("{}")
	case args[0] == '{':
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
	out.Calls = append(out.Calls, Delta{Index: i, ID: p.id(i), Name: name}, Delta{Index: i, Arguments: string(args)})
	return true
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

// headMatch is how far text matches a streamable call head.
type headMatch int

const (
	headMore headMatch = iota // text is a proper prefix of a head
	headYes                   // text starts with a head
	headNo                    // text is no head
)

// maxHead bounds the text of a call head: one not complete within it is
// no head (the call is then read whole). It keeps the parser linear in
// the output however long the model writes whitespace inside a head.
const maxHead = 256

// head matches the start of text, after optional whitespace, against a
// streamable call head: {"name": "<offered name>", "arguments": { (or
// "parameters"), whitespace allowed between the tokens, at most maxHead
// bytes. On headYes it returns the name and the offset of the arguments'
// "{". The name must be written plainly (no escapes), as offered names
// are [A-Za-z0-9_-].
func (p *Parser) head(text string) (name string, argsAt int, m headMatch) {
	text = text[:min(len(text), maxHead)]
	name, argsAt, m = p.matchHead(text)
	if m == headMore && len(text) == maxHead {
		return "", 0, headNo
	}
	return name, argsAt, m
}

func (p *Parser) matchHead(text string) (name string, argsAt int, m headMatch) {
	i := 0
	ws := func() {
		for i < len(text) && strings.IndexByte(space, text[i]) >= 0 {
			i++
		}
	}
	lit := func(alts ...string) headMatch {
		m := headNo
		for _, s := range alts {
			n := min(len(s), len(text)-i)
			switch {
			case text[i:i+n] != s[:n]:
			case n == len(s):
				i += n
				return headYes
			default:
				m = headMore
			}
		}
		return m
	}
	for _, tok := range []string{"{", `"name"`, ":", `"`} {
		ws()
		if m := lit(tok); m != headYes {
			return "", 0, m
		}
	}
	from := i
	for i < len(text) && isNameByte(text[i]) {
		i++
	}
	name = text[from:i]
	if m := lit(`"`); m != headYes {
		return "", 0, m
	}
	if !p.names[name] {
		return "", 0, headNo
	}
	for _, alts := range [][]string{{","}, {`"arguments"`, `"parameters"`}, {":"}, {"{"}} {
		ws()
		if m := lit(alts...); m != headYes {
			return "", 0, m
		}
	}
	return name, i - 1, headYes
}

func isNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
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

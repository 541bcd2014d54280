package tokenizer

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/ardanlabs/jinja"
)

// chatTemplate is a chat template compiled twice: plain renders the string
// Hugging Face renders; marked renders the same with each special token the
// template writes replaced by a marker, so that the tokenizer knows which
// special-token text came from the template and which from the request.
type chatTemplate struct {
	plain, marked *jinja.Template
	prefix        string               // markOpen + secret nonce + "."
	specials      map[int32]addedToken // by id: the tokens markers stand for
}

// A marker is markOpen, a per-template secret random number, ".", the token
// id and markClose. Noncharacters, so that no real text contains them by
// accident; the secret makes sure no request can forge one.
const (
	markOpen  = "\uFDD0"
	markClose = "\uFDD1"
)

// The template source is rewritten where the engine differs from Python:
//   - the tojson and trim filters call Python-exact versions passed in as
//     variables (the engine's tojson sorts keys and formats numbers the Go
//     way when indenting; its trim keeps U+001C-U+001F, which Python strips);
//   - str.strip(), lstrip() and rstrip() without arguments get Python's
//     white space as their argument (the engine's lstrip/rstrip strip only
//     space, tab, CR and LF).
const filterPrefix = "__warden_"

var (
	overriddenFilter = regexp.MustCompile(`\|(\s*)(tojson|trim|length|count)\b`)
	bareStrip        = regexp.MustCompile(`\.(strip|lstrip|rstrip)\(\s*\)`)
)

// compileChatTemplate compiles src as it is (filters made Python-exact) and
// with specials' literals replaced by markers under a fresh secret.
func compileChatTemplate(src string, specials []addedToken) (*chatTemplate, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("tokenizer: chat template marker: %w", err)
	}
	ct := &chatTemplate{
		prefix: markOpen + strconv.FormatUint(binary.LittleEndian.Uint64(b[:8]), 10) +
			strconv.FormatUint(binary.LittleEndian.Uint64(b[8:]), 10) + ".",
		specials: make(map[int32]addedToken, len(specials)),
	}
	var markable []addedToken
	for _, tok := range specials {
		ct.specials[tok.id] = tok
		// A token whose text could be template syntax is not replaced in
		// the source; it then renders as plain text (safe, documented).
		if !strings.ContainsAny(tok.content, "{}%#'\"\\") {
			markable = append(markable, tok)
		}
	}
	var err error
	if ct.plain, err = compileTemplate(rewriteTemplate(src, nil)); err != nil {
		return nil, err
	}
	mark := func(s string) string { return s }
	if len(markable) > 0 {
		tr := newTrie(markable)
		mark = func(s string) string { return ct.markText(tr, s) }
	}
	if ct.marked, err = compileTemplate(rewriteTemplate(src, mark)); err != nil {
		return nil, err
	}
	return ct, nil
}

func (ct *chatTemplate) marker(id int32) string {
	return ct.prefix + strconv.Itoa(int(id)) + markClose
}

// markText replaces the special tokens in s (leftmost-longest) by markers.
func (ct *chatTemplate) markText(tr *trie, s string) string {
	var out strings.Builder
	done := 0
	for i := 0; i < len(s); {
		if !tr.first[s[i]] {
			i++
			continue
		}
		end, k := tr.longestAt(s, i)
		if k < 0 {
			i++
			continue
		}
		out.WriteString(s[done:i])
		out.WriteString(ct.marker(tr.toks[k].id))
		done, i = end, end
	}
	out.WriteString(s[done:])
	return out.String()
}

// rewriteTemplate renames the overridden filters in src's tags and, when
// mark is not nil, applies mark to its text and to its string literals. It
// splits the source the way the engine's scanner does.
func rewriteTemplate(src string, mark func(string) string) string {
	if mark == nil {
		mark = func(s string) string { return s }
	}
	var out strings.Builder
	for len(src) > 0 {
		open := tagStart(src)
		if open < 0 {
			out.WriteString(mark(src))
			break
		}
		out.WriteString(mark(src[:open]))
		closer := map[byte]string{'{': "}}", '%': "%}", '#': "#}"}[src[open+1]]
		src = src[open:]
		if closer == "#}" { // a comment: copied as it is
			end := strings.Index(src[2:], closer)
			if end < 0 {
				out.WriteString(src)
				break
			}
			out.WriteString(src[:2+end+2])
			src = src[2+end+2:]
			continue
		}
		out.WriteString(src[:2])
		src = rewriteTag(&out, src[2:], closer, mark)
	}
	return out.String()
}

// tagStart returns the index of the first "{{", "{%" or "{#" in s, or -1.
func tagStart(s string) int {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '{' && strings.IndexByte("{%#", s[i+1]) >= 0 {
			return i
		}
	}
	return -1
}

// rewriteTag copies one tag's body, its expressions checked (checkTag),
// and its closer from src to out and returns what follows.
func rewriteTag(out *strings.Builder, src, closer string, mark func(string) string) string {
	end := len(src)
	for i := 0; i < len(src); i++ {
		if c := src[i]; c == '\'' || c == '"' {
			i = stringEnd(src, i) - 1
		} else if strings.HasPrefix(src[i:], closer) {
			end = i
			break
		}
	}
	body, rest := src[:end], src[min(end+len(closer), len(src)):]
	// Whitespace control: "-" after the opener, "-" before the closer.
	open, shut := "", ""
	if strings.HasPrefix(body, "-") {
		open, body = "-", body[1:]
	}
	if strings.HasSuffix(body, "-") && end < len(src) {
		body, shut = body[:len(body)-1], "-"
	}
	body = open + checkTag(body, closer == "}}") + shut

	code := 0 // body[code:i] is code not yet written
	flush := func(end int) {
		c := overriddenFilter.ReplaceAllString(body[code:end], "|${1}"+filterPrefix+"${2}")
		out.WriteString(bareStrip.ReplaceAllString(c, ".${1}("+pySpaceVar+")"))
	}
	for i := 0; i < len(body); {
		c := body[i]
		if c != '\'' && c != '"' {
			i++
			continue
		}
		flush(i + 1)
		j := i + 1
		for j < len(body) && body[j] != c {
			if body[j] == '\\' && j+1 < len(body) {
				j++
			}
			j++
		}
		out.WriteString(mark(body[i+1 : j]))
		code, i = j, j
		if j < len(body) { // the closing quote is code
			i++
		}
	}
	flush(len(body))
	if end < len(src) {
		out.WriteString(closer)
	}
	return rest
}

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

func renderTemplate(tmpl *jinja.Template, data map[string]jinja.Value) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("%w: render panicked: %v", ErrChatTemplate, r)
		}
	}()
	out, err = tmpl.RenderValues(data)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrChatTemplate, err)
	}
	return out, nil
}

// rendered is a render of the marked template: text with markers cut out.
type rendered struct {
	text  string  // the rendered string, markers replaced by their tokens
	cuts  []int   // byte offsets in text: [start, end) of each marker's token
	marks []int32 // the token of each marker
}

// renderChat renders msgs with both templates and checks that they agree.
func (t *Tokenizer) renderChat(msgs []Message, opts ChatOptions) (*rendered, error) {
	ct := t.chat
	data, err := chatData(msgs, opts)
	if err != nil {
		return nil, err
	}
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	addFilters(data, now)
	addChecks(data)

	setTok := func(name, s string, marked bool) {
		if s == "" {
			return
		}
		if id, ok := t.added[s]; ok && marked && t.IsSpecial(id) {
			s = ct.marker(id)
		}
		data[name] = jinja.NewString(s)
	}
	setTok("bos_token", t.bosToken, false)
	setTok("eos_token", t.eosToken, false)
	plain, err := renderTemplate(ct.plain, data)
	if err != nil {
		return nil, err
	}
	setTok("bos_token", t.bosToken, true)
	setTok("eos_token", t.eosToken, true)
	marked, err := renderTemplate(ct.marked, data)
	if err != nil {
		return nil, ct.unmarkError(err)
	}
	r, err := ct.unmark(marked)
	if err != nil {
		return nil, err
	}
	if r.text != plain {
		return nil, fmt.Errorf("%w: the template uses special-token text other than by writing it out, "+
			"so which special tokens it wrote cannot be told apart from the request's text", ErrChatTemplate)
	}
	return r, nil
}

// unmarkError puts the tokens back in an error from the marked template (a
// raise_exception message may quote a literal), so that markers never leave
// the process.
func (ct *chatTemplate) unmarkError(err error) error {
	msg := err.Error()
	if !strings.Contains(msg, ct.prefix) {
		return err
	}
	if r, uerr := ct.unmark(msg); uerr == nil {
		msg = r.text
	} else {
		msg = strings.ReplaceAll(msg, ct.prefix, "")
	}
	return fmt.Errorf("%w: %s", ErrChatTemplate, strings.TrimPrefix(msg, ErrChatTemplate.Error()+": "))
}

// unmark replaces the markers in s by their tokens' text.
func (ct *chatTemplate) unmark(s string) (*rendered, error) {
	r := &rendered{}
	var text strings.Builder
	text.Grow(len(s))
	for {
		i := strings.Index(s, ct.prefix)
		if i < 0 {
			break
		}
		text.WriteString(s[:i])
		rest := s[i+len(ct.prefix):]
		j := strings.Index(rest, markClose)
		var id int
		var err error
		if j >= 0 {
			id, err = strconv.Atoi(rest[:j])
		}
		tok, ok := ct.specials[int32(id)]
		if j < 0 || err != nil || !ok {
			return nil, fmt.Errorf("%w: the template altered a special-token literal", ErrChatTemplate)
		}
		r.cuts = append(r.cuts, text.Len())
		text.WriteString(tok.content)
		r.cuts = append(r.cuts, text.Len())
		r.marks = append(r.marks, tok.id)
		s = rest[j+len(markClose):]
	}
	text.WriteString(s)
	r.text = text.String()
	return r, nil
}

// parts cuts the render for encodeParts: each marker's token where the
// template wrote it, all other text plain (special tokens not recognised).
// The token's lstrip, rstrip and single_word options apply to the text
// around it as Hugging Face applies them.
func (r *rendered) parts(t *Tokenizer) []part {
	var parts []part
	prev := 0
	for k, id := range r.marks {
		start, end := r.cuts[2*k], r.cuts[2*k+1]
		tok := t.chat.specials[id]
		before := r.text[prev:start]
		after := r.text[end:]
		if k+1 < len(r.marks) {
			after = r.text[end:r.cuts[2*k+2]]
		}
		if tok.singleWord && (endsWithWordChar(before) || startsWithWordChar(after)) {
			continue // not a token here: stays in the plain text
		}
		if tok.lstrip {
			before = strings.TrimRightFunc(before, unicode.IsSpace)
		}
		parts = append(parts, part{text: before, m: t.plain}, part{text: tok.content, m: t.special})
		prev = end
		if tok.rstrip {
			prev += len(after) - len(strings.TrimLeftFunc(after, unicode.IsSpace))
		}
	}
	return append(parts, part{text: r.text[prev:], m: t.plain})
}

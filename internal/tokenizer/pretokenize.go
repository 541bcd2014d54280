package tokenizer

import (
	"errors"
	"fmt"
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
)

// regexTimeout bounds one regexp2 match of a pattern we did not recognise
// (the pattern comes from a file and could backtrack catastrophically).
const regexTimeout = 2 * time.Second

// errRegexFailed reports that a fallback Split regex gave up (time or
// backtracking limit), so the text cannot be tokenized.
var errRegexFailed = errors.New("tokenizer: pre-tokenizer regex failed")

// preTokenizer splits normalized text into pre-tokens: a chain of splitters,
// each applied to every piece the previous one produced.
type preTokenizer struct {
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

// each runs the chain on s.
func (p *preTokenizer) each(s string, fn func(piece string) error) error {
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

func classOfSlow(r rune) class {
	switch {
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
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
func llama3Next(s string) int {
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
		for range 2 {
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
	re, err := regexp2.Compile(pattern)
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

package tokenizer

import (
	"fmt"
	"strings"
)

// upgradeUnicodeClasses rewrites the general-category escapes of a Split
// pattern (\p{L}, \p{Nd}, \P{P}, ...) so that regexp2, which classifies
// with Go's older unicode tables, matches the Unicode version of the
// generated tables, as Hugging Face's regex engine does: each escape also
// takes the code points of categoryAdded. \P{..} inside a bracket class
// cannot be widened that way and is left as it is, as are \d, \w and
// patterns with nested brackets (class subtraction).
func upgradeUnicodeClasses(pattern string) string {
	rs := []rune(pattern)
	var b strings.Builder
	inClass := false
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		switch {
		case c == '\\' && i+1 < len(rs):
			next := rs[i+1]
			if (next == 'p' || next == 'P') && i+2 < len(rs) && rs[i+2] == '{' {
				end := i + 3
				for end < len(rs) && rs[end] != '}' {
					end++
				}
				if end == len(rs) {
					return pattern // malformed; let regexp2 say so
				}
				name := string(rs[i+3 : end])
				b.WriteString(upgradeEscape(name, next == 'P', inClass))
				i = end
				continue
			}
			b.WriteRune(c)
			b.WriteRune(next)
			i++
			continue
		case c == '[' && inClass:
			return pattern // nested class: leave the pattern alone
		case c == '[':
			inClass = true
			b.WriteRune(c)
			// A ']' right after '[' or '[^' is a literal.
			if i+1 < len(rs) && rs[i+1] == '^' {
				b.WriteRune('^')
				i++
			}
			if i+1 < len(rs) && rs[i+1] == ']' {
				b.WriteRune(']')
				i++
			}
			continue
		case c == ']' && inClass:
			inClass = false
		}
		b.WriteRune(c)
	}
	return b.String()
}

// upgradeEscape returns the replacement of \p{name} (\P{name} if negated).
func upgradeEscape(name string, negated, inClass bool) string {
	esc := `\p{` + name + `}`
	added := categoryAdded[name]
	switch {
	case len(added) == 0 || negated && inClass:
		if negated {
			return `\P{` + name + `}`
		}
		return esc
	case negated:
		return "[^" + esc + classRanges(added) + "]"
	case inClass:
		return esc + classRanges(added)
	}
	return "[" + esc + classRanges(added) + "]"
}

// classRanges spells ranges for a regexp2 bracket class: BMP code points
// escaped, others literal (regexp2 reads the pattern as runes).
func classRanges(ranges [][2]rune) string {
	var b strings.Builder
	one := func(r rune) {
		if r <= 0xFFFF {
			fmt.Fprintf(&b, `\u%04X`, r)
		} else {
			b.WriteRune(r)
		}
	}
	for _, r := range ranges {
		one(r[0])
		if r[1] > r[0] {
			b.WriteByte('-')
			one(r[1])
		}
	}
	return b.String()
}

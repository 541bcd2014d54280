package streamtext

import (
	"strings"
	"unicode/utf8"
)

// PartialSuffix returns the length of the longest suffix of text that is
// a proper, non-empty prefix of tag. Such a suffix starts with tag's
// first byte, never a UTF-8 continuation byte, so cutting there keeps
// both parts valid UTF-8.
func PartialSuffix(text, tag string) int {
	if tag == "" {
		return 0
	}
	start := max(len(text)-(len(tag)-1), 0)
	for i := start; i < len(text); i++ {
		j := strings.IndexByte(text[i:], tag[0])
		if j < 0 {
			return 0
		}
		i += j
		if strings.HasPrefix(tag, text[i:]) {
			return len(text) - i
		}
	}
	return 0
}

// PartialRune returns the length of an incomplete UTF-8 sequence at the
// end of s (0 when s ends on a character boundary).
func PartialRune(s string) int {
	for n := 1; n <= min(utf8.UTFMax-1, len(s)); n++ {
		if c := s[len(s)-n]; utf8.RuneStart(c) {
			if c >= utf8.RuneSelf && !utf8.FullRuneInString(s[len(s)-n:]) {
				return n
			}
			return 0
		}
	}
	return 0
}

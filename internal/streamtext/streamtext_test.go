package streamtext

import "testing"

func TestPartialSuffix(t *testing.T) {
	for _, tc := range []struct {
		text, tag string
		want      int
	}{
		{"abc <tool_c", "<tool_call>", 7}, {"abc <tool_call>", "<tool_call>", 0}, {"abc", "<x>", 0},
		{"a <<", "<<x", 2}, {"ü<", "<think>", 1}, {"", "<x>", 0}, {"x", "", 0}, {"</thi", "</think>", 5},
	} {
		if got := PartialSuffix(tc.text, tc.tag); got != tc.want {
			t.Errorf("PartialSuffix(%q, %q) = %d, want %d", tc.text, tc.tag, got, tc.want)
		}
	}
}

func TestPartialRune(t *testing.T) {
	for s, want := range map[string]int{"": 0, "a": 0, "ü": 0, "a\xc3": 1, "\xf0\x9f\x8c": 3, "\xf0\x9f": 2, "🌍": 0, "a\xbc": 0} {
		if got := PartialRune(s); got != want {
			t.Errorf("PartialRune(%q) = %d, want %d", s, got, want)
		}
	}
}

package tokenizer

import (
	"reflect"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// trickyStrings exercise the corners of the split patterns.
var trickyStrings = []string{
	"", " ", "  ", "a", "Hello world", "Hello  world", "Hello   world  ",
	"  leading", "trailing   ", "\n", "\r\n", "a\r\nb", "a\n\n\nb", "a \n b", " \n\n  x",
	"x   \n", "  \t  ", "\t\tx", "a\t\tb", "\t\n \t x", "tab\tsep\tvalues\t",
	"it's I'm we're they've he'll she'd don't", "IT'S I'M WE'RE THEY'VE HE'LL SHE'D",
	"x'ſ a'S b'LL c'Re 'd'D", "''s '''t", "'hello", " 'hello", "'", "' s", "'12",
	"1", "12", "123", "1234", "12345", "123456", "1234567", "a1234567b", " 42", "x 9999",
	"3.14159 1,000,000 1e-6", "٣٤٥٦٧ ²³ ½ Ⅻ", "$19.99 07:45 v1.2.3 192.168.0.1",
	"emoji 👍🏽 🎉🚀 ✅❤️ 👨‍👩‍👧", " 👍", "今天天气很好，我们去公园散步。", "東京の朝は早い", "서울의 밤",
	"Привет, мир!", "مرحبا بالعالم", "नमस्ते दुनिया", "Ἀθῆναι",
	"e\u0301 a\u0308\u0301 x\u20dd \u0301", "abcАБВ中文123!?", "func main() {\n\tfmt.Println(\"hi\")\n}\n",
	"a  \u00a0b", "\u00a0\u00a0x", "\u3000x", "a\u2028b\u2029c", "a\u200bb", "\x00\x01\x7f\x1c\x1d\u0085",
	"!!! ??? ... ---", " !!!\n\n", "a!\r\n\r\nb", "?\n", " ?\r\n\n x", "<|eot_id|>", "__init__ self.x_y",
	"ALLCAPS lowercase MiXeD", "   \n", "\n   ", "x\r", "\r\rx", " \r \n x", "a \u00a0\n b",
}

// splitWith returns the pieces of s under sp.
func splitWith(t testing.TB, sp splitter, s string) []string {
	t.Helper()
	var out []string
	if err := sp.each(s, func(p string) error {
		out = append(out, p)
		return nil
	}); err != nil {
		t.Fatalf("split %q: %v", s, err)
	}
	return out
}

func mustRegexSplitter(t testing.TB, pattern string) *regexSplitter {
	t.Helper()
	rs, err := newRegexSplitter(pattern)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestScannersMatchRegexp2 runs each hand-written scanner and regexp2 with
// the very same pattern string over the tricky strings.
func TestScannersMatchRegexp2(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pattern string
		scan    scanSplitter
	}{
		{"gpt2", gpt2Pattern, gpt2Next},
		{"llama3", llama3Pattern, llama3Next},
		{"qwen2", qwen2Pattern, qwen2Next},
	} {
		t.Run(tc.name, func(t *testing.T) {
			re := mustRegexSplitter(t, tc.pattern)
			for _, s := range trickyStrings {
				got, want := splitWith(t, tc.scan, s), splitWith(t, re, s)
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%q:\n scanner %q\n regexp2 %q", s, got, want)
				}
			}
		})
	}
}

// TestScannerSplits states expected splits outright.
func TestScannerSplits(t *testing.T) {
	for _, tc := range []struct {
		scan scanSplitter
		in   string
		want []string
	}{
		{gpt2Next, "Hello  world", []string{"Hello", " ", " world"}},
		{gpt2Next, "it's 12345", []string{"it", "'s", " 12345"}},
		{gpt2Next, "IT'S", []string{"IT", "'", "S"}}, // GPT-2 is case-sensitive
		{gpt2Next, "x  \n", []string{"x", "  \n"}},
		{gpt2Next, "a\t\tb", []string{"a", "\t", "\t", "b"}},       // a tab cannot lead a word
		{llama3Next, "IT'S ſ'ſ", []string{"IT", "'S", " ſ", "'ſ"}}, // (?i:) folds ſ to s
		{llama3Next, "1234567", []string{"123", "456", "7"}},
		{llama3Next, "a\n\n  b", []string{"a", "\n\n", " ", " b"}},
		{llama3Next, "  \t\r\n  end  ", []string{"  \t\r\n", " ", " end", "  "}},
		{llama3Next, "hi!!\n\nyo", []string{"hi", "!!\n\n", "yo"}},
		{llama3Next, "\thello", []string{"\thello"}},
		{llama3Next, "\nhello", []string{"\n", "hello"}},
		{llama3Next, "x 👍🏽!", []string{"x", " 👍🏽!"}},
	} {
		got := splitWith(t, tc.scan, tc.in)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzScanners compares the scanners with regexp2 on arbitrary valid UTF-8.
func FuzzScanners(f *testing.F) {
	for _, s := range trickyStrings {
		f.Add(s)
	}
	gpt2Re := mustRegexSplitter(f, gpt2Pattern)
	llamaRe := mustRegexSplitter(f, llama3Pattern)
	qwenRe := mustRegexSplitter(f, qwen2Pattern)
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		if got, want := splitWith(t, scanSplitter(qwen2Next), s), splitWith(t, qwenRe, s); !reflect.DeepEqual(got, want) {
			t.Errorf("qwen2 %q:\n scanner %q\n regexp2 %q", s, got, want)
		}
		if got, want := splitWith(t, scanSplitter(gpt2Next), s), splitWith(t, gpt2Re, s); !reflect.DeepEqual(got, want) {
			t.Errorf("gpt2 %q:\n scanner %q\n regexp2 %q", s, got, want)
		}
		if got, want := splitWith(t, scanSplitter(llama3Next), s), splitWith(t, llamaRe, s); !reflect.DeepEqual(got, want) {
			t.Errorf("llama3 %q:\n scanner %q\n regexp2 %q", s, got, want)
		}
		if got := strings.Join(splitWith(t, scanSplitter(llama3Next), s), ""); got != s {
			t.Errorf("pieces of %q concatenate to %q", s, got)
		}
	})
}

// TestUnicode16Classes checks letters and digits newer than Go's tables,
// classed as Hugging Face tokenizers does (tested with 0.23.2): Unicode
// 16.0, nothing from 17.0.
func TestUnicode16Classes(t *testing.T) {
	for r, want := range map[rune]class{
		0x2EBF0:  clsLetter, // CJK Ext. I (15.1)
		0x18CFF:  clsLetter, // Khitan small script (16.0)
		0x16D40:  clsLetter, // Kirat Rai (16.0)
		0x10D41:  clsNumber, // Garay digit (16.0)
		0x1CCF0:  clsNumber, // outlined digit (16.0)
		0x323B0:  clsOther,  // CJK Ext. J (17.0)
		0x10940:  clsOther,  // Sidetic (17.0)
		'a':      clsLetter,
		'7':      clsNumber,
		'\u3000': clsSpace,
	} {
		if got := classOfSlow(r); got != want {
			t.Errorf("%U: class %d, want %d", r, got, want)
		}
	}
	// The scanner and the regexp2 fallback (its pattern upgraded) agree.
	s := "a\U0002EBF0b 12\U00010D41\U0001CCF05"
	want := []string{"a\U0002EBF0b", " ", "12\U00010D41", "\U0001CCF05"}
	if got := splitWith(t, scanSplitter(llama3Next), s); !reflect.DeepEqual(got, want) {
		t.Errorf("llama3 scanner split %q", got)
	}
	if got := splitWith(t, mustRegexSplitter(t, llama3Pattern), s); !reflect.DeepEqual(got, want) {
		t.Errorf("llama3 regexp2 split %q", got)
	}
	if goUnicodeVersion != unicode.Version {
		t.Errorf("unicode_tables.go was generated against Go's Unicode %s, this Go has %s: run go generate",
			goUnicodeVersion, unicode.Version)
	}
}

func TestUpgradeUnicodeClasses(t *testing.T) {
	// What the first match is, in a text with Unicode 16 letters and digits.
	for pattern, want := range map[string]string{
		`\p{Nd}+`:         "1\U00010D41",
		`[^\s\p{N}]+`:     "x\U00018CFF",
		`\P{Nd}+`:         "x\U00018CFF",
		`[\]\p{L}]+`:      "x\U00018CFF",
		`[]\p{Lo}x]+`:     "x\U00018CFF",
		`\p{L}\p{Nd}`:     "\U00018CFF1",
		`(?i:\p{Lo}+)\d*`: "\U00018CFF1", // \d is not upgraded
	} {
		re := mustRegexSplitter(t, pattern)
		m, err := re.re.FindStringMatch("x\U00018CFF1\U00010D41 ")
		if err != nil || m == nil {
			t.Errorf("%s: no match (%v)", pattern, err)
			continue
		}
		if m.String() != want {
			t.Errorf("%s: matched %+q, want %+q", pattern, m.String(), want)
		}
	}
	// Left as they are: nothing to add, \P inside a class, nested classes.
	for _, p := range []string{`\p{Zs}+`, `[^\P{L}]`, `[a-z-[aeiou]]\p{L}`, `\p{L`} {
		if got := upgradeUnicodeClasses(p); got != p {
			t.Errorf("%s became %s", p, got)
		}
	}
}

func TestRegexSplitterKeepsGaps(t *testing.T) {
	// Text the pattern does not match stays, as its own pieces (Isolated).
	got := splitWith(t, mustRegexSplitter(t, `\d+`), "ab12cd345")
	want := []string{"ab", "12", "cd", "345"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	// Empty matches produce no pieces.
	got = splitWith(t, mustRegexSplitter(t, `x*`), "abxxc")
	want = []string{"a", "b", "xx", "c"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// FuzzUpgradeUnicodeClasses: the rewrite of an untrusted pattern never
// panics, and a pattern regexp2 compiles still compiles after it.
func FuzzUpgradeUnicodeClasses(f *testing.F) {
	for _, p := range []string{llama3Pattern, gpt2Pattern, qwen2Pattern, `[^\P{L}]`, `[]\p{N}]`, `\p{`, `[a-[b]]`, `\\p{L}`} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, pattern string) {
		up := upgradeUnicodeClasses(pattern)
		if _, err := regexp2.Compile(pattern); err != nil {
			return
		}
		if _, err := regexp2.Compile(up); err != nil {
			t.Fatalf("%q compiles, its upgrade %q does not: %v", pattern, up, err)
		}
	})
}

package tokenizer

import (
	"math/rand/v2"
	"strings"
	"unicode/utf8"
)

// The conformance corpus: deterministic strings that exercise what differs
// between tokenizer implementations — prose in many scripts, code,
// whitespace runs, emoji, combining marks, text that NFC changes, random
// strings on the boundaries between the split patterns' character classes
// (including letters and digits newer than Go's Unicode tables), and
// special-token text inside content.

var (
	corpusWords = strings.Fields(`the of and to in is was he for it with as his on be at by I
		this had not are but from or have an they which one you were her all she there would their we
		him been has when who will more no if out so said what up its about into than them can only
		other new some could time these two may then do first any my now such like our over man me
		even most made after also did many before must through back years where much your way well
		down should because each just those people Mr how too little state good very make world still
		own see men work long get here between both life being under never day same another know
		while last might us great old year off come since against go came right used take three
		tokenizer gateway tenant inference latency throughput Hello World OpenAI JSON HTTP API
		café naïve résumé façade Zürich straße Ærøskøbing Łódź İstanbul ÉCOLE Œuvre`)
	corpusForeign = []string{
		"Привет, как дела? Всё хорошо.", "Ελληνικά: Καλημέρα κόσμε", "مرحبا بالعالم، كيف حالك؟",
		"שלום עולם! מה שלומך?", "नमस्ते दुनिया, आप कैसे हैं?", "今天天气很好，我们去公园散步吧。",
		"東京の朝は早い。カタカナとひらがな", "서울의 밤은 아름답습니다", "สวัสดีชาวโลก ภาษาไทย",
		"Tiếng Việt có dấu: Xin chào thế giới", "ქართული ენა", "Հայերեն լեզու", "ᎠᏍᎦᏯ ᏣᎳᎩ",
		"Ἀθῆναι ἐστὶ πόλις", "Zażółć gęślą jaźń", "Ďakujem pekne", "ሰላም ለዓለም", "ᠮᠣᠩᠭᠣᠯ",
		"தமிழ் மொழி", "ಕನ್ನಡ ಭಾಷೆ", "ગુજરાતી", "ਪੰਜਾਬੀ", "বাংলা ভাষা", "සිංහල", "မြန်မာဘာသာ",
		"ພາສາລາວ", "ភាសាខ្មែរ", "བོད་ཡིག", "ꦧꦱꦗꦮ", "𐌰𐌽𐍃𐌹 Gothic", "𓀀𓀁𓀂 hieroglyphs",
	}
	corpusCode = []string{
		"func main() {\n\tfmt.Println(\"hi\")\n}\n", "def f(x):\n    return x ** 2  # square\n",
		"for (int i = 0; i < n; ++i) { a[i] += b[i]; }", "SELECT * FROM t WHERE id = 42;",
		"{\"key\": [1, 2.5, -3e10, null, true], \"s\": \"\\u00e9\\n\"}", "#include <stdio.h>\n",
		"x := map[string]int{\"a\": 1}\n\tif err != nil {\n\t\treturn err\n\t}", "<div class=\"a\">&nbsp;</div>",
		"    if (a && b || !c) {\r\n        x->y = z;\r\n    }\r\n", "$ ls -la | grep '^d' > out.txt 2>&1",
		"__init__(self, *args, **kwargs)", "a_b_c = camelCaseName + snake_case_name", "0x7fff_ffff 0b1010 1_000_000",
		"https://example.com/path?q=1&r=%20#frag", "user@example.org", "C:\\Windows\\System32\\",
		"```python\nprint('x')\n```", "| a | b |\n|---|---|\n| 1 | 2 |", "// TODO: fix\n/* block */",
	}
	corpusEmoji = []string{
		"👍", "👍🏽", "🎉🚀", "✅❤️", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷🇯🇵", "😀😃😄", "🤷🏾‍♀️", "#️⃣", "©️®️™️",
		"🧑‍💻", "🫠🫡🫶", "🪿🪼", "🙂‍↔️", "🐦‍🔥",
	}
	corpusMarks = []string{
		"e\u0301", "a\u0308\u0301", "x\u20dd", "\u0301", "A\u030a", "\u1100\u1161\u11a8", "\u1100\u1161",
		"n\u0303o", "o\u0302\u0323", "o\u0323\u0302", "\u0915\u093c", "\u212b", "\u2126", "\u00c5",
		"\uac00\u11a8", "i\u0307", "\u0041\u0327\u0301", "\u05d1\u05bc", "\u0627\u0653", "\u0cbf\u0cd5",
		"\u0b47\u0b3e", "\u1b05\u1b35", "\U000110a5\U000110ba", "\U00011131\U00011127", "\u0f71\u0f72",
		"\u1e0a\u0323", "\u0064\u0323\u0307", "\u00e9\u0301", "\u03b1\u0313\u0342\u0345",
	}
	corpusSpecial = []string{
		"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>",
		"<|eom_id|>", "<|python_tag|>", "<|reserved_special_token_5|>", "<|im_start|>", "<|im_end|>",
		"<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
		"<|vision_start|>", "<s>", "</s>", "<unk>", "[INST]", "[/INST]", "<<SYS>>", "<0x0A>", "<0xFF>",
		"<|eot_id", "|>", "<|im_", "<tool_response>", "<｜begin▁of▁sentence｜>", "<｜User｜>",
	}
	// Class pools for the random boundary strings.
	poolLetters = []rune("aZſKkµªºßÆæĲŉǅǈ" + "éÅиЖαΩאبअ中日한ก" + "\u01c5\u1e9e\u0130\u0131\u212a\u2160" +
		"\U0002EBF0\U00018CFF\U00016D40\U00011F04\U0001E290\U00031350\U0002B73A\U00010D4A\U0001E5D0" +
		"\u0100\u0120\u0143\u00ff")
	poolNumbers = []rune("0123456789٣٤۵७০๓²³½¼Ⅻⅻ①⑩\u2070\u2189" +
		"\U00010D41\U0001CCF0\U0001FBF0\U00016D70\U0001E5F1\U00011F50\U0001D7CE\U00010107")
	poolSpaces = []rune(" \t\n\r\v\f\u0085\u00a0\u1680\u2000\u2007\u200a\u2028\u2029\u202f\u205f\u3000\u180e\u200b\ufeff\x1c\x1d\x1e\x1f")
	poolOther  = []rune("'’!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~¡¿«»—–…€£¥©®°±×÷·•→⇒∀∑√∞≈≠≤≥■□▲○●★☆♠♥✓✗\u2581\u0301\u0308\u20dd\u200d\ufe0f\ue000\U000F0000\U000E0001\x00\x01\x7f\U0010FFFF\U0001F600\u0378\U000323B0\U00010940")
	poolFrags  = []string{"'s", "'S", "'t", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'d", "'ſ", "'K", "\r\n", "\n\n", "  ", "   ", "\t\t", "▁▁", "<0x0A>", "<|", "|>", "<s>"}
)

// conformanceCorpus returns n strings; the same n gives the same strings.
func conformanceCorpus(n int) []string {
	r := rand.New(rand.NewPCG(12, 2026))
	out := make([]string, 0, n)
	kinds := []func(*rand.Rand) string{
		corpusProse, corpusProse, corpusForeignText, corpusCodeText, corpusWhitespace,
		corpusEmojiText, corpusMarkText, corpusBoundary, corpusBoundary, corpusBoundary,
		corpusSpecialText, corpusRandomRunes,
	}
	for len(out) < n {
		s := kinds[len(out)%len(kinds)](r)
		if !utf8.ValidString(s) {
			panic("corpus string is not valid UTF-8")
		}
		out = append(out, s)
	}
	return out
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

func corpusProse(r *rand.Rand) string {
	var b strings.Builder
	for range 1 + r.IntN(3) {
		for i := range 3 + r.IntN(15) {
			w := pick(r, corpusWords)
			switch {
			case i == 0:
				_, n := utf8.DecodeRuneInString(w)
				w = strings.ToUpper(w[:n]) + w[n:]
			case r.IntN(12) == 0:
				w = strings.ToUpper(w)
			case r.IntN(10) == 0:
				w = pick(r, []string{"don't", "I'm", "we're", "they've", "he'll", "she'd", "it's", "O'Neil", "IT'S"})
			case r.IntN(10) == 0:
				w = pick(r, []string{"42", "3.14", "1,000,000", "2026", "12345678", "$19.99", "v1.2.3", "07:45"})
			}
			if i > 0 {
				b.WriteString(pick(r, []string{" ", " ", " ", " ", ", ", "  ", " - ", " (", ") "}))
			}
			b.WriteString(w)
		}
		b.WriteString(pick(r, []string{". ", "! ", "? ", ".\n", ".\n\n", "...", ";", ":\n"}))
	}
	return b.String()
}

func corpusForeignText(r *rand.Rand) string {
	s := pick(r, corpusForeign)
	if r.IntN(2) == 0 {
		s += pick(r, []string{" ", "\n", " 123 ", " and ", "，"}) + pick(r, corpusForeign)
	}
	return s
}

func corpusCodeText(r *rand.Rand) string {
	s := pick(r, corpusCode)
	if r.IntN(3) == 0 {
		s = strings.Repeat(pick(r, []string{"\t", "    ", "  "}), 1+r.IntN(3)) + s
	}
	return s
}

func corpusWhitespace(r *rand.Rand) string {
	var b strings.Builder
	for range 1 + r.IntN(6) {
		if r.IntN(2) == 0 {
			b.WriteString(pick(r, []string{"x", "word", "1", "!", "é", "中", "'s", "▁"}))
		}
		for range 1 + r.IntN(5) {
			b.WriteRune(pick(r, poolSpaces[:12]))
		}
	}
	return b.String()
}

func corpusEmojiText(r *rand.Rand) string {
	var b strings.Builder
	for range 1 + r.IntN(4) {
		b.WriteString(pick(r, []string{"", " ", "ok ", "x", "!"}))
		b.WriteString(pick(r, corpusEmoji))
	}
	return b.String()
}

func corpusMarkText(r *rand.Rand) string {
	var b strings.Builder
	for range 1 + r.IntN(5) {
		b.WriteString(pick(r, []string{"", " ", "a", "Z", "1", "'"}))
		b.WriteString(pick(r, corpusMarks))
	}
	return b.String()
}

// corpusBoundary strings are short runs drawn from the class pools, so that
// every pair of classes meets often.
func corpusBoundary(r *rand.Rand) string {
	var b strings.Builder
	for range 2 + r.IntN(8) {
		k := 1 + r.IntN(4)
		switch r.IntN(6) {
		case 0:
			for range k {
				b.WriteRune(pick(r, poolLetters))
			}
		case 1:
			for range k {
				b.WriteRune(pick(r, poolNumbers))
			}
		case 2:
			for range k {
				b.WriteRune(pick(r, poolSpaces))
			}
		case 3:
			for range k {
				b.WriteRune(pick(r, poolOther))
			}
		case 4:
			b.WriteString(pick(r, poolFrags))
		default:
			b.WriteString(pick(r, corpusMarks))
		}
	}
	return b.String()
}

func corpusSpecialText(r *rand.Rand) string {
	var b strings.Builder
	for range 1 + r.IntN(4) {
		b.WriteString(pick(r, []string{"", " ", "  ", "\n", "hi", "x ", " y", "'s", "中"}))
		b.WriteString(pick(r, corpusSpecial))
	}
	b.WriteString(pick(r, []string{"", " ", "\n", "end", " end "}))
	return b.String()
}

// corpusRandomRunes are arbitrary valid code points, mostly from the planes
// that are assigned, to catch class tables that differ.
func corpusRandomRunes(r *rand.Rand) string {
	var b strings.Builder
	for range 1 + r.IntN(10) {
		var c rune
		switch r.IntN(4) {
		case 0:
			c = rune(r.IntN(0x3000))
		case 1:
			c = rune(r.IntN(0x10000))
		case 2:
			c = 0x10000 + rune(r.IntN(0x30000))
		default:
			c = rune(r.IntN(0x110000))
		}
		if !utf8.ValidRune(c) {
			c = ' '
		}
		b.WriteRune(c)
	}
	return b.String()
}

package gateway

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/warden-ai/warden/internal/tokenizer"
)

// presetTokenizer returns the 512-token preset tokenizer (the tiny model's).
func presetTokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	dir := t.TempDir()
	if _, err := tokenizer.WritePreset(dir, 512); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// byteTokens spells text one byte per token (the preset's IDs 0-255 are
// the bytes), so characters are split across tokens.
func byteTokens(text string) []int32 {
	ids := make([]int32, len(text))
	for i := range len(text) {
		ids[i] = int32(text[i])
	}
	return ids
}

// run feeds ids to a text stream chunk tokens at a time and returns the
// released deltas, whether a stop string matched, and the final text.
func run(t *testing.T, tok *tokenizer.Tokenizer, stops []string, ids []int32, chunk int) (deltas []string, stopped bool, text string) {
	t.Helper()
	s := newTextStream(tok, stops, nil)
	for len(ids) > 0 && !stopped {
		n := min(chunk, len(ids))
		d, st, err := s.add(ids[:n])
		if err != nil {
			t.Fatal(err)
		}
		ids = ids[n:]
		deltas, stopped = append(deltas, d), st
	}
	if !stopped {
		d, st := s.flush()
		deltas, stopped = append(deltas, d), st
	}
	for _, d := range deltas {
		if !utf8.ValidString(d) {
			t.Fatalf("delta %q is not valid UTF-8", d)
		}
	}
	return deltas, stopped, strings.Join(deltas, "")
}

func TestTextStream(t *testing.T) {
	tok := presetTokenizer(t)
	eos := tok.EOS()[0]
	cases := []struct {
		name    string
		text    string
		extra   []int32 // appended token IDs
		stops   []string
		want    string
		stopped bool
	}{
		{name: "plain", text: "Hello, wörld 🌍!", want: "Hello, wörld 🌍!"},
		{name: "special tokens render as nothing", text: "done", extra: []int32{eos}, want: "done"},
		{name: "stop string cuts", text: "Hello world. END more text", stops: []string{"END"}, want: "Hello world. ", stopped: true},
		{name: "earliest of several stops", text: "abc STOP xyz END", stops: []string{"END", "STOP"}, want: "abc ", stopped: true},
		{name: "stop at the start", text: "ENDING", stops: []string{"END"}, want: "", stopped: true},
		{name: "partial stop released at the end", text: "the EN", stops: []string{"END"}, want: "the EN"},
		{name: "false start then match", text: "EEEND", stops: []string{"EEN"}, want: "E", stopped: true},
		{name: "multi-byte stop", text: "a→b🌍c", stops: []string{"🌍"}, want: "a→b", stopped: true},
		{name: "stop spanning a split character", text: "x é y", stops: []string{"é y"}, want: "x ", stopped: true},
		{name: "incomplete character at the end", text: "ok", extra: []int32{0xE2, 0x82}, want: "ok\uFFFD"},
	}
	for _, c := range cases {
		for _, chunk := range []int{1, 3, 1000} {
			ids := append(byteTokens(c.text), c.extra...)
			deltas, stopped, text := run(t, tok, c.stops, ids, chunk)
			if text != c.want || stopped != c.stopped {
				t.Errorf("%s (chunk %d): got %q (stopped %v), want %q (stopped %v); deltas %q",
					c.name, chunk, text, stopped, c.want, c.stopped, deltas)
			}
		}
	}
}

func TestTextStreamHoldsBackOnlyStopPrefixes(t *testing.T) {
	tok := presetTokenizer(t)
	s := newTextStream(tok, []string{"<END>"}, nil)
	for _, step := range []struct{ in, out string }{
		{"Hello <", "Hello "}, // "<" may start the stop string
		{"E", ""},
		{"x", "<Ex"}, // it did not
		{" <EN", " "},
		{"D", ""},
	} {
		got, stopped, err := s.add(byteTokens(step.in))
		if err != nil || stopped || got != step.out {
			t.Fatalf("add(%q) = %q, %v, %v; want %q", step.in, got, stopped, err, step.out)
		}
	}
	if got, stopped, _ := s.add(byteTokens(">tail")); got != "" || !stopped {
		t.Fatalf("completing the stop string gave %q, %v", got, stopped)
	}
	if got, stopped, _ := s.add(byteTokens("after")); got != "" || !stopped {
		t.Fatalf("text after the stop: %q, %v", got, stopped)
	}
}

func TestTextStreamUnknownToken(t *testing.T) {
	tok := presetTokenizer(t)
	if _, _, err := newTextStream(tok, nil, nil).add([]int32{1 << 20}); err == nil {
		t.Fatal("an unknown token ID was accepted")
	}
}

// FuzzTextStream checks, for any byte sequence (token IDs from a worker)
// and stop string, that released text is valid UTF-8, holds no stop
// string, and, when nothing stopped, equals the whole decoded text.
func FuzzTextStream(f *testing.F) {
	tok := presetTokenizer(f)
	f.Add([]byte("Hello world. END more"), "END", uint8(1))
	f.Add([]byte("a\xe2\x82\xacb\xff\xfe"), "\xe2\x82\xac", uint8(2))
	f.Add([]byte("aaaaab"), "aab", uint8(5))
	f.Fuzz(func(t *testing.T, text []byte, stop string, chunk uint8) {
		if stop == "" || !utf8.ValidString(stop) || len(stop) > maxStopBytes {
			return
		}
		ids := byteTokens(string(text))
		s := newTextStream(tok, []string{stop}, nil)
		var out strings.Builder
		stopped := false
		step := int(chunk%7) + 1
		for len(ids) > 0 && !stopped {
			n := min(step, len(ids))
			d, st, err := s.add(ids[:n])
			if err != nil {
				t.Fatal(err)
			}
			if !utf8.ValidString(d) {
				t.Fatalf("invalid UTF-8 delta %q", d)
			}
			out.WriteString(d)
			ids, stopped = ids[n:], st
		}
		if !stopped {
			d, st := s.flush()
			out.WriteString(d)
			stopped = st
		}
		got := out.String()
		if strings.Contains(got, stop) {
			t.Fatalf("released text %q contains the stop string %q", got, stop)
		}
		full := strings.ToValidUTF8(string(text), "\uFFFD")
		if !stopped && got != decodeAll(t, tok, string(text)) {
			t.Fatalf("text %q released as %q (valid form %q)", text, got, full)
		}
	})
}

// decodeAll is the reference: every token through one stream decoder.
func decodeAll(t *testing.T, tok *tokenizer.Tokenizer, text string) string {
	d := tokenizer.NewStreamDecoder(tok)
	var b strings.Builder
	for _, id := range byteTokens(text) {
		s, err := d.Add(id)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(s)
	}
	return b.String() + d.Flush()
}

// TestTextStreamKeepsMarkers: special tokens are dropped from the text
// but those the request's parsers read, which are rendered as their text.
func TestTextStreamKeepsMarkers(t *testing.T) {
	tok := presetTokenizer(t)
	eos := tok.EOS()[0]
	ids := append(byteTokens("a"), eos)
	ids = append(ids, byteTokens("b")...)
	if got, _, _ := newTextStream(tok, nil, nil).add(ids); got != "ab" {
		t.Fatalf("without markers: %q", got)
	}
	piece, err := tok.TokenBytes(eos)
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := newTextStream(tok, nil, map[int32]bool{eos: true}).add(ids); got != "a"+string(piece)+"b" {
		t.Fatalf("with the marker kept: %q", got)
	}
}

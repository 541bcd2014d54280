package tokenizer

import (
	"errors"
	"reflect"
	"testing"
)

func TestDecodeAndTokenBytes(t *testing.T) {
	tk := mustParse(t, helloVocab.json(), nil)
	if got := mustDecode(t, tk, []int32{259, 264, '!'}); got != "hello world!" {
		t.Fatalf("Decode = %q", got)
	}
	if b, err := tk.TokenBytes(264); err != nil || string(b) != " world" {
		t.Fatalf("TokenBytes(264) = %q, %v", b, err)
	}
	for _, id := range []int32{-1, 265, 1 << 30} {
		if _, err := tk.TokenBytes(id); !errors.Is(err, ErrUnknownToken) {
			t.Errorf("TokenBytes(%d) error %v", id, err)
		}
	}
	if _, err := tk.Decode([]int32{259, 999}); !errors.Is(err, ErrUnknownToken) {
		t.Errorf("Decode with unknown id: %v", err)
	}
	// Decode returns raw bytes, even half a character.
	if got := mustDecode(t, tk, []int32{0xE2, 0x82}); got != "\xe2\x82" {
		t.Errorf("partial UTF-8 = %q", got)
	}
}

func TestStreamDecoder(t *testing.T) {
	tk := mustParse(t, helloVocab.json(), nil) // ids 0..255 are the bytes
	bytesOf := func(s string) []int32 {
		ids := make([]int32, len(s))
		for i := range len(s) {
			ids[i] = int32(s[i])
		}
		return ids
	}
	for _, tc := range []struct {
		name  string
		ids   []int32
		outs  []string // per Add
		flush string
	}{
		{"ascii", []int32{259, 264}, []string{"hello", " world"}, ""},
		{"euro held back", bytesOf("a€b"), []string{"a", "", "", "€", "b"}, ""},
		{"emoji held back", bytesOf("👍"), []string{"", "", "", "👍"}, ""},
		{"incomplete at the end", bytesOf("x\xe2\x82"), []string{"x", "", ""}, "\uFFFD"},
		{"invalid byte replaced at once", bytesOf("a\xffb"), []string{"a", "\uFFFD", "b"}, ""},
		{"broken sequence is one U+FFFD", bytesOf("\xe2\x82A"), []string{"", "", "\uFFFDA"}, ""},
		{"stray continuation", bytesOf("\x80\x80"), []string{"\uFFFD", "\uFFFD"}, ""},
		{"surrogate encoding", bytesOf("\xed\xa0\x80"), []string{"", "\uFFFD\uFFFD", "\uFFFD"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := NewStreamDecoder(tk)
			var outs []string
			for _, id := range tc.ids {
				out, err := d.Add(id)
				if err != nil {
					t.Fatal(err)
				}
				outs = append(outs, out)
			}
			if !reflect.DeepEqual(outs, tc.outs) {
				t.Fatalf("outputs %q, want %q", outs, tc.outs)
			}
			if got := d.Flush(); got != tc.flush {
				t.Fatalf("Flush = %q, want %q", got, tc.flush)
			}
			if got := d.Flush(); got != "" {
				t.Fatalf("second Flush = %q", got)
			}
		})
	}
}

func TestStreamDecoderUnknownTokenKeepsState(t *testing.T) {
	tk := mustParse(t, helloVocab.json(), nil)
	d := NewStreamDecoder(tk)
	if out, _ := d.Add(0xE2); out != "" {
		t.Fatalf("got %q", out)
	}
	if _, err := d.Add(12345); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("err %v", err)
	}
	d.Add(0x82)
	if out, _ := d.Add(0xAC); out != "€" {
		t.Fatalf("got %q after an unknown id", out)
	}
}

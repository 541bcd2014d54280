package tokenizer

import (
	"os"
	"strconv"
	"testing"
)

// Encode throughput on the mixed corpus (prose, code, numbers, several
// scripts, emoji). Compare the sub-benchmarks within one run:
//   - cached vs cold: what the per-pre-token cache buys;
//   - pretokenize/scanner vs pretokenize/regexp2: the hand-written scanner
//     against regexp2 running the same Llama 3 pattern.
func BenchmarkEncode(b *testing.B) {
	tk := presetTokenizer(b, 32000)
	b.Run("cached", func(b *testing.B) {
		b.SetBytes(int64(len(corpus)))
		for b.Loop() {
			if _, err := tk.Encode(corpus); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cold", func(b *testing.B) {
		b.SetBytes(int64(len(corpus)))
		for b.Loop() {
			tk.cache = newBPECache()
			if _, err := tk.Encode(corpus); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetBytes(int64(len(corpus)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := tk.Encode(corpus); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	if dir := os.Getenv("WARDEN_TEST_LLAMA3_DIR"); dir != "" {
		real, err := Load(dir)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("llama3", func(b *testing.B) {
			b.SetBytes(int64(len(corpus)))
			for b.Loop() {
				if _, err := real.Encode(corpus); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkPreTokenize(b *testing.B) {
	count := func(b *testing.B, sp splitter) {
		b.SetBytes(int64(len(corpus)))
		for b.Loop() {
			n := 0
			_ = sp.each(corpus, func(string) error { n++; return nil })
		}
	}
	b.Run("scanner", func(b *testing.B) { count(b, scanSplitter(llama3Next)) })
	b.Run("regexp2", func(b *testing.B) { count(b, mustRegexSplitter(b, llama3Pattern)) })
}

func BenchmarkWritePreset(b *testing.B) {
	for _, n := range []int{512, 32000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				if _, err := WritePreset(b.TempDir(), n); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

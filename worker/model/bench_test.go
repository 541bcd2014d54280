package model

import (
	"bufio"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkInitSmall measures generating the small preset's weights
// (tokenizer excluded) against writing the same number of bytes from a
// zeroed buffer through the same atomic-write path, and loading the result.
// Run with: go test -run '^$' -bench InitSmall -benchtime 1x ./worker/model/
func BenchmarkInitSmall(b *testing.B) {
	cfg, err := PresetConfig(PresetSmall)
	if err != nil {
		b.Fatal(err)
	}
	bos := int32(1)
	cfg.BOSTokenID, cfg.EOSTokenIDs = &bos, TokenIDs{2}
	dir := b.TempDir()
	size := cfg.NumParameters() * 4

	b.Run("generate", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			if err := WriteRandom(dir, cfg, 1, F32); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("write-zeros-baseline", func(b *testing.B) {
		b.SetBytes(size)
		buf := make([]byte, 1<<20)
		path := filepath.Join(b.TempDir(), "zeros")
		for b.Loop() {
			err := writeAtomic(path, func(w *bufio.Writer) error {
				for left := size; left > 0; left -= int64(len(buf)) {
					if _, err := w.Write(buf[:min(left, int64(len(buf)))]); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("load", func(b *testing.B) {
		for b.Loop() {
			m, err := Load(dir)
			if err != nil {
				b.Fatal(err)
			}
			m.Close()
		}
	})
	if st, err := os.Stat(filepath.Join(dir, WeightsFile)); err == nil {
		b.Logf("model.safetensors: %d bytes, %d parameters", st.Size(), cfg.NumParameters())
	}
}

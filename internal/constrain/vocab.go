package constrain

import (
	"slices"

	"github.com/warden-ai/warden/internal/tokenizer"
)

// Vocab is a tokenizer's vocabulary as the masks see it: the bytes each
// token stands for, in a trie, and the EOS ids. It is immutable and safe
// for concurrent use.
type Vocab struct {
	size  int
	eos   []int32
	nodes []trieNode // nodes[0] is the root
	toks  []int32    // token ids, grouped by the node they end at
	// bytes[off[id]:off[id+1]] are token id's bytes (empty: never
	// generated).
	bytes []byte
	off   []int32
}

type trieNode struct {
	b            byte
	child, next  int32 // first child, next sibling; 0 is none (the root is no child)
	tokLo, tokHi int32 // toks[tokLo:tokHi] end here
}

// NewVocab indexes a vocabulary of size ids. tokenBytes returns the bytes
// of id, or false for ids that must never be generated inside a
// constrained output (special and control tokens, unused ids). eos lists
// the ids that end a sequence: they are allowed exactly when the output is
// complete.
func NewVocab(size int, tokenBytes func(id int32) ([]byte, bool), eos []int32) *Vocab {
	v := &Vocab{size: size, eos: slices.Clone(eos), off: make([]int32, size+1)}
	type key struct {
		node int32
		b    byte
	}
	children := map[key]int32{}
	type build struct {
		b    byte
		toks []int32
		kids []int32
	}
	nodes := []build{{}}
	for id := int32(0); int(id) < size; id++ {
		b, ok := tokenBytes(id)
		if !ok || len(b) == 0 || slices.Contains(eos, id) {
			v.off[id+1] = int32(len(v.bytes))
			continue
		}
		v.bytes = append(v.bytes, b...)
		v.off[id+1] = int32(len(v.bytes))
		n := int32(0)
		for _, c := range b {
			k := key{n, c}
			next, ok := children[k]
			if !ok {
				next = int32(len(nodes))
				nodes = append(nodes, build{b: c})
				nodes[n].kids = append(nodes[n].kids, next)
				children[k] = next
			}
			n = next
		}
		nodes[n].toks = append(nodes[n].toks, id)
	}
	v.nodes = make([]trieNode, len(nodes))
	for i, bn := range nodes {
		t := &v.nodes[i]
		t.b = bn.b
		t.tokLo = int32(len(v.toks))
		v.toks = append(v.toks, bn.toks...)
		t.tokHi = int32(len(v.toks))
		slices.SortFunc(bn.kids, func(a, b int32) int { return int(nodes[a].b) - int(nodes[b].b) })
		for j, k := range bn.kids {
			if j == 0 {
				t.child = k
			} else {
				v.nodes[bn.kids[j-1]].next = k
			}
		}
	}
	return v
}

// tokenBytes returns the bytes of a generatable token.
func (v *Vocab) tokenBytes(id int32) ([]byte, bool) {
	if id < 0 || int(id) >= v.size || v.off[id] == v.off[id+1] {
		return nil, false
	}
	return v.bytes[v.off[id]:v.off[id+1]], true
}

// Size is the number of token ids.
func (v *Vocab) Size() int { return v.size }

// TokenizerVocab is the Vocab of t: every token but the special ones,
// with eos (the model's EOS ids) ending the output. size is the model's
// vocabulary (its logits), which may exceed the tokenizer's.
func TokenizerVocab(t *tokenizer.Tokenizer, size int, eos []int32) *Vocab {
	return NewVocab(size, func(id int32) ([]byte, bool) {
		if int(id) >= t.VocabSize() || t.IsSpecial(id) {
			return nil, false
		}
		b, err := t.TokenBytes(id)
		return b, err == nil
	}, eos)
}

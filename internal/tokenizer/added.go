package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// addedToken is an entry of tokenizer.json's added_tokens.
type addedToken struct {
	id         int32
	content    string
	singleWord bool // match only where not inside a word
	lstrip     bool // the match swallows whitespace on its left
	rstrip     bool // the match swallows whitespace on its right
	normalized bool // matched in the second pass (see addedMatcher)
	special    bool // a control token
}

// addedMatcher finds added tokens in text the way Hugging Face does: tokens
// with normalized=false are matched first, leftmost-longest, in the raw text
// ([addedMatcher.split]); the text between those matches is normalized and
// tokens with normalized=true are then matched in it, by their normalized
// content ([addedMatcher.splitNormalized]).
//
// With skipSpecial, a match of a special token is passed over and left as
// text, like Hugging Face's encode_special_tokens (split_special_tokens).
type addedMatcher struct {
	raw, norm   *trie   // nil: no tokens of that kind
	passes      []*trie // raw and norm where not nil, for walking all tokens
	skipSpecial bool
}

// plainView returns a matcher over the same tokens that skips special ones.
func (m *addedMatcher) plainView() *addedMatcher {
	return &addedMatcher{raw: m.raw, norm: m.norm, passes: m.passes, skipSpecial: true}
}

// newAddedMatcher builds the matcher; n normalizes the content of tokens
// with normalized=true (nil: no normalizer).
func newAddedMatcher(toks []addedToken, n normalizer) *addedMatcher {
	var (
		raw, norm []addedToken
		normKeys  []string // what each of norm matches
	)
	for _, t := range toks {
		switch {
		case !t.normalized:
			raw = append(raw, t)
		case n != nil:
			if key := n.normalize(t.content); key != "" {
				norm, normKeys = append(norm, t), append(normKeys, key)
			}
		default:
			norm, normKeys = append(norm, t), append(normKeys, t.content)
		}
	}
	m := &addedMatcher{}
	if len(raw) > 0 {
		m.raw = newTrie(raw)
		m.passes = append(m.passes, m.raw)
	}
	if len(norm) > 0 {
		m.norm = newTrieKeys(norm, normKeys)
		m.passes = append(m.passes, m.norm)
	}
	return m
}

// split calls text for each stretch of s between tokens with
// normalized=false and token for each such token, in order. Stretches are
// non-empty.
func (m *addedMatcher) split(s string, text func(string) error, token func(int32) error) error {
	return m.raw.scanOrAll(s, m.skip(), text, token)
}

// splitNormalized is split for the tokens with normalized=true, on text
// that has been normalized; skip says whether a special token matched at
// s[start:end] is passed over (m.skipSpecial does not apply).
func (m *addedMatcher) splitNormalized(s string, skip skipFunc, text func(string) error, token func(int32) error) error {
	return m.norm.scanOrAll(s, skip, text, token)
}

// skipFunc says whether a special token matched at s[start:end] is passed
// over and left as text.
type skipFunc func(start, end int) bool

func skipAll(int, int) bool  { return true }
func skipNone(int, int) bool { return false }

// skip is the skipFunc of m.skipSpecial.
func (m *addedMatcher) skip() skipFunc {
	if m.skipSpecial {
		return skipAll
	}
	return skipNone
}

// trie is a byte trie over the contents of a set of added tokens.
type trie struct {
	edges map[uint64]int32 // node<<8 | byte → child node; the root is node 0
	term  []int32          // node → index in toks of the token ending there, or -1
	first [256]bool        // bytes that start some token
	toks  []addedToken
}

// newTrie builds the trie matching each token's content.
func newTrie(toks []addedToken) *trie {
	keys := make([]string, len(toks))
	for i, t := range toks {
		keys[i] = t.content
	}
	return newTrieKeys(toks, keys)
}

// newTrieKeys builds the trie matching keys[i] (non-empty) as toks[i]; a key
// is the token's content, normalized for a token with normalized=true.
func newTrieKeys(toks []addedToken, keys []string) *trie {
	tr := &trie{edges: make(map[uint64]int32), term: []int32{-1}, toks: toks}
	for i, k := range keys {
		node := int32(0)
		for j := range len(k) {
			key := uint64(node)<<8 | uint64(k[j])
			child, ok := tr.edges[key]
			if !ok {
				child = int32(len(tr.term))
				tr.term = append(tr.term, -1)
				tr.edges[key] = child
			}
			node = child
		}
		tr.term[node] = int32(i)
		tr.first[k[0]] = true
	}
	return tr
}

// longestAt returns the end of the longest token starting at s[i] and its
// index in toks, or -1.
func (tr *trie) longestAt(s string, i int) (end int, tok int32) {
	tok = -1
	node := int32(0)
	for j := i; j < len(s); j++ {
		child, ok := tr.edges[uint64(node)<<8|uint64(s[j])]
		if !ok {
			break
		}
		node = child
		if k := tr.term[node]; k >= 0 {
			end, tok = j+1, k
		}
	}
	return end, tok
}

// scanOrAll is scan, or text(s) for a nil trie.
func (tr *trie) scanOrAll(s string, skipSpecial skipFunc, text func(string) error, token func(int32) error) error {
	if tr == nil {
		if s == "" {
			return nil
		}
		return text(s)
	}
	return tr.scan(s, skipSpecial, text, token)
}

// scan splits s at the tokens of the trie, honouring single_word, lstrip and
// rstrip, and passing over the special tokens skipSpecial says to.
func (tr *trie) scan(s string, skipSpecial skipFunc, gap func(string) error, token func(int32) error) error {
	done := 0 // s[:done] has been emitted
	for i := 0; i < len(s); {
		if !tr.first[s[i]] {
			i++
			continue
		}
		end, k := tr.longestAt(s, i)
		if k < 0 {
			i++
			continue
		}
		t := &tr.toks[k]
		start, stop := i, end
		if (t.special && skipSpecial(start, stop)) ||
			(t.singleWord && (endsWithWordChar(s[:start]) || startsWithWordChar(s[stop:]))) {
			i = end // like Aho-Corasick's iterator, resume after the match
			continue
		}
		if t.lstrip {
			for start > done {
				r, n := utf8.DecodeLastRuneInString(s[:start])
				if !unicode.IsSpace(r) {
					break
				}
				start -= n
			}
		}
		if t.rstrip {
			for stop < len(s) {
				r, n := utf8.DecodeRuneInString(s[stop:])
				if !unicode.IsSpace(r) {
					break
				}
				stop += n
			}
		}
		if start > done {
			if err := gap(s[done:start]); err != nil {
				return err
			}
		}
		if err := token(t.id); err != nil {
			return err
		}
		done, i = stop, stop
	}
	if done < len(s) {
		return gap(s[done:])
	}
	return nil
}

func isWordChar(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r)
}

func endsWithWordChar(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordChar(r)
}

func startsWithWordChar(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordChar(r)
}

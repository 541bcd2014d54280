package constrain

import (
	"math"
	"regexp/syntax"
	"unicode/utf8"
)

// pos is a place in the output: a DFA state plus the bytes of a character
// whose remaining bytes are still to come (tokens may split UTF-8).
type pos struct {
	s    *dstate
	part [4]byte
	n    uint8
}

// Limits on the masks a grammar caches (per grammar, all vocabularies).
const maxMaskBytes = 32 << 20

// maskSet is the allowed-token set of one position.
type maskSet struct {
	bits []uint64
	// maxDist is the largest, over allowed tokens, of the fewest bytes
	// that complete the output after the token.
	maxDist int32
}

type maskKey struct {
	v    *Vocab
	part [4]byte
	n    uint8
}

// feed is the position after byte b; g.mu must be held.
func (g *Grammar) feed(p pos, b byte) pos {
	if p.n == 0 && b < utf8.RuneSelf {
		return pos{s: g.step(p.s, rune(b))}
	}
	p.part[p.n] = b
	p.n++
	buf := p.part[:p.n]
	if !utf8.FullRune(buf) {
		lo, hi := prefixRange(buf)
		if !p.s.mayStart(g.prog, lo, hi) {
			return pos{s: dead}
		}
		return p
	}
	r, size := utf8.DecodeRune(buf)
	if (r == utf8.RuneError && size <= 1) || size != len(buf) {
		return pos{s: dead}
	}
	return pos{s: g.step(p.s, r)}
}

// prefixRange is the range of code points whose UTF-8 encoding starts
// with the valid, incomplete prefix buf.
func prefixRange(buf []byte) (lo, hi rune) {
	var l int
	var v rune
	switch b := buf[0]; {
	case b >= 0xF0:
		l, v, lo = 4, rune(b&0x07), 0x10000
	case b >= 0xE0:
		l, v, lo = 3, rune(b&0x0F), 0x800
	default:
		l, v, lo = 2, rune(b&0x1F), 0x80
	}
	for _, c := range buf[1:] {
		v = v<<6 | rune(c&0x3F)
	}
	k := 6 * (l - len(buf))
	return max(lo, v<<k), min(utf8.MaxRune, v<<k|(1<<k-1))
}

// dist bounds the bytes that complete the output from p.
func (g *Grammar) posDist(p pos) int32 {
	if p.n == 0 {
		return p.s.dist
	}
	l := int32(len(p.part))
	switch b := p.part[0]; {
	case b < 0xE0:
		l = 2
	case b < 0xF0:
		l = 3
	}
	worst := int32(0)
	for _, pc := range p.s.pcs {
		if in := &g.prog.Inst[pc]; in.Op != syntax.InstMatch {
			worst = max(worst, g.dist[in.Out])
		}
	}
	return l - int32(p.n) + worst
}

// walk visits the tokens allowed at p whose completion distance is at
// most limit, setting their bits, and returns how many there were and the
// smallest distance among all allowed tokens; g.mu must be held.
func (g *Grammar) walk(v *Vocab, p pos, limit int32, out []uint64) (n int, minDist, maxDist int32) {
	type frame struct {
		node int32
		p    pos
	}
	minDist = unreachable
	stack := []frame{{0, p}}
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for c := v.nodes[f.node].child; c != 0; c = v.nodes[c].next {
			node := &v.nodes[c]
			q := g.feed(f.p, node.b)
			if q.s == dead {
				continue
			}
			if node.tokHi > node.tokLo {
				d := g.posDist(q)
				minDist = min(minDist, d)
				if d <= limit {
					maxDist = max(maxDist, d)
					for _, t := range v.toks[node.tokLo:node.tokHi] {
						out[t>>6] |= 1 << (t & 63)
						n++
					}
				}
			}
			if node.child != 0 {
				stack = append(stack, frame{c, q})
			}
		}
	}
	return n, minDist, maxDist
}

// mask returns the cached allowed set at p; g.mu must be held.
func (g *Grammar) mask(v *Vocab, p pos) *maskSet {
	k := maskKey{v, p.part, p.n}
	if m, ok := p.s.masks[k]; ok {
		return m
	}
	m := &maskSet{bits: make([]uint64, (v.size+63)/64)}
	_, _, m.maxDist = g.walk(v, p, unreachable-1, m.bits)
	g.maskBytes += 8 * len(m.bits)
	if g.maskBytes > maxMaskBytes {
		g.reset()
	}
	g.grown.Store(g.stateBytes + int64(g.maskBytes))
	if p.s.masks == nil {
		p.s.masks = map[maskKey]*maskSet{}
	}
	p.s.masks[k] = m
	return m
}

// reset drops the cached automaton and masks; states in use keep working.
func (g *Grammar) reset() {
	g.states = map[string]*dstate{}
	g.maskBytes, g.stateBytes = 0, 0
	g.start = g.intern(g.start.pcs)
}

// Matcher follows one sequence's output through a Grammar and masks the
// logits of its next token. It is not safe for concurrent use; the
// Grammar and Vocab it shares are.
type Matcher struct {
	g         *Grammar
	v         *Vocab
	p         pos
	scratch   []uint64
	eosLogits []float32
}

// NewMatcher starts a matcher at the beginning of the output.
func (g *Grammar) NewMatcher(v *Vocab) *Matcher {
	g.mu.Lock()
	defer g.mu.Unlock()
	return &Matcher{g: g, v: v, p: pos{s: g.start}}
}

// Complete reports whether the output so far is a whole match.
func (m *Matcher) Complete() bool { return m.p.n == 0 && m.p.s.accept }

// Mask sets to -Inf the logits of every token that may not come next:
// tokens that would leave the output no valid prefix, EOS unless the
// output is complete, and — when remaining (the tokens the sequence may
// still produce, this one included) runs short — tokens after which the
// output could not be completed, EOS included, within the budget. Where
// nothing fits any more (max_tokens below the shortest output), the tokens
// that get closest stay allowed. A dead end (possible only with a
// vocabulary missing byte tokens) allows EOS alone.
func (m *Matcher) Mask(logits []float32, remaining int) {
	g := m.g
	g.mu.Lock()
	defer g.mu.Unlock()
	limit := int32(max(min(remaining-2, math.MaxInt32-1), -1))
	eos := m.Complete()
	allowed := m.p.s != dead
	var set []uint64
	if allowed {
		ms := g.mask(m.v, m.p)
		set = ms.bits
		if ms.maxDist > limit {
			if cap(m.scratch) < len(ms.bits) {
				m.scratch = make([]uint64, len(ms.bits))
			}
			set = m.scratch[:len(ms.bits)]
			clear(set)
			n, minDist, _ := g.walk(m.v, m.p, limit, set)
			if n == 0 && !eos && minDist != unreachable {
				g.walk(m.v, m.p, minDist, set)
			}
		}
		allowed = eos || anySet(set)
	}
	if !allowed {
		eos = true
	}
	if cap(m.eosLogits) < len(m.v.eos) {
		m.eosLogits = make([]float32, len(m.v.eos))
	}
	for i, e := range m.v.eos {
		if int(e) < len(logits) {
			m.eosLogits[i] = logits[e]
		}
	}
	for i := range logits {
		if i >= m.v.size || set == nil || set[i>>6]&(1<<(i&63)) == 0 {
			logits[i] = float32(math.Inf(-1))
		}
	}
	if eos {
		for i, e := range m.v.eos {
			if int(e) < len(logits) {
				logits[e] = m.eosLogits[i]
			}
		}
	}
}

func anySet(set []uint64) bool {
	for _, w := range set {
		if w != 0 {
			return true
		}
	}
	return false
}

// Advance moves past the sampled token. EOS and unknown ids leave the
// position unchanged.
func (m *Matcher) Advance(tok int32) {
	g := m.g
	b, ok := m.v.tokenBytes(tok)
	if !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range b {
		m.p = g.feed(m.p, c)
	}
}

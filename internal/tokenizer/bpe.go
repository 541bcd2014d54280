package tokenizer

import (
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync/atomic"
	"unicode/utf8"
)

// Byte-level alphabet (GPT-2): every byte is written as one printable rune so
// that vocabulary entries are readable strings. Bytes that are printable
// Latin-1 characters ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the
// other 68 bytes, in increasing order, become U+0100, U+0101, ... (so the
// space 0x20 is 'Ġ' U+0120 and '\n' is 'Ċ' U+010A).

func printableByte(b byte) bool {
	return ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF)
}

// byteToRune maps a byte to its rune in the byte-level alphabet.
func byteToRune(b byte) rune {
	switch {
	case printableByte(b):
		return rune(b)
	case b <= ' ': // 0x00..0x20 → U+0100..U+0120
		return 0x100 + rune(b)
	case b <= 0xA0: // 0x7F..0xA0 → U+0121..U+0142
		return 0x100 + 33 + rune(b-0x7F)
	default: // 0xAD → U+0143
		return 0x100 + 67
	}
}

// runeToByte inverts byteToRune.
func runeToByte(r rune) (byte, bool) {
	switch {
	case r < 0x100:
		return byte(r), printableByte(byte(r))
	case r <= 0x100+32:
		return byte(r - 0x100), true
	case r <= 0x100+66:
		return byte(r-0x100-33) + 0x7F, true
	case r == 0x100+67:
		return 0xAD, true
	}
	return 0, false
}

// decodeByteLevel turns a vocabulary entry into the bytes it stands for. An
// entry with a rune outside the alphabet stands for its own UTF-8 bytes, as
// in Hugging Face's ByteLevel decoder.
func decodeByteLevel(tok string) string {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, ok := runeToByte(r)
		if !ok {
			return tok
		}
		out = append(out, b)
	}
	return string(out)
}

// encodeByteLevel spells raw bytes in the byte-level alphabet.
func encodeByteLevel(raw string) string {
	var sb strings.Builder
	sb.Grow(2 * len(raw))
	for i := range len(raw) {
		sb.WriteRune(byteToRune(raw[i]))
	}
	return sb.String()
}

// smallPiece is the piece length up to which BPE works in stack buffers.
const smallPiece = 64

// merge is one BPE rule: its rank (position in the merges list; lower
// merges first) and the ID of the merged token.
type merge struct {
	rank, id int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// bpe appends the token IDs of one pre-token (raw bytes) to dst.
func (t *Tokenizer) bpe(dst []int32, piece string) []int32 {
	if len(piece) == 1 && t.byteLevel {
		return append(dst, t.byteID[piece[0]])
	}
	if ids, ok := t.cache.get(piece); ok {
		return append(dst, ids...)
	}
	start := len(dst)
	dst = t.bpeUncached(dst, piece)
	t.cache.put(piece, dst[start:])
	return dst
}

func (t *Tokenizer) bpeUncached(dst []int32, piece string) []int32 {
	if t.ignoreMerges {
		// Llama 3's ignore_merges: a pre-token that is a token is kept whole.
		if id, ok := t.vocab[t.spell(piece)]; ok {
			return append(dst, id)
		}
	}
	var buf [smallPiece]int32
	return t.mergeSymbols(dst, t.symbols(buf[:0], piece))
}

// spell returns piece as the model vocabulary spells it.
func (t *Tokenizer) spell(piece string) string {
	if !t.byteLevel {
		return piece
	}
	var buf [2 * smallPiece]byte // each byte spells as at most 2 bytes
	spelled := buf[:0]
	for i := range len(piece) {
		spelled = utf8.AppendRune(spelled, byteToRune(piece[i]))
	}
	return string(spelled)
}

// symbols appends the initial symbols of piece, before any merge: one per
// byte for a byte-level model; otherwise one per character, where a
// character missing from the vocabulary becomes its bytes' <0xXX> tokens
// (byte_fallback), else the unknown token (consecutive ones fused into one
// with fuse_unk), else nothing — Hugging Face's BPE does the same.
func (t *Tokenizer) symbols(dst []int32, piece string) []int32 {
	if t.byteLevel {
		for i := range len(piece) {
			dst = append(dst, t.byteID[piece[i]])
		}
		return dst
	}
	lastUnk := false
	for i, r := range piece {
		n := utf8.RuneLen(r)
		if id, ok := t.vocab[piece[i:i+n]]; ok {
			dst = append(dst, id)
			lastUnk = false
			continue
		}
		if t.byteFallback && t.hasByteTokens(piece[i:i+n]) {
			for j := i; j < i+n; j++ {
				dst = append(dst, t.byteID[piece[j]])
			}
			lastUnk = false
			continue
		}
		if t.hasUnk && !(t.fuseUnk && lastUnk) {
			dst = append(dst, t.unk)
		}
		lastUnk = t.hasUnk
	}
	return dst
}

// hasByteTokens reports whether every byte of s has a <0xXX> token.
func (t *Tokenizer) hasByteTokens(s string) bool {
	for i := range len(s) {
		if t.byteID[s[i]] < 0 {
			return false
		}
	}
	return true
}

// mergeSymbols runs BPE on the initial symbols ids (which it overwrites):
// it repeatedly applies the lowest-ranked merge among adjacent pairs,
// leftmost first on ties (Hugging Face's order). A min-heap of candidate
// merges, validated when popped, keeps long pieces at O(n log n).
func (t *Tokenizer) mergeSymbols(dst []int32, ids []int32) []int32 {
	n := len(ids)
	// Pieces are mostly short: keep their working arrays on the stack.
	var nextBuf, prevBuf [smallPiece]int32
	var heapBuf [2 * smallPiece]uint64
	next, prev := nextBuf[:0], prevBuf[:0]
	if n > smallPiece {
		next, prev = make([]int32, 0, n), make([]int32, 0, n)
	}
	next, prev = next[:n], prev[:n] // next: next live symbol, or n; prev: previous, or -1
	for i := range n {
		next[i] = int32(i + 1)
		prev[i] = int32(i - 1)
	}
	// Heap entries are rank<<32 | position, so the minimum is the lowest
	// rank and, among equal ranks, the leftmost pair.
	h := heapBuf[:0]
	push := func(pos int32) {
		if nx := next[pos]; int(nx) < n {
			if m, ok := t.merges[pairKey(ids[pos], ids[nx])]; ok {
				h = heapPush(h, uint64(uint32(m.rank))<<32|uint64(uint32(pos)))
			}
		}
	}
	for i := range n - 1 {
		push(int32(i))
	}
	for len(h) > 0 {
		var e uint64
		e, h = heapPop(h)
		pos, rank := int32(uint32(e)), int32(e>>32)
		if ids[pos] < 0 { // merged into its left neighbour
			continue
		}
		nx := next[pos]
		if int(nx) >= n {
			continue
		}
		m, ok := t.merges[pairKey(ids[pos], ids[nx])]
		if !ok || m.rank != rank { // the pair changed since it was pushed
			continue
		}
		ids[pos] = m.id
		ids[nx] = -1
		next[pos] = next[nx]
		if int(next[pos]) < n {
			prev[next[pos]] = pos
		}
		if p := prev[pos]; p >= 0 {
			push(p)
		}
		push(pos)
	}
	for i := int32(0); int(i) < n; i = next[i] {
		dst = append(dst, ids[i])
	}
	return dst
}

// heapPush and heapPop keep a binary min-heap of packed (rank, position)
// entries in a slice.
func heapPush(h []uint64, v uint64) []uint64 {
	h = append(h, v)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if h[p] <= h[i] {
			break
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
	return h
}

func heapPop(h []uint64) (uint64, []uint64) {
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h[l] < h[m] {
			m = l
		}
		if r < len(h) && h[r] < h[m] {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	return top, h
}

// Cache of BPE results per pre-token. Text repeats words a lot, so most
// pre-tokens hit. It is a direct-mapped table of immutable entries behind
// atomic pointers: bounded by construction (a colliding pre-token simply
// replaces the entry), and lock-free, since the gateway encodes from many
// goroutines at once.
const (
	cacheSlots         = 1 << 16
	cacheMaxPieceBytes = 64
)

type bpeCache struct {
	seed  maphash.Seed
	slots [cacheSlots]atomic.Pointer[cacheEntry]
}

type cacheEntry struct {
	key string
	ids []int32
}

func newBPECache() *bpeCache {
	return &bpeCache{seed: maphash.MakeSeed()}
}

func (c *bpeCache) slot(key string) *atomic.Pointer[cacheEntry] {
	return &c.slots[maphash.String(c.seed, key)%cacheSlots]
}

// get returns the cached IDs for key; the caller must not modify them.
func (c *bpeCache) get(key string) ([]int32, bool) {
	if len(key) > cacheMaxPieceBytes {
		return nil, false
	}
	if e := c.slot(key).Load(); e != nil && e.key == key {
		return e.ids, true
	}
	return nil, false
}

func (c *bpeCache) put(key string, ids []int32) {
	if len(key) > cacheMaxPieceBytes {
		return
	}
	// Copy both: key is a slice of the caller's text (keeping it would pin
	// the whole text) and ids aliases the caller's output.
	c.slot(key).Store(&cacheEntry{key: strings.Clone(key), ids: slices.Clone(ids)})
}

// validUTF8 returns ErrInvalidUTF8, wrapped with the offset of the first
// invalid byte, when s is not valid UTF-8.
func validUTF8(s string) error {
	if utf8.ValidString(s) {
		return nil
	}
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			break
		}
		i += n
	}
	return fmt.Errorf("%w at byte offset %d", ErrInvalidUTF8, i)
}

package constrain

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"regexp/syntax"
	"slices"
	"sync"
	"sync/atomic"
	"unicode/utf8"
	"unsafe"
)

// Grammar is a compiled Spec: a lazily determinized automaton over code
// points. It is independent of any vocabulary and safe for concurrent
// use.
type Grammar struct {
	prog *syntax.Prog
	// dist[pc]: the fewest bytes that lead from instruction pc to a match.
	dist []int32

	// baseBytes estimates the memory of prog and dist.
	baseBytes int64

	mu         sync.Mutex
	states     map[string]*dstate
	start      *dstate
	maskBytes  int
	stateBytes int64 // estimated memory of the states in the table
	// grown is stateBytes + maskBytes, readable without mu (Size must not
	// wait for a mask being computed).
	grown atomic.Int64
}

// Bounds on a grammar's cached automaton.
const maxStates = 1 << 14

const unreachable = math.MaxInt32

// dstate is one DFA state: the set of NFA instructions (rune matchers and
// Match) reachable after the input so far. Its transitions and token
// masks are cached; both are pure functions of the set, so a state stays
// usable after the grammar drops its state table.
type dstate struct {
	pcs    []uint32
	accept bool
	dist   int32 // fewest bytes to an accepting state

	ascii [128]*dstate // nil: not computed yet; dead: no transition
	other map[rune]*dstate
	masks map[maskKey]*maskSet // per vocabulary and partial character, guarded by Grammar.mu
}

// dead is the state with no way forward.
var dead = &dstate{dist: unreachable}

// Compile compiles spec. Errors wrap ErrUnsupported (an *UnsupportedError
// naming the keyword), ErrInvalid or ErrTooLarge.
func Compile(spec Spec) (*Grammar, error) {
	expr, err := spec.Regexp()
	if err != nil {
		return nil, err
	}
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		var se *syntax.Error
		if errors.As(err, &se) && (se.Code == syntax.ErrLarge || se.Code == syntax.ErrNestingDepth) {
			return nil, fmt.Errorf("%w: %w", ErrTooLarge, err)
		}
		return nil, fmt.Errorf("%w: regex: %w", ErrInvalid, err)
	}
	if err := expandRepeats(re); err != nil {
		return nil, err
	}
	if n := programSize(re, MaxInsts); n > MaxInsts {
		return nil, &LimitError{Limit: "grammar instructions", Size: MaxInsts, Max: MaxInsts, Unit: "instructions", AtLeast: true}
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTooLarge, err)
	}
	if len(prog.Inst) > MaxInsts {
		return nil, &LimitError{Limit: "grammar instructions", Size: len(prog.Inst), Max: MaxInsts, Unit: "instructions"}
	}
	for _, in := range prog.Inst {
		if in.Op == syntax.InstEmptyWidth && syntax.EmptyOp(in.Arg)&(syntax.EmptyWordBoundary|syntax.EmptyNoWordBoundary) != 0 {
			return nil, &UnsupportedError{Keyword: "regex", Detail: `\b and \B are not supported`}
		}
	}
	g := &Grammar{prog: prog, dist: distances(prog), states: map[string]*dstate{}}
	g.baseBytes = int64(len(prog.Inst)) * (int64(unsafe.Sizeof(syntax.Inst{})) + 4)
	for _, in := range prog.Inst {
		g.baseBytes += 4 * int64(len(in.Rune))
	}
	g.start = g.intern(g.closure(nil, []uint32{uint32(prog.Start)}))
	if g.start.dist == unreachable {
		return nil, fmt.Errorf("%w: the grammar matches no text", ErrInvalid)
	}
	return g, nil
}

// runeBytes is the fewest UTF-8 bytes of a rune instruction's runes.
func runeBytes(in *syntax.Inst) int32 {
	switch in.Op {
	case syntax.InstRune1:
		return int32(utf8.RuneLen(in.Rune[0]))
	case syntax.InstRune:
		if len(in.Rune) == 0 {
			return unreachable
		}
		if len(in.Rune) == 1 { // a single rune, maybe case-folded
			return int32(utf8.RuneLen(in.Rune[0]))
		}
		return int32(max(utf8.RuneLen(in.Rune[0]), 1))
	}
	return 1
}

// distances computes, per instruction, the fewest bytes to a Match
// (Dijkstra over the reversed program).
func distances(p *syntax.Prog) []int32 {
	n := len(p.Inst)
	type edge struct {
		from uint32
		w    int32
	}
	rev := make([][]edge, n)
	dist := make([]int32, n)
	var q distHeap
	for pc := range p.Inst {
		dist[pc] = unreachable
		in := &p.Inst[pc]
		switch in.Op {
		case syntax.InstMatch:
			dist[pc] = 0
			heap.Push(&q, distItem{uint32(pc), 0})
		case syntax.InstFail:
		case syntax.InstAlt, syntax.InstAltMatch:
			rev[in.Out] = append(rev[in.Out], edge{uint32(pc), 0})
			rev[in.Arg] = append(rev[in.Arg], edge{uint32(pc), 0})
		case syntax.InstCapture, syntax.InstNop, syntax.InstEmptyWidth:
			rev[in.Out] = append(rev[in.Out], edge{uint32(pc), 0})
		default:
			if w := runeBytes(in); w != unreachable {
				rev[in.Out] = append(rev[in.Out], edge{uint32(pc), w})
			}
		}
	}
	for q.Len() > 0 {
		it := heap.Pop(&q).(distItem)
		if it.d != dist[it.pc] {
			continue
		}
		for _, e := range rev[it.pc] {
			if d := it.d + e.w; d < dist[e.from] {
				dist[e.from] = d
				heap.Push(&q, distItem{e.from, d})
			}
		}
	}
	return dist
}

type distItem struct {
	pc uint32
	d  int32
}

type distHeap []distItem

func (h distHeap) Len() int           { return len(h) }
func (h distHeap) Less(i, j int) bool { return h[i].d < h[j].d }
func (h distHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *distHeap) Push(x any)        { *h = append(*h, x.(distItem)) }
func (h *distHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// closure adds to set the rune and match instructions reachable from pcs
// without input. ^ and $ are satisfied (the whole output is matched).
func (g *Grammar) closure(set []uint32, pcs []uint32) []uint32 {
	stack := slices.Clone(pcs)
	seen := map[uint32]bool{}
	for len(stack) > 0 {
		pc := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[pc] {
			continue
		}
		seen[pc] = true
		in := &g.prog.Inst[pc]
		switch in.Op {
		case syntax.InstAlt, syntax.InstAltMatch:
			stack = append(stack, in.Arg, in.Out)
		case syntax.InstCapture, syntax.InstNop, syntax.InstEmptyWidth:
			stack = append(stack, in.Out)
		case syntax.InstFail:
		default:
			if g.dist[pc] != unreachable {
				set = append(set, pc)
			}
		}
	}
	slices.Sort(set)
	return slices.Compact(set)
}

// intern returns the state for set; g.mu must be held (or g unshared).
func (g *Grammar) intern(set []uint32) *dstate {
	if len(set) == 0 {
		return dead
	}
	key := make([]byte, 0, 4*len(set))
	for _, pc := range set {
		key = append(key, byte(pc), byte(pc>>8), byte(pc>>16), byte(pc>>24))
	}
	if s, ok := g.states[string(key)]; ok {
		return s
	}
	if len(g.states) >= maxStates {
		// Drop the table; states in use keep working (see dstate).
		g.states = map[string]*dstate{}
		g.stateBytes = 0
	}
	s := &dstate{pcs: set, dist: unreachable}
	for _, pc := range set {
		if g.prog.Inst[pc].Op == syntax.InstMatch {
			s.accept = true
		}
		s.dist = min(s.dist, g.dist[pc])
	}
	g.states[string(key)] = s
	g.stateBytes += int64(unsafe.Sizeof(dstate{})) + 8*int64(len(set)) // the state, its pcs and its key
	g.grown.Store(g.stateBytes + int64(g.maskBytes))
	return s
}

// Insts is the number of the grammar's automaton instructions.
func (g *Grammar) Insts() int { return len(g.prog.Inst) }

// Size estimates the memory the grammar holds now: its program, the
// automaton states built so far and their token masks.
func (g *Grammar) Size() int64 { return g.baseBytes + g.grown.Load() }

// step is the state after rune r; g.mu must be held.
func (g *Grammar) step(s *dstate, r rune) *dstate {
	if s == dead {
		return dead
	}
	if r < utf8.RuneSelf {
		if n := s.ascii[r]; n != nil {
			return n
		}
	} else if n, ok := s.other[r]; ok {
		return n
	}
	var next []uint32
	for _, pc := range s.pcs {
		in := &g.prog.Inst[pc]
		if in.Op != syntax.InstMatch && in.MatchRune(r) {
			next = append(next, in.Out)
		}
	}
	n := dead
	if len(next) > 0 {
		n = g.intern(g.closure(nil, next))
	}
	if r < utf8.RuneSelf {
		s.ascii[r] = n
	} else {
		if s.other == nil {
			s.other = map[rune]*dstate{}
		}
		s.other[r] = n
	}
	return n
}

// mayStart reports whether some rune in [lo, hi] can follow s (used to
// prune incomplete UTF-8 sequences); it may answer false for runes only a
// case-folding instruction matches, which only narrows the output.
func (s *dstate) mayStart(prog *syntax.Prog, lo, hi rune) bool {
	for _, pc := range s.pcs {
		in := &prog.Inst[pc]
		switch in.Op {
		case syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
			return true
		case syntax.InstRune1:
			if in.Rune[0] >= lo && in.Rune[0] <= hi {
				return true
			}
		case syntax.InstRune:
			if len(in.Rune) == 1 {
				if in.Rune[0] >= lo && in.Rune[0] <= hi {
					return true
				}
				continue
			}
			for i := 0; i+1 < len(in.Rune); i += 2 {
				if in.Rune[i] <= hi && in.Rune[i+1] >= lo {
					return true
				}
			}
		}
	}
	return false
}

package constrain

import (
	"fmt"
	"regexp/syntax"
	"strconv"
	"strings"
)

// Counted repetitions in the expressions this package builds (string
// lengths, array sizes) are written as named groups, (?P<wrep_LO_HI>x)
// (HI "inf" when unbounded), which Compile turns into x{LO,HI} after
// parsing. Go's parser refuses nested counted repetitions beyond 1000
// copies of the innermost expression together ("invalid repeat count"):
// 64 strings of at least 300 characters are 19,200. The grammar's
// instruction limit bounds the expansion instead, estimated before it is
// built (programSize).
const repeatPrefix = "wrep_"

// maxRepeat bounds one marked repetition (the largest documented bound
// is maxLengthBound).
const maxRepeat = maxLengthBound

// repeat is x repeated lo to hi times (hi < 0: at least lo times).
func repeat(x string, lo, hi int) string {
	h := "inf"
	if hi >= 0 {
		h = strconv.Itoa(hi)
	}
	return fmt.Sprintf("(?P<%s%d_%s>%s)", repeatPrefix, lo, h, x)
}

// expandRepeats replaces the marked groups of re by repetitions.
func expandRepeats(re *syntax.Regexp) error {
	for _, sub := range re.Sub {
		if err := expandRepeats(sub); err != nil {
			return err
		}
	}
	if re.Op != syntax.OpCapture || !strings.HasPrefix(re.Name, repeatPrefix) {
		return nil
	}
	lo, hi, ok := strings.Cut(strings.TrimPrefix(re.Name, repeatPrefix), "_")
	min, err1 := strconv.Atoi(lo)
	max, err2 := strconv.Atoi(hi)
	if hi == "inf" {
		max, err2 = -1, nil
	}
	if !ok || err1 != nil || err2 != nil || min < 0 || min > maxRepeat || max > maxRepeat || (max >= 0 && max < min) {
		return fmt.Errorf("%w: regex: invalid repetition group %q", ErrInvalid, re.Name)
	}
	*re = syntax.Regexp{Op: syntax.OpRepeat, Flags: re.Flags, Sub: re.Sub, Sub0: re.Sub0, Min: min, Max: max}
	return nil
}

// programSize estimates, from above, the instructions syntax.Compile
// makes of re once simplified, saturating at limit+1 (so that a refused
// grammar is never expanded).
func programSize(re *syntax.Regexp, limit int) int {
	sat := func(n int) int { return min(n, limit+1) }
	sum := func() int {
		n := 0
		for _, s := range re.Sub {
			n = sat(n + programSize(s, limit))
		}
		return n
	}
	switch re.Op {
	case syntax.OpLiteral:
		return sat(len(re.Rune))
	case syntax.OpConcat:
		return sum()
	case syntax.OpAlternate:
		return sat(sum() + len(re.Sub) - 1)
	case syntax.OpCapture:
		return sat(sum() + 2)
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		return sat(sum() + 1)
	case syntax.OpRepeat:
		// x{n,m}: n copies, then m-n optional ones (an Alt each); x{n,}:
		// n copies and a loop.
		n, copies, alts := sum(), re.Max, re.Max-re.Min
		if copies < 0 {
			copies, alts = re.Min+1, 1
		}
		if copies > 0 && n > (limit+1)/copies {
			return limit + 1
		}
		return sat(copies*n + alts)
	}
	return 1
}

package constrain

import (
	"fmt"
	"strconv"
	"strings"
)

// intRange is a regular expression matching exactly the decimal integers
// in [lo, hi] (no leading zeros, no "-0").
func intRange(lo, hi int64) string {
	var alts []string
	if lo < 0 {
		if a, b := max(-hi, 1), -lo; a <= b {
			alts = append(alts, "-"+natRange(uint64(a), uint64(b)))
		}
	}
	if hi >= 0 {
		alts = append(alts, natRange(uint64(max(lo, 0)), uint64(hi)))
	}
	return alt(alts)
}

// natRange matches the naturals in [a, b], a <= b.
func natRange(a, b uint64) string {
	var alts []string
	for digits := len(strconv.FormatUint(a, 10)); digits <= len(strconv.FormatUint(b, 10)); digits++ {
		lo, hi := pow10(digits-1), pow10(digits)-1
		if digits == 1 {
			lo = 0
		}
		lo, hi = max(lo, a), min(hi, b)
		if lo > hi {
			continue
		}
		alts = append(alts, sameLength(strconv.FormatUint(lo, 10), strconv.FormatUint(hi, 10)))
	}
	return alt(alts)
}

func pow10(n int) uint64 {
	p := uint64(1)
	for range n {
		p *= 10
	}
	return p
}

// sameLength matches the digit strings between x and y, of equal length.
func sameLength(x, y string) string {
	if x == y {
		return x
	}
	if x[0] == y[0] {
		return x[:1] + sameLength(x[1:], y[1:])
	}
	n := len(x) - 1
	if strings.Trim(x[1:], "0") == "" && strings.Trim(y[1:], "9") == "" {
		return digitClass(x[0], y[0]) + anyDigits(n)
	}
	alts := []string{x[:1] + sameLength(x[1:], strings.Repeat("9", n))}
	if x[0]+1 <= y[0]-1 {
		alts = append(alts, digitClass(x[0]+1, y[0]-1)+anyDigits(n))
	}
	alts = append(alts, y[:1]+sameLength(strings.Repeat("0", n), y[1:]))
	return alt(alts)
}

func digitClass(a, b byte) string {
	if a == b {
		return string(a)
	}
	return fmt.Sprintf("[%c-%c]", a, b)
}

func anyDigits(n int) string {
	switch n {
	case 0:
		return ""
	case 1:
		return "[0-9]"
	}
	return fmt.Sprintf("[0-9]{%d}", n)
}

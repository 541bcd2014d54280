package config

import (
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
)

// ByteSize is a number of bytes. In YAML and the environment it is a plain
// integer ("1048576") or a number with a unit: B, KB, MB, GB, TB (powers
// of 1000) or KiB, MiB, GiB, TiB (powers of 1024), e.g. "512MiB", "2GB",
// "1.5GiB" (rounded down to whole bytes). Units are case-sensitive so
// that "mb" cannot be mistaken for either family.
type ByteSize int64

// byteUnits maps each accepted unit to its multiplier.
var byteUnits = map[string]int64{
	"B":  1,
	"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
	"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
}

// byteSizeRE splits a size into its number and optional unit. The length
// bounds keep big.Rat arithmetic on hostile input cheap.
var byteSizeRE = regexp.MustCompile(`^([0-9]{1,20}(?:\.[0-9]{1,20})?) ?([A-Za-z]*)$`)

// ParseByteSize parses a byte size as described on ByteSize.
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	m := byteSizeRE.FindStringSubmatch(t)
	if m == nil {
		return 0, fmt.Errorf("invalid byte size %q: want a non-negative integer, optionally with a unit such as 512MiB or 2GB", s)
	}
	mult := int64(1)
	if m[2] != "" {
		u, ok := byteUnits[m[2]]
		if !ok {
			return 0, fmt.Errorf("invalid byte size %q: unknown unit %q (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)", s, m[2])
		}
		mult = u
	}
	r, ok := new(big.Rat).SetString(m[1])
	if !ok {
		return 0, fmt.Errorf("invalid byte size %q", s)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	n := new(big.Int).Quo(r.Num(), r.Denom())
	if !n.IsInt64() {
		return 0, fmt.Errorf("invalid byte size %q: too large", s)
	}
	return ByteSize(n.Int64()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler (YAML scalars and
// environment values).
func (b *ByteSize) UnmarshalText(text []byte) error {
	v, err := ParseByteSize(string(text))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// String renders the size in the shortest exact form: "4MiB", "2GB" or a
// plain number of bytes.
func (b ByteSize) String() string {
	n := int64(b)
	best := strconv.FormatInt(n, 10)
	if n <= 0 {
		return best
	}
	for unit, mult := range byteUnits {
		if mult == 1 || n%mult != 0 {
			continue
		}
		s := strconv.FormatInt(n/mult, 10) + unit
		// Prefer fewer characters; break ties towards the binary units,
		// which memory sizes usually are.
		if len(s) < len(best) || (len(s) == len(best) && strings.HasSuffix(s, "iB")) {
			best = s
		}
	}
	return best
}

// MarshalYAML renders the size as String does: a unit string when one
// is exact and shorter, otherwise a plain integer.
func (b ByteSize) MarshalYAML() (any, error) {
	s := b.String()
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	return s, nil
}

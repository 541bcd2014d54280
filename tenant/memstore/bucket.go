package memstore

import (
	"math"
	"time"
)

// window is the rate-limit period in microseconds.
const window = float64(time.Minute / time.Microsecond)

// bucket is a token bucket refilled continuously at limit per window. An
// unset bucket is full.
type bucket struct {
	lvl float64
	ts  int64 // Unix microseconds of the last update
	ok  bool
}

// level returns the bucket's content at now for the given limit.
func (b bucket) level(now int64, limit float64) float64 {
	if !b.ok {
		return limit
	}
	elapsed := float64(max(0, now-b.ts))
	return min(b.lvl+elapsed*limit/window, limit)
}

func (b *bucket) set(lvl float64, now int64) {
	b.lvl, b.ts, b.ok = lvl, max(b.ts, now), true
}

func remaining(lvl float64) int64 { return int64(max(0, math.Floor(lvl))) }

// ceilMS converts microseconds to a duration rounded up to a millisecond.
func ceilMS(us float64) time.Duration {
	if us <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(us/1000)) * time.Millisecond
}

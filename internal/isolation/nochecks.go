//go:build warden_nochecks

package isolation

import (
	"errors"
	"sync/atomic"
)

// off is the benchmark's switch. It is process-wide state, tolerated only
// in this benchmark build: it must reach every pool and transfer of the
// in-process cluster at once.
var off atomic.Bool

// Enabled reports whether the checks run now.
func Enabled() bool { return !off.Load() }

// Switchable is true in this build.
const Switchable = true

// SetForBenchmark switches the checks on or off for the whole process.
func SetForBenchmark(on bool) { off.Store(!on) }

// Refuse reports that this build must not serve anyone: the gateway,
// worker and up commands call it and exit. Only `warden bench` runs.
func Refuse() error {
	return errors.New("this warden was built with -tags warden_nochecks (isolation checks can be switched off) for benchmarks only; it refuses to serve")
}

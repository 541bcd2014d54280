//go:build !warden_nochecks

// Package isolation says whether warden's isolation checks run.
//
// They always do. The build tag warden_nochecks exists for one purpose:
// `warden bench pd` in a binary built with it can switch off the recurring
// checks (the KV owner-tag verification before every forward step and the
// transfer checksums) between rounds of one run, so that their end-to-end
// cost is measured against the same process with them on (DESIGN §8: at
// most 2%; scripts/bench-isolation.sh). It is a build tag, not a
// configuration option: in a normal build Enabled is the constant true
// and nothing can change it, and a tagged binary refuses to serve (see
// Refuse).
package isolation

// Enabled reports whether the isolation checks run: always, in this build.
func Enabled() bool { return true }

// Switchable reports whether SetForBenchmark exists in this build.
const Switchable = false

// SetForBenchmark is a no-op in a normal build: the checks stay on.
func SetForBenchmark(bool) {}

// Refuse returns nil in a normal build; see the warden_nochecks variant.
func Refuse() error { return nil }

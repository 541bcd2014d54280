//go:build !warden_broken

// Package brokenmode holds deliberate isolation failures for one purpose:
// showing that `warden probe` finds them. A binary built with the tag
// warden_broken reads WARDEN_BROKEN (a comma-separated list of modes) and
// misbehaves as asked; the end-to-end test of the probe builds one and
// expects exit 1 naming the finding. In every other build — the one users
// run — every mode is the constant false and nothing can switch it on.
package brokenmode

// Mode is one deliberate failure.
type Mode string

// The modes.
const (
	// Admission skips the context-length check (invariant I1): prompts
	// past the model's effective context go to the workers.
	Admission Mode = "admission"
	// SharedCache derives one prefix-cache domain for every tenant
	// (invariants I3 and I8): one tenant's cached prefix serves another.
	SharedCache Mode = "shared-cache"
	// ReleaseWithoutDrain frees the decode pages of a request aborted
	// mid-transfer at once, without waiting for the shm writer's drain
	// (invariant I5), hands them to the very next reservation, and lets a
	// stand-in for the writer go on writing into them (WriterLinger)
	// while the next request decodes from them.
	ReleaseWithoutDrain Mode = "release-without-drain"
)

// On reports whether mode is switched on: never, in this build.
func On(Mode) bool { return false }

// Built reports whether this binary was built with warden_broken.
const Built = false

//go:build warden_broken

package brokenmode

import (
	"os"
	"strings"
)

// Mode is one deliberate failure.
type Mode string

// The modes; see the doc of the normal build's file.
const (
	Admission           Mode = "admission"
	SharedCache         Mode = "shared-cache"
	ReleaseWithoutDrain Mode = "release-without-drain"
)

// modes is read once at start-up: the process's environment is its only
// input, so no request can switch a mode on.
var modes = func() map[Mode]bool {
	m := map[Mode]bool{}
	for _, s := range strings.Split(os.Getenv("WARDEN_BROKEN"), ",") {
		if s = strings.TrimSpace(s); s != "" {
			m[Mode(s)] = true
		}
	}
	return m
}()

// On reports whether mode is switched on by WARDEN_BROKEN.
func On(mode Mode) bool { return modes[mode] }

// Built reports whether this binary was built with warden_broken.
const Built = true

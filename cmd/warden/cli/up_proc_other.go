//go:build unix && !linux

package cli

import "syscall"

// childAttr puts a child in its own process group, so that a terminal's
// Ctrl-C reaches `warden up` alone and it can stop the children in order.
// Only Linux can also tie the child's life to its parent's.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

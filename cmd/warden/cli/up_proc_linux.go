package cli

import "syscall"

// childAttr puts a child in its own process group, so that a terminal's
// Ctrl-C reaches `warden up` alone and it can stop the children in order,
// and has the kernel send it SIGTERM if `warden up` dies, even by SIGKILL,
// so that no child outlives it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}

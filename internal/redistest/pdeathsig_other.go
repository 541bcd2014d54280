//go:build !linux

package redistest

import "os/exec"

// setPdeathsig is only available on Linux; elsewhere the test's cleanup
// stops the server.
func setPdeathsig(*exec.Cmd) {}

// Package clitest holds the end-to-end tests of `warden admin` and `warden
// check`: the real CLI (cmd/warden/cli) against the real admin handler over
// TLS, with a memstore and fakes of the cluster. They live here because
// only packages under gateway/ may import the handler. There is no
// non-test code.
package clitest

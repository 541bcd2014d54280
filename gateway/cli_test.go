package gateway_test

import (
	"github.com/warden-ai/warden/cmd/warden/cli"
	"github.com/warden-ai/warden/gateway"
)

// `warden check` is cmd/warden/cli, which imports package gateway: the
// package's own tests reach it through gateway.WardenCheck.
func init() { gateway.WardenCheck = cli.Main }

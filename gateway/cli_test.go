package gateway_test

import (
	"github.com/warden-ai/warden/gateway"
	"github.com/warden-ai/warden/internal/cli"
)

// `warden check` is internal/cli, which imports package gateway: the
// package's own tests reach it through gateway.WardenCheck.
func init() { gateway.WardenCheck = cli.Main }

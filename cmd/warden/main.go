// Command warden is the single binary of the warden inference gateway:
// gateway, workers, `warden up`, model tools and the admin CLI.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/warden-ai/warden/cmd/warden/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

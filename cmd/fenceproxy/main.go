// Command fenceproxy is an HTTP proxy that enforces fencing tokens in front of
// backends that cannot check them, and the operator's client of its control
// API. Run `fenceproxy -h` for its commands and configuration.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "fenceproxy: %v\n", err)
		os.Exit(exitCode(err))
	}
}

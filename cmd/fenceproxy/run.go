package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/caarlos0/env/v11"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/internal/buildinfo"
	"github.com/fenceproxy/fenceproxy/server"
)

// Run runs the command named by args[0] ("serve" when absent; "demo";
// "version"; "-h")
// with environ (KEY=value pairs) as its environment, until ctx is done. It
// returns nil after a clean shutdown and an error when start-up fails, for
// example a configuration error naming every bad variable.
func Run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	return run(ctx, args, env.ToMap(environ), stdout, stderr, nil)
}

// run is Run with the environment as a map; started, when set, is called
// with the bound addresses once the server is built, before it serves.
func run(ctx context.Context, args []string, environ map[string]string, stdout, stderr io.Writer, started func(server.Addrs)) error {
	cmd := "serve"
	if len(args) > 0 {
		cmd = args[0]
	}
	if len(args) > 1 {
		return fmt.Errorf("%s takes no arguments (configuration comes from FENCEPROXY_* variables); run fenceproxy -h", cmd)
	}
	switch cmd {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		fmt.Fprint(stdout, config.Usage())
		return nil
	case "version", "-version", "--version":
		fmt.Fprint(stdout, buildinfo.Read())
		return nil
	case "serve":
		return serve(ctx, environ, stderr, started)
	case "demo":
		return demo(ctx, environ, stdout, stderr, started)
	default:
		return fmt.Errorf("unknown command %q; run fenceproxy -h", cmd)
	}
}

const usage = `fenceproxy: an HTTP proxy that forwards a write to its backend only when the
write's fencing token is not below the largest token seen for its resource.

Usage:
  fenceproxy [serve]   run the proxy, configured by the variables below
  fenceproxy demo      run an in-memory S3 backend with the proxy in front of it
  fenceproxy version   print the version, the VCS revision and the Go version (also --version)
  fenceproxy -h        print this help

Configuration (environment variables):
`

// serve reads the configuration from environ and runs a server.Server until
// ctx is done, logging JSON lines to stderr. started is as for run.
func serve(ctx context.Context, environ map[string]string, stderr io.Writer, started func(server.Addrs)) error {
	cfg, warnings, err := config.Parse(environ)
	if err != nil {
		return fmt.Errorf("invalid configuration (see fenceproxy -h):\n%w", err)
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	for _, w := range warnings {
		log.Warn(w)
	}
	srv, err := server.New(cfg, server.Options{Logger: log})
	if err != nil {
		return err
	}
	if started != nil {
		started(srv.Addrs())
	}
	return srv.Run(ctx)
}

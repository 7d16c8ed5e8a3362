package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/caarlos0/env/v11"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/internal/buildinfo"
	"github.com/fenceproxy/fenceproxy/server"
)

// Run runs the command named by args[0] ("serve" when absent; "demo",
// "check", "version", "fences", "leases", "-h") with environ (KEY=value
// pairs) as its environment, until ctx is done. serve and demo return nil
// after a clean shutdown and an error when start-up fails, for example a
// configuration error naming every bad variable; check returns an error
// when it found one (its report, on stdout, lists them); the operator
// commands return an error when the control API refuses the call or cannot
// be reached. exitCode maps
// the error to the process's exit status.
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
	serveOrDemo := cmd == "serve" || cmd == "demo"
	switch {
	case cmd == "fences" || cmd == "leases":
		return operate(ctx, cmd, args[1:], environ, stdout, stderr)
	case cmd == "check":
		return check(ctx, args[1:], environ, stdout)
	case serveOrDemo && len(args) == 2 && isHelp(args[1]):
		cmd = "-h" // the top-level help is theirs
	case strings.HasPrefix(cmd, "-") && !isHelp(cmd) && cmd != "-version" && cmd != "--version":
		return flagFirst(args)
	case serveOrDemo && len(args) > 1:
		return usagef("%s takes no arguments (configuration comes from FENCEPROXY_* variables); run fenceproxy -h", cmd)
	case len(args) > 1 && knownCommand(cmd):
		return usagef("%s takes no arguments; run fenceproxy -h", cmd)
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
		return usagef("unknown command %q; run fenceproxy -h", cmd)
	}
}

// knownCommand reports whether cmd is a command of its own (not fences or
// leases), so that an unknown one is named as such, with or without arguments.
func knownCommand(cmd string) bool {
	switch cmd {
	case "-h", "-help", "--help", "help", "version", "-version", "--version", "serve", "demo", "check":
		return true
	}
	return false
}

func isHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

// flagFirst is the error for a command line that starts with a flag: flags
// belong to a command and follow it. It shows the command line reordered
// when it names an operator command group.
func flagFirst(args []string) error {
	for i, a := range args {
		if a == "fences" || a == "leases" {
			reordered := append(slices.Clone(args[i:]), args[:i]...)
			return usagef("flags go after the command: fenceproxy %s; run fenceproxy %s -h", strings.Join(reordered, " "), a)
		}
	}
	return usagef("flags go after the command: fenceproxy COMMAND [arguments] %s; run fenceproxy -h", strings.Join(args, " "))
}

// usageError is a command line the command cannot run: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// exitCode is the exit status for Run's error: 0 for nil, 2 for a wrong
// command line (unknown command or flag, missing or extra arguments), 1 for
// anything else (configuration, start-up, a refusal of the control API, a
// control listener out of reach).
func exitCode(err error) int {
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		return 2
	default:
		return 1
	}
}

const usage = `fenceproxy: an HTTP proxy that forwards a write to its backend only when the
write's fencing token is not below the largest token seen for its resource.

Usage:
  fenceproxy [serve]   run the proxy, configured by the variables below
  fenceproxy demo      run an in-memory S3 backend with the proxy in front of it
  fenceproxy check     check the configuration, DATA_DIR and the upstream without starting, and
                       print the configuration in effect, secrets redacted (fenceproxy check -h)
  fenceproxy version   print the version, the VCS revision and the Go version (also --version)
  fenceproxy fences    list, show, raise and reset fences through a running proxy's control API
  fenceproxy leases    list, show and force-release leases through a running proxy's control API
  fenceproxy -h        print this help; fenceproxy fences -h and fenceproxy leases -h print theirs

Configuration (environment variables):
`

// serve reads the configuration from environ and runs a server.Server until
// ctx is done, logging JSON lines to stderr. started is as for run.
func serve(ctx context.Context, environ map[string]string, stderr io.Writer, started func(server.Addrs)) error {
	// The operator commands' variable: no "unknown variable" warning when
	// one environment serves both.
	if _, ok := environ[envControlURL]; ok {
		environ = maps.Clone(environ)
		delete(environ, envControlURL)
	}
	cfg, warnings, err := config.Parse(environ)
	if err != nil {
		return fmt.Errorf("invalid configuration (see fenceproxy -h):\n%w", err)
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	for _, w := range warnings {
		log.Warn(w)
	}
	setMemoryLimit(log)
	srv, err := server.New(cfg, server.Options{Logger: log, Stop: ctx})
	if err != nil {
		return err
	}
	if started != nil {
		started(srv.Addrs())
	}
	return srv.Run(ctx)
}

package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/server"
)

const checkHelp = `Usage: fenceproxy check [--require-upstream]

Checks the environment serve would start with, without starting: every
FENCEPROXY_* variable is validated (each bad one named, a misspelt name
pointed at the one it misspells), FENCEPROXY_DATA_DIR must be writable (or
creatable), and FENCEPROXY_UPSTREAM's host and port must take a TCP
connection (a warning unless --require-upstream). It prints the effective
configuration first: every variable, its value, and whether it is set or
a default; secrets show as <redacted>.

Exit status: 0 no error (warnings allowed); 1 an error; 2 a wrong command line.

Flags:
`

// checkTimeout bounds the upstream probe when UPSTREAM_DIAL_TIMEOUT is unusable.
const checkTimeout = 5 * time.Second

// varName finds the variable an error of config.Parse names first.
var varName = regexp.MustCompile(`^` + config.Prefix + `[A-Z0-9_]+`)

// finding is one line of check's report.
type finding struct{ level, text string } // level: ok, warning or error

// check runs `fenceproxy check`: the report on stdout, an error when it
// found an error (exit 1), a usageError for a wrong command line.
func check(ctx context.Context, args []string, environ map[string]string, stdout io.Writer) error {
	fs := flag.NewFlagSet("fenceproxy check", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	requireUpstream := fs.Bool("require-upstream", false, "an upstream that takes no TCP connection is an error, not a warning")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, checkHelp)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return nil
	} else if err != nil {
		return usagef("check: %v; run fenceproxy check -h", err)
	}
	if fs.NArg() > 0 {
		return usagef("check takes no arguments (configuration comes from FENCEPROXY_* variables), got %q; run fenceproxy check -h", fs.Args())
	}
	if _, ok := environ[envControlURL]; ok { // the operator commands' variable, as serve ignores it
		environ = maps.Clone(environ)
		delete(environ, envControlURL)
	}

	cfg, warnings, perr := config.Parse(environ)
	var findings []finding
	bad := map[string]bool{} // variables named by an error
	if perr != nil {
		for _, e := range perr.(interface{ Unwrap() []error }).Unwrap() {
			findings = append(findings, finding{"error", e.Error()})
			bad[varName.FindString(e.Error())] = true
		}
	} else {
		findings = append(findings, finding{"ok", "configuration: every variable is valid"})
	}
	for _, w := range warnings {
		findings = append(findings, finding{"warning", w})
	}
	if cfg.Store == "badger" && cfg.DataDir != "" && !bad[config.Prefix+"DATA_DIR"] {
		findings = append(findings, checkDataDir(cfg.DataDir))
	}
	if cfg.Upstream != nil && !bad[config.Prefix+"UPSTREAM"] {
		if cfg.UpstreamDialTimeout <= 0 {
			cfg.UpstreamDialTimeout = checkTimeout
		}
		addr, err := server.ProbeUpstream(ctx, cfg)
		switch {
		case err == nil:
			findings = append(findings, finding{"ok", fmt.Sprintf("%sUPSTREAM: %s takes TCP connections", config.Prefix, addr)})
		case *requireUpstream:
			findings = append(findings, finding{"error", fmt.Sprintf("%sUPSTREAM: no TCP connection to %s: %v", config.Prefix, addr, err)})
		default:
			findings = append(findings, finding{"warning", fmt.Sprintf("%sUPSTREAM: no TCP connection to %s: %v "+
				"(writes would get 502 until it takes them; --require-upstream makes this an error)", config.Prefix, addr, err)})
		}
	}

	if cfg.Tracing && perr == nil {
		exp, _ := config.TracingExport(environ)
		findings = append(findings, finding{"ok", fmt.Sprintf("%sTRACING: a span per request, exported by OTLP (%s) to %s (OTEL_EXPORTER_OTLP_*)",
			config.Prefix, exp.Protocol, exp.Endpoint)})
	}

	out := bufio.NewWriter(stdout)
	fmt.Fprintln(out, "Configuration (FENCEPROXY_* variables; secrets redacted):")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tVALUE\tSOURCE")
	for _, s := range cfg.Settings(environ) {
		value, source := s.Value, "set"
		if value == "" {
			value = "(unset)"
		}
		switch {
		case bad[s.Var] && s.Default:
			source = "invalid"
		case bad[s.Var]:
			source = "set, invalid"
			if !s.Secret {
				value = asGiven(environ[s.Var]) // what was read may be a zero value
			}
		case s.Default:
			source = "default"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Var, value, source)
	}
	tw.Flush()
	fmt.Fprintln(out, "\nChecks:")
	count := map[string]int{}
	for _, f := range findings {
		count[f.level]++
		fmt.Fprintf(out, "  %-7s  %s\n", f.level, strings.ReplaceAll(f.text, "\n", "\n           "))
	}
	fmt.Fprintf(out, "\nResult: %s, %s\n", plural(count["error"], "error"), plural(count["warning"], "warning"))
	if err := out.Flush(); err != nil {
		return err
	}
	if n := count["error"]; n > 0 {
		return fmt.Errorf("check: %s (listed above)", plural(n, "error"))
	}
	return nil
}

// checkDataDir says whether fenceproxy could write in dir: a file created
// and removed in it, or, when dir does not exist yet, in the directory it
// would be created in.
func checkDataDir(dir string) finding {
	name := config.Prefix + "DATA_DIR"
	fi, err := os.Stat(dir)
	switch {
	case err == nil && !fi.IsDir():
		return finding{"error", fmt.Sprintf("%s: %s is not a directory", name, dir)}
	case err == nil:
		if err := tryWrite(dir); err != nil {
			return finding{"error", fmt.Sprintf("%s: %s is not writable: %v", name, dir, err)}
		}
		return finding{"ok", fmt.Sprintf("%s: %s is writable", name, dir)}
	case !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
		return finding{"error", fmt.Sprintf("%s: %v", name, err)}
	}
	// Missing (or below a file): serve creates it (MkdirAll), so its nearest existing
	// ancestor must be a writable directory.
	parent := filepath.Dir(filepath.Clean(dir))
	for {
		fi, err := os.Stat(parent)
		switch {
		case err == nil && !fi.IsDir():
			return finding{"error", fmt.Sprintf("%s: %s does not exist and cannot be created: %s is not a directory", name, dir, parent)}
		case err == nil:
			if err := tryWrite(parent); err != nil {
				return finding{"error", fmt.Sprintf("%s: %s does not exist and cannot be created in %s: %v", name, dir, parent, err)}
			}
			return finding{"ok", fmt.Sprintf("%s: %s does not exist yet; it will be created in %s, which is writable", name, dir, parent)}
		case !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
			return finding{"error", fmt.Sprintf("%s: %v", name, err)}
		}
		next := filepath.Dir(parent)
		if next == parent {
			return finding{"error", fmt.Sprintf("%s: %s: no ancestor of it exists", name, dir)}
		}
		parent = next
	}
}

// tryWrite creates, syncs and removes a file in dir.
func tryWrite(dir string) error {
	f, err := os.CreateTemp(dir, ".fenceproxy-check-*")
	if err != nil {
		return err
	}
	_, werr := f.Write([]byte("fenceproxy check\n"))
	if werr == nil {
		werr = f.Sync()
	}
	cerr := f.Close()
	rerr := os.Remove(f.Name())
	return errors.Join(werr, cerr, rerr)
}

// asGiven is a variable's value as given, with a URL's password redacted.
func asGiven(v string) string {
	if u, err := url.Parse(v); err == nil && u.User != nil {
		return u.Redacted()
	}
	return v
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

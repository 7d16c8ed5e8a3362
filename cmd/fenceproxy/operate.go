package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/wire"
)

// The operator commands, `fenceproxy fences ...` and `fenceproxy leases ...`:
// thin over client.Control, which makes the control API calls.

// Variables of the operator commands. The bearers are the server's own
// variables, so that one secret serves both.
const (
	envControlURL = config.Prefix + "CONTROL_URL"
	envAdminToken = config.Prefix + "ADMIN_TOKEN"
	envLeaseToken = config.Prefix + "LEASE_TOKEN"
)

const (
	defaultControlURL = "http://127.0.0.1:9090"
	defaultPageSize   = 1000  // the control API's default page
	maxPageSize       = 10000 // the control API's largest page
	defaultOpTimeout  = time.Minute
)

// opCommand is one operator command, e.g. `fences list`.
type opCommand struct {
	name    string   // "list"
	args    []string // its arguments, e.g. RESOURCE, TOKEN
	flags   string   // its own flags in the group's help, e.g. "[--prefix P]"
	summary string   // one line for the group's help
	about   string   // its help text
	bearer  string   // the variable whose value it sends as its bearer
	listing bool     // it takes --prefix, --after, --limit and --page-size
	confirm bool     // it takes --confirm
	run     func(ctx context.Context, o *opRun) error
}

// opRun is what a command runs with: its arguments, flags and client.
type opRun struct {
	api      *client.Control
	args     []string
	out      io.Writer
	json     bool
	prefix   string
	after    string
	limit    int // 0: no limit
	pageSize int
	confirm  string
	more     string // set by a listing that --limit stopped: its next
}

// opGroups are the operator commands by group.
var opGroups = map[string]struct {
	about string
	cmds  []opCommand
}{
	"fences": {
		about: "Reads and changes the fences (the durable per-resource maxima) of a running fenceproxy through its control API.",
		cmds: []opCommand{
			{name: "list", flags: "[--prefix P] [--after R] [--limit N]", summary: "the fences in resource-key order (admin)",
				about: "Lists the fences in resource-key order, following the pages to the end, or up to --limit fences " +
					"(the JSON then carries next, for --after; after a table, stderr shows the command that lists on). Admin call.",
				bearer: envAdminToken, listing: true, run: listFences},
			{name: "show", args: []string{"RESOURCE"}, summary: "a resource's fence",
				about: "Shows a resource's fence: the largest token admitted for it. A resource never raised above 0 is refused (404). " +
					"A name ending in \"/\" is a prefix fence, which covers every key below it.", run: showFence},
			{name: "raise", args: []string{"RESOURCE", "TOKEN"}, summary: "raise a fence to max(current, TOKEN) (admin)",
				about: "Raises a resource's fence to max(current, TOKEN), durably, cutting off and waiting out the writes with smaller " +
					"tokens still in flight, and shows the fence after it. A name ending in \"/\" is a prefix fence: its raise cuts " +
					"and waits out those writes on every key below it. Admin call.", bearer: envAdminToken, run: raiseFence},
			{name: "reset", args: []string{"RESOURCE"}, flags: "--confirm RESOURCE", summary: "remove a fence and its lease record (admin)",
				about: "Removes a resource's fence and its lease record, once no write on it is in flight, and shows the maximum " +
					"removed. Writes with smaller tokens are admitted again, so the resource key must be repeated as --confirm. " +
					"Admin call.", bearer: envAdminToken, confirm: true, run: resetFence},
		},
	},
	"leases": {
		about: "Reads and force-releases the leases of a running fenceproxy through its control API.",
		cmds: []opCommand{
			{name: "list", flags: "[--prefix P] [--after N] [--limit N]", summary: "the leases in name order, with their state (admin)",
				about: "Lists the stored leases in name order, each with its state now (released and expired ones included), " +
					"following the pages to the end, or up to --limit leases (the JSON then carries next, for --after; after a " +
					"table, stderr shows the command that lists on). Admin call.",
				bearer: envAdminToken, listing: true, run: listLeases},
			{name: "show", args: []string{"NAME"}, summary: "a lease and its state",
				about:  "Shows a lease and its state now. Sends FENCEPROXY_LEASE_TOKEN as the bearer when it is set.",
				bearer: envLeaseToken, run: showLease},
			{name: "release", args: []string{"NAME"}, summary: "force-release a lease, whoever holds it (admin)",
				about: "Ends a lease whoever holds it, so that others may acquire it at once. Its token stays spent and the " +
					"fence stays. Admin call.", bearer: envAdminToken, run: releaseLease},
		},
	},
}

const opFooter = `Every command takes --control URL (default $FENCEPROXY_CONTROL_URL, else
http://127.0.0.1:9090), --output table|json (json: the control API's JSON) and
--timeout; flags follow the command, before or after its arguments.

Environment:
  FENCEPROXY_CONTROL_URL  the control listener's base URL
  FENCEPROXY_ADMIN_TOKEN  sent as the bearer of admin calls (the server's variable: one secret for both)
  FENCEPROXY_LEASE_TOKEN  sent as the bearer of lease reads, when set

Exit status: 0 done; 1 refused by the control API (its title and detail are
printed) or not reached; 2 a wrong command line.
`

// operate runs `fenceproxy <group> <command> [arguments] [flags]`, printing
// its output to stdout, and to stderr, after a table that --limit stopped,
// the command line that lists on from there. A wrong command line is a
// usageError; a refusal of the control API or a failure to reach it is any
// other error.
func operate(ctx context.Context, group string, args []string, environ map[string]string, stdout, stderr io.Writer) error {
	g := opGroups[group]
	var names []string
	for _, c := range g.cmds {
		names = append(names, c.name)
	}
	if len(args) == 0 {
		return usagef("%s needs a command (%s); run fenceproxy %s -h", group, strings.Join(names, ", "), group)
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		printGroupHelp(stdout, group)
		return nil
	}
	var cmd *opCommand
	for i := range g.cmds {
		if g.cmds[i].name == args[0] {
			cmd = &g.cmds[i]
		}
	}
	if cmd == nil {
		return usagef("unknown command %q for %s (%s); run fenceproxy %s -h", args[0], group, strings.Join(names, ", "), group)
	}
	full := group + " " + cmd.name

	fs := flag.NewFlagSet("fenceproxy "+full, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned; -h prints the help below
	controlURL := environ[envControlURL]
	if controlURL == "" {
		controlURL = defaultControlURL
	}
	o := &opRun{pageSize: defaultPageSize}
	fs.StringVar(&controlURL, "control", controlURL, "the control listener's base `URL` ($"+envControlURL+")")
	output := "table"
	fs.StringVar(&output, "output", output, "output `format`: table, or json (the control API's JSON)")
	fs.StringVar(&output, "o", output, "the output `format`, as --output")
	timeout := defaultOpTimeout
	fs.DurationVar(&timeout, "timeout", timeout, "longest wait for each call to the control API")
	if cmd.listing {
		fs.StringVar(&o.prefix, "prefix", "", "only names that start with `P`")
		fs.StringVar(&o.after, "after", "", "only names that sort after `NAME` (a listing's next)")
		fs.IntVar(&o.limit, "limit", 0, "at most `N` entries (0: all)")
		fs.IntVar(&o.pageSize, "page-size", defaultPageSize, fmt.Sprintf("entries per call to the control API (1 to %d)", maxPageSize))
	}
	if cmd.confirm {
		fs.StringVar(&o.confirm, "confirm", "", "the resource key again, to confirm the reset")
	}

	pos, err := parseInterspersed(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		printCommandHelp(stdout, fs, group, cmd)
		return nil
	}
	if err != nil {
		return usagef("%s: %v; run fenceproxy %s -h", full, err, full)
	}
	if len(pos) != len(cmd.args) {
		if len(cmd.args) == 0 {
			return usagef("%s takes no arguments, got %q; run fenceproxy %s -h", full, pos, full)
		}
		return usagef("%s takes %s, got %d arguments; run fenceproxy %s -h", full, strings.Join(cmd.args, " "), len(pos), full)
	}
	switch {
	case output != "table" && output != "json":
		return usagef("%s: --output is table or json, not %q", full, output)
	case o.limit < 0:
		return usagef("%s: --limit is 0 (all) or more, not %d", full, o.limit)
	case o.pageSize < 1 || o.pageSize > maxPageSize:
		return usagef("%s: --page-size is 1 to %d, not %d", full, maxPageSize, o.pageSize)
	case timeout <= 0:
		return usagef("%s: --timeout must be positive", full)
	}
	if u, err := url.Parse(controlURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("%s: the control URL %q is not an http:// or https:// URL (--control or %s)", full, controlURL, envControlURL)
	}

	out := bufio.NewWriter(stdout)
	o.out, o.args, o.json = out, pos, output == "json"
	o.api = &client.Control{
		BaseURL:     controlURL,
		HTTP:        &http.Client{Timeout: timeout},
		AdminBearer: environ[envAdminToken],
		LeaseBearer: environ[envLeaseToken],
	}
	err = cmd.run(ctx, o)
	if ferr := out.Flush(); err == nil && ferr != nil {
		err = ferr
	}
	if err != nil {
		return opError(full, pos, cmd.bearer, environ, controlURL, err)
	}
	if o.more != "" && !o.json { // the JSON carries next itself
		more := []string{"fenceproxy", full, "--after", shellQuote(o.more)}
		if o.prefix != "" {
			more = append(more, "--prefix", shellQuote(o.prefix))
		}
		// A full last page carries next even when nothing follows it.
		fmt.Fprintf(stderr, "more may follow: %s --limit %d\n", strings.Join(more, " "), o.limit)
	}
	return nil
}

// shellQuote returns s as one word for a POSIX shell: as is when it holds
// only characters no shell treats specially, else in single quotes.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-:@%+=,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// opError describes a failed command: the problem's status, title and
// detail for a refusal, with a hint when the bearer it needs is not set;
// what failed and where for a control API out of reach.
func opError(full string, args []string, bearer string, environ map[string]string, controlURL string, err error) error {
	var ue *usageError
	if errors.As(err, &ue) {
		return err
	}
	what := strings.Join(append([]string{full}, args...), " ")
	var apiErr *client.APIError
	if errors.As(err, &apiErr) {
		msg := fmt.Sprintf("%s: %d %s", what, apiErr.Status, apiErr.Title)
		if detail := withoutTitle(apiErr.Detail, apiErr.Title); detail != "" {
			msg += ": " + detail
		}
		if apiErr.Status == http.StatusUnauthorized && bearer != "" && environ[bearer] == "" {
			msg += fmt.Sprintf(" (%s is not set in this environment)", bearer)
		}
		return errors.New(msg)
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		return fmt.Errorf("%s: %v (the control API at %s; set --control or %s)", what, urlErr, controlURL, envControlURL)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// withoutTitle returns detail without a leading "title: " (any case): the
// control API's details often repeat the title, which is printed already.
func withoutTitle(detail, title string) string {
	if n := len(title) + 2; title != "" && len(detail) > n && strings.EqualFold(detail[:n], title+": ") {
		return detail[n:]
	}
	return detail
}

// parseInterspersed parses flags that come before, between or after the
// positional arguments, and returns those; after "--" everything is one.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func printGroupHelp(w io.Writer, group string) {
	g := opGroups[group]
	fmt.Fprintf(w, "Usage: fenceproxy %s COMMAND [arguments] [flags]\n\n%s\n\nCommands:\n", group, wrap(g.about))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range g.cmds {
		fmt.Fprintf(tw, "  %s\t%s\n", strings.Join(append(append([]string{c.name}, c.args...), c.flags), " "), c.summary)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nRun fenceproxy %s COMMAND -h for a command's flags.\n\n%s", group, opFooter)
}

func printCommandHelp(w io.Writer, fs *flag.FlagSet, group string, c *opCommand) {
	synopsis := strings.Join(append([]string{"fenceproxy", group, c.name}, c.args...), " ")
	fmt.Fprintf(w, "Usage: %s [flags]\n\n%s\n\nFlags:\n", synopsis, wrap(c.about))
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprintf(w, "\n%s", opFooter)
}

// wrap breaks text into lines of at most 80 bytes at spaces.
func wrap(text string) string {
	var b strings.Builder
	n := 0
	for i, word := range strings.Fields(text) {
		if i > 0 && n+1+len(word) > 80 {
			b.WriteByte('\n')
			n = 0
		} else if i > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
}

func listFences(ctx context.Context, o *opRun) error {
	return list(o, "fences", []string{"RESOURCE", "TOKEN"}, func(after string, n int) ([]wire.Fence, string, error) {
		page, err := o.api.ListFences(ctx, o.prefix, after, n)
		return page.Fences, page.Next, err
	}, func(f wire.Fence) []string { return []string{f.Resource, token(f.Token)} })
}

func listLeases(ctx context.Context, o *opRun) error {
	return list(o, "leases", []string{"NAME", "HOLDER", "TOKEN", "STATE", "TTL", "EXPIRES_AT"}, func(after string, n int) ([]wire.Lease, string, error) {
		page, err := o.api.ListLeases(ctx, o.prefix, after, n)
		return page.Leases, page.Next, err
	}, func(l wire.Lease) []string {
		return []string{l.Name, l.Holder, token(l.Token), l.State, l.TTL, timestamp(l.ExpiresAt)}
	})
}

func showFence(ctx context.Context, o *opRun) error {
	f, err := o.api.GetFence(ctx, o.args[0])
	return o.fence(f, "token", err)
}

func raiseFence(ctx context.Context, o *opRun) error {
	t, err := fence.ParseToken(o.args[1])
	if err != nil {
		return usagef("fences raise: TOKEN %q: %v", o.args[1], err)
	}
	f, err := o.api.RaiseFence(ctx, o.args[0], t)
	return o.fence(f, "token", err)
}

func resetFence(ctx context.Context, o *opRun) error {
	resource := o.args[0]
	switch {
	case o.confirm == "":
		return usagef("fences reset lowers the fence of %q: writes with smaller tokens are admitted again; "+
			"to go ahead, repeat the resource key: --confirm %s", resource, resource)
	case o.confirm != resource:
		return usagef("fences reset: --confirm %q is not the resource %q; nothing changed", o.confirm, resource)
	}
	f, err := o.api.ResetFence(ctx, resource, o.confirm)
	return o.fence(f, "removed token", err)
}

func showLease(ctx context.Context, o *opRun) error {
	l, err := o.api.GetLease(ctx, o.args[0])
	return o.lease(l, err)
}

func releaseLease(ctx context.Context, o *opRun) error {
	l, err := o.api.ForceRelease(ctx, o.args[0])
	return o.lease(l, err)
}

// fence prints f: as the API's JSON, or as lines of field and value with
// the token labelled tokenLabel.
func (o *opRun) fence(f wire.Fence, tokenLabel string, err error) error {
	if err != nil {
		return err
	}
	if o.json {
		return o.writeJSON(f)
	}
	return o.fields([][2]string{{"resource", f.Resource}, {tokenLabel, token(f.Token)}})
}

// lease prints l: as the API's JSON, or as lines of field and value.
func (o *opRun) lease(l wire.Lease, err error) error {
	if err != nil {
		return err
	}
	if o.json {
		return o.writeJSON(l)
	}
	return o.fields([][2]string{{"name", l.Name}, {"holder", l.Holder}, {"token", token(l.Token)}, {"state", l.State},
		{"ttl", l.TTL}, {"acquired_at", timestamp(l.AcquiredAt)}, {"renewed_at", timestamp(l.RenewedAt)},
		{"expires_at", timestamp(l.ExpiresAt)}})
}

func (o *opRun) fields(rows [][2]string) error {
	tw := tabwriter.NewWriter(o.out, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	return tw.Flush()
}

// writeJSON writes v as the control API writes it: json.Marshal and a newline.
func (o *opRun) writeJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = o.out.Write(append(b, '\n'))
	return err
}

// list pages through a listing from o.after with fetch (after, page size)
// until its end or o.limit entries, and prints every page as it comes: a
// table (header, then row's columns), or JSON exactly as json.Marshal writes
// the API's list type with every entry in one page ({"<key>":[...]}, with
// "next" when o.limit stopped it before the end).
func list[T any](o *opRun, key string, header []string, fetch func(after string, n int) ([]T, string, error), row func(T) []string) error {
	tw := tabwriter.NewWriter(o.out, 0, 0, 2, ' ', 0)
	if o.json {
		fmt.Fprintf(o.out, `{"%s":[`, key)
	} else {
		fmt.Fprintln(tw, strings.Join(header, "\t"))
	}
	after, count, next := o.after, 0, ""
	for {
		n := o.pageSize
		if o.limit > 0 {
			n = min(n, o.limit-count)
		}
		items, pageNext, err := fetch(after, n)
		if err != nil {
			return err
		}
		for _, it := range items {
			if o.json {
				b, err := json.Marshal(it)
				if err != nil {
					return err
				}
				if count > 0 {
					o.out.Write([]byte{','})
				}
				o.out.Write(b)
			} else {
				fmt.Fprintln(tw, strings.Join(row(it), "\t"))
			}
			count++
		}
		if err := tw.Flush(); err != nil { // a page at a time: columns align within a page
			return err
		}
		if pageNext == "" {
			break
		}
		if o.limit > 0 && count >= o.limit {
			next = pageNext
			break
		}
		after = pageNext
	}
	o.more = next
	if o.json {
		o.out.Write([]byte{']'})
		if next != "" {
			b, _ := json.Marshal(next)
			fmt.Fprintf(o.out, `,"next":%s`, b)
		}
		_, err := o.out.Write([]byte("}\n"))
		return err
	}
	return nil
}

func token(t wire.Token) string { return fmt.Sprint(uint64(t)) }

// timestamp is t in UTC to the second, RFC 3339; "" for the zero time.
func timestamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

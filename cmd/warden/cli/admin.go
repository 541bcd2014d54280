package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/warden-ai/warden/internal/adminclient"
)

// Environment variables read by `warden admin` and `warden check`.
const (
	envAdminURL   = "WARDEN_ADMIN_URL"
	envAdminToken = "WARDEN_ADMIN_TOKEN"
	envCACert     = "WARDEN_CACERT"
)

// defaultAdminURL is where `warden admin` looks without --url or
// WARDEN_ADMIN_URL: the default gateway.admin_listen.
const defaultAdminURL = "https://127.0.0.1:8444"

// adminConn holds the connection flags shared by every admin subcommand
// and `warden check`.
type adminConn struct {
	url, token, tokenFile, caCert string
	json                          bool
	timeout                       time.Duration
}

// newAdminConn returns the connection settings with the environment's
// defaults.
func newAdminConn() *adminConn {
	return &adminConn{
		url:     os.Getenv(envAdminURL),
		caCert:  os.Getenv(envCACert),
		timeout: 30 * time.Second,
	}
}

// register adds the connection flags to fs, defaulting to c's values, so
// that they may be given before or after the subcommand. fallback says
// where the URL comes from without --url and WARDEN_ADMIN_URL.
func (c *adminConn) register(fs *flag.FlagSet, fallback string) {
	fs.StringVar(&c.url, "url", c.url, "admin API base URL (default $"+envAdminURL+", else "+fallback+")")
	fs.StringVar(&c.token, "token", c.token, "admin token (prefer --token-file or $"+envAdminToken+": arguments are visible to other users)")
	fs.StringVar(&c.tokenFile, "token-file", c.tokenFile, "file holding the admin token")
	fs.StringVar(&c.caCert, "cacert", c.caCert, "PEM CA certificate to trust besides the system roots, e.g. the dev CA (default $"+envCACert+")")
	fs.BoolVar(&c.json, "json", c.json, "print JSON instead of tables")
	fs.DurationVar(&c.timeout, "timeout", c.timeout, "timeout of each API call")
}

// resolveToken returns the admin token from --token, --token-file or
// WARDEN_ADMIN_TOKEN, in that order, or "" when none is set.
func (c *adminConn) resolveToken() (string, error) {
	switch {
	case c.token != "":
		return c.token, nil
	case c.tokenFile != "":
		return readTokenFile(c.tokenFile)
	}
	return os.Getenv(envAdminToken), nil
}

// readTokenFile reads a token file, ignoring surrounding whitespace.
func readTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("admin token file %s is empty", path)
	}
	return tok, nil
}

// client returns an admin API client for url and token.
func (c *adminConn) client(url, token string) (*adminclient.Client, error) {
	return adminclient.New(adminclient.Config{URL: url, Token: token, CAFile: c.caCert, Timeout: c.timeout})
}

// adminCmd is one `warden admin` subcommand.
type adminCmd struct {
	path    string // "tenants create"
	args    string // synopsis of its arguments and own flags
	summary string
	run     func(ctx context.Context, a *adminRun, args []string) error
}

func adminCommands() []adminCmd {
	return []adminCmd{
		{"tenants create", "<id> [--name N] [--weight W] [--disabled] [limit flags]", "create a tenant", adminTenantCreate},
		{"tenants list", "", "list tenants", adminTenantList},
		{"tenants get", "<id>", "show a tenant", adminTenantGet},
		{"tenants update", "<id> [--name N] [--weight W] [--disabled=true|false] [limit flags]", "change a tenant", adminTenantUpdate},
		{"tenants delete", "<id>", "delete a tenant and revoke its keys", adminTenantDelete},
		{"keys issue", "<tenant> [--name N]", "issue an API key (shown once)", adminKeyIssue},
		{"keys list", "[--tenant T] [--prefix wdn_…]", "list keys (never their secrets)", adminKeyList},
		{"keys revoke", "<key-id|wdn_…>", "revoke a key", adminKeyRevoke},
		{"limits get", "<tenant>", "show a tenant's limits", adminLimitsGet},
		{"limits set", "<tenant> [limit flags]", "change a tenant's limits (flags not given keep their value)", adminLimitsSet},
		{"model-limits list", "", "list per-model limits", adminModelLimitsList},
		{"model-limits get", "<model>", "show a model's limits", adminModelLimitsGet},
		{"model-limits set", "<model> [--max-context N] [--max-output-tokens N] [--allowed-tenants a,b]", "set a model's limits (flags not given keep their value)", adminModelLimitsSet},
		{"model-limits delete", "<model>", "remove a model's limits", adminModelLimitsDelete},
		{"aliases list", "", "list the model aliases in effect", adminAliasList},
		{"aliases set", "<alias> <model>", "create an alias or point it at another model (live on every gateway)", adminAliasSet},
		{"aliases delete", "<alias>", "remove an alias set with aliases set", adminAliasDelete},
		{"adapter add", "<dir> --base M --name N --owner T [--share T2,...] [--pin]", "register the LoRA adapter in dir (adapter_config.json, adapter_model.safetensors)", adminAdapterAdd},
		{"adapter list", "", "list the registered LoRA adapters", adminAdapterList},
		{"adapter show", "<base:adapter>", "show a LoRA adapter", adminAdapterShow},
		{"adapter share", "<base:adapter> [--with T2,...]", "set the tenants a LoRA adapter is shared with (replaces the list)", adminAdapterShare},
		{"adapter rm", "<base:adapter>", "delete a LoRA adapter", adminAdapterDelete},
		{"usage", "<tenant> [--from YYYY-MM-DD] [--to YYYY-MM-DD]", "a tenant's usage per day and model (default today, UTC)", adminUsage},
		{"workers cordon", "<id>", "stop new placements on a worker (its requests run on)", adminWorkerCordon},
		{"workers uncordon", "<id>", "place requests on a worker again", adminWorkerUncordon},
		{"workers drain", "<id> [--wait D]", "cordon a worker and wait until its requests have ended", adminWorkerDrain},
		{"workers", "", "registered workers and their KV pools", adminWorkers},
		{"models", "", "configured vs effective context per model", adminModels},
		{"requests list", "[--tenant T] [--model M]", "requests in flight", adminRequestList},
		{"requests get", "<id>", "one request, in flight or recently finished", adminRequestGet},
		{"requests abort", "<id>", "abort a request (cause admin)", adminRequestAbort},
	}
}

func adminUsageText(w io.Writer) { adminGroupUsage(w, "") }

// adminGroupUsage prints the usage of the admin commands whose first word
// is group (`warden admin tenants -h`), or of every command for "".
func adminGroupUsage(w io.Writer, group string) {
	synopsis := "<command>"
	if group != "" {
		synopsis = group + " <command>"
	}
	fmt.Fprintf(w, "usage: warden admin [connection flags] %s [arguments] [flags]\n\ncommands:\n", synopsis)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range adminCommands() {
		if group != "" && strings.Fields(c.path)[0] != group {
			continue
		}
		// Positional arguments only; -h shows a command's flags.
		words := []string{c.path}
		for _, f := range strings.Fields(c.args) {
			if strings.HasPrefix(f, "<") {
				words = append(words, f)
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\n", strings.Join(words, " "), c.summary)
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "\nlimit flags: --requests-per-minute N --tokens-per-minute N --max-concurrent N --budget N")
	fmt.Fprintln(w, "             --budget-period day|month|DURATION --allowed-models a,b --max-priority N (0 = priority 0 only)")
	fmt.Fprintln(w, "\nconnection flags (before or after the command): --url --token --token-file --cacert --json --timeout")
	fmt.Fprintln(w, "Run 'warden admin <command> -h' for a command's flags.")
}

// isAdminGroup reports whether word is the first word of an admin
// command of several words (tenants, keys, workers, ...).
func isAdminGroup(word string) bool {
	for _, c := range adminCommands() {
		if first, rest, _ := strings.Cut(c.path, " "); first == word && rest != "" {
			return true
		}
	}
	return false
}

// isHelpFlag reports whether arg asks for help as the flag package reads it.
func isHelpFlag(arg string) bool {
	return arg == "-h" || arg == "--h" || arg == "-help" || arg == "--help"
}

// adminRun is the state of one `warden admin` invocation.
type adminRun struct {
	e    *env
	conn *adminConn
	cmd  adminCmd
}

func runAdmin(ctx context.Context, e *env, args []string) error {
	conn := newAdminConn()
	fs := flag.NewFlagSet("admin", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() { adminUsageText(e.stderr) }
	conn.register(fs, defaultAdminURL)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	rest := fs.Args()
	if len(rest) == 0 {
		adminUsageText(e.stderr)
		return errUsage
	}
	for _, c := range adminCommands() {
		words := strings.Fields(c.path)
		if len(rest) >= len(words) && strings.Join(rest[:len(words)], " ") == c.path {
			return c.run(ctx, &adminRun{e: e, conn: conn, cmd: c}, rest[len(words):])
		}
	}
	if isAdminGroup(rest[0]) {
		// A group without its command (`warden admin tenants`), or asking
		// for help (`warden admin tenants -h`): the group's commands.
		adminGroupUsage(e.stderr, rest[0])
		if len(rest) > 1 && !isHelpFlag(rest[1]) {
			fmt.Fprintf(e.stderr, "\nwarden admin: unknown command %q\n", strings.Join(rest, " "))
		}
		return groupUsageResult(rest[1:])
	}
	fmt.Fprintf(e.stderr, "warden admin: unknown command %q\n\n", strings.Join(rest, " "))
	adminUsageText(e.stderr)
	return errUsage
}

// flags returns the subcommand's flag set, with the connection flags.
func (a *adminRun) flags() *flag.FlagSet {
	fs := newFlags(a.e, "admin "+a.cmd.path, strings.TrimSpace("admin "+a.cmd.path+" "+a.cmd.args))
	a.conn.register(fs, defaultAdminURL)
	return fs
}

// parse parses args, flags and positional arguments in any order ("--"
// ends the flags), and requires exactly len(names) positional arguments.
func (a *adminRun) parse(fs *flag.FlagSet, args []string, names ...string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errUsage
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	switch {
	case len(pos) == len(names):
		return pos, nil
	case len(names) == 0:
		return nil, a.usageError(fs, "unexpected arguments: %s", strings.Join(pos, " "))
	}
	return nil, a.usageError(fs, "want %s", strings.Join(names, " "))
}

// usageError reports a misuse of the subcommand, prints its usage and
// returns errUsage.
func (a *adminRun) usageError(fs *flag.FlagSet, format string, args ...any) error {
	fmt.Fprintf(a.e.stderr, "warden admin %s: %s\n", a.cmd.path, fmt.Sprintf(format, args...))
	fs.Usage()
	return errUsage
}

// client connects with the resolved URL and token.
func (a *adminRun) client() (*adminclient.Client, error) {
	token, err := a.conn.resolveToken()
	if err != nil {
		return nil, err
	}
	if token == "" {
		fmt.Fprintf(a.e.stderr, "warden admin: no admin token: use --token-file, $%s or --token\n", envAdminToken)
		return nil, errUsage
	}
	url := a.conn.url
	if url == "" {
		url = defaultAdminURL
	}
	return a.conn.client(url, token)
}

// open parses args as parse does, then connects as client does: the
// prologue of every subcommand that needs no checks between the two.
func (a *adminRun) open(fs *flag.FlagSet, args []string, names ...string) ([]string, *adminclient.Client, error) {
	pos, err := a.parse(fs, args, names...)
	if err != nil {
		return nil, nil, err
	}
	c, err := a.client()
	if err != nil {
		return nil, nil, err
	}
	return pos, c, nil
}

// show returns err, the error of the call that produced v, if there is
// one; otherwise it prints v as JSON with --json, and otherwise calls human.
func (a *adminRun) show(v any, err error, human func(w io.Writer)) error {
	if err != nil {
		return err
	}
	if a.conn.json {
		return printJSON(a.e.stdout, v)
	}
	tw := tabwriter.NewWriter(a.e.stdout, 0, 0, 2, ' ', 0)
	human(tw)
	return tw.Flush()
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func listOr(items []string, none string) string {
	if len(items) == 0 {
		return none
	}
	return strings.Join(items, ",")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

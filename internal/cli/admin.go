package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/tenant"
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
		{"usage", "<tenant> [--from YYYY-MM-DD] [--to YYYY-MM-DD]", "a tenant's usage per day and model (default today, UTC)", adminUsage},
		{"workers", "", "registered workers and their KV pools", adminWorkers},
		{"models", "", "configured vs effective context per model", adminModels},
		{"requests list", "[--tenant T] [--model M]", "requests in flight", adminRequestList},
		{"requests get", "<id>", "one request, in flight or recently finished", adminRequestGet},
		{"requests abort", "<id>", "abort a request (cause admin)", adminRequestAbort},
	}
}

func adminUsageText(w io.Writer) {
	fmt.Fprintln(w, "usage: warden admin [connection flags] <command> [arguments] [flags]\n\ncommands:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range adminCommands() {
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
	fmt.Fprintln(w, "             --budget-period day|month|DURATION --allowed-models a,b --max-priority N (0 = unlimited)")
	fmt.Fprintln(w, "\nconnection flags (before or after the command): --url --token --token-file --cacert --json --timeout")
	fmt.Fprintln(w, "Run 'warden admin <command> -h' for a command's flags.")
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
	if len(pos) != len(names) {
		if len(names) == 0 {
			fmt.Fprintf(a.e.stderr, "warden admin %s: unexpected arguments: %s\n", a.cmd.path, strings.Join(pos, " "))
		} else {
			fmt.Fprintf(a.e.stderr, "warden admin %s: want %s\n", a.cmd.path, strings.Join(names, " "))
		}
		fs.Usage()
		return nil, errUsage
	}
	return pos, nil
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

// show prints v as JSON with --json, and otherwise calls human.
func (a *adminRun) show(v any, human func(w io.Writer)) error {
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

// limitFlags are the flags that set tenant limits.
type limitFlags struct {
	fs                 *flag.FlagSet
	rpm, tpm, conc, bg int64
	period, models     string
	prio               int
}

func addLimitFlags(fs *flag.FlagSet) *limitFlags {
	l := &limitFlags{fs: fs}
	fs.Int64Var(&l.rpm, "requests-per-minute", 0, "requests per minute (0 = unlimited)")
	fs.Int64Var(&l.tpm, "tokens-per-minute", 0, "prompt + completion tokens per minute (0 = unlimited)")
	fs.Int64Var(&l.conc, "max-concurrent", 0, "requests in flight at once (0 = unlimited)")
	fs.Int64Var(&l.bg, "budget", 0, "tokens per budget period (0 = unlimited)")
	fs.StringVar(&l.period, "budget-period", "", "budget period: day, month or a duration such as 168h")
	fs.StringVar(&l.models, "allowed-models", "", "comma-separated models the tenant may use (empty = all)")
	fs.IntVar(&l.prio, "max-priority", 0, "highest request priority (0 = unlimited)")
	return l
}

// patch returns the limits given on the command line, or nil if none.
func (l *limitFlags) patch() *adminclient.LimitsPatch {
	var p adminclient.LimitsPatch
	l.fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "requests-per-minute":
			p.RequestsPerMinute = &l.rpm
		case "tokens-per-minute":
			p.TokensPerMinute = &l.tpm
		case "max-concurrent":
			p.MaxConcurrent = &l.conc
		case "budget":
			p.Budget = &l.bg
		case "budget-period":
			bp := tenant.BudgetPeriod(l.period)
			p.BudgetPeriod = &bp
		case "allowed-models":
			models := splitList(l.models)
			p.AllowedModels = &models
		case "max-priority":
			p.MaxPriority = &l.prio
		}
	})
	if p == (adminclient.LimitsPatch{}) {
		return nil
	}
	return &p
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	out := []string{}
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func adminTenantCreate(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	name := fs.String("name", "", "display name")
	weight := fs.Int("weight", 0, "fair-scheduling weight (0 = default 1)")
	disabled := fs.Bool("disabled", false, "create the tenant disabled")
	lf := addLimitFlags(fs)
	pos, err := a.parse(fs, args, "<id>")
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	in := adminclient.TenantCreate{ID: pos[0], Name: *name, Weight: *weight, Disabled: *disabled}
	if p := lf.patch(); p != nil {
		in.Limits = p.Apply(tenant.Limits{})
	}
	t, err := c.CreateTenant(ctx, in)
	if err != nil {
		return err
	}
	return a.show(t, func(w io.Writer) { printTenant(w, t) })
}

func adminTenantList(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	if _, err := a.parse(fs, args); err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	ts, err := c.ListTenants(ctx)
	if err != nil {
		return err
	}
	return a.show(ts, func(w io.Writer) {
		fmt.Fprintln(w, "ID\tNAME\tWEIGHT\tDISABLED\tRPM\tTPM\tCONCURRENT\tBUDGET\tCREATED")
		for _, t := range ts {
			l := t.Limits
			fmt.Fprintf(w, "%s\t%s\t%d\t%v\t%s\t%s\t%s\t%s\t%s\n", t.ID, orDash(t.Name), t.Weight, t.Disabled,
				limit(l.RequestsPerMinute), limit(l.TokensPerMinute), limit(l.MaxConcurrent), budget(l), t.CreatedAt.Format(time.RFC3339))
		}
	})
}

func adminTenantGet(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	pos, err := a.parse(fs, args, "<id>")
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	t, err := c.GetTenant(ctx, pos[0])
	if err != nil {
		return err
	}
	return a.show(t, func(w io.Writer) { printTenant(w, t) })
}

func adminTenantUpdate(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	name := fs.String("name", "", "display name")
	weight := fs.Int("weight", 0, "fair-scheduling weight")
	disabled := fs.Bool("disabled", false, "disable (true) or enable (false) the tenant")
	lf := addLimitFlags(fs)
	pos, err := a.parse(fs, args, "<id>")
	if err != nil {
		return err
	}
	p := adminclient.TenantPatch{Limits: lf.patch()}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "name":
			p.Name = name
		case "weight":
			p.Weight = weight
		case "disabled":
			p.Disabled = disabled
		}
	})
	if p == (adminclient.TenantPatch{}) {
		fmt.Fprintf(a.e.stderr, "warden admin %s: nothing to change\n", a.cmd.path)
		fs.Usage()
		return errUsage
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	t, err := c.UpdateTenant(ctx, pos[0], p)
	if err != nil {
		return err
	}
	return a.show(t, func(w io.Writer) { printTenant(w, t) })
}

func adminTenantDelete(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	pos, err := a.parse(fs, args, "<id>")
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	if err := c.DeleteTenant(ctx, pos[0]); err != nil {
		return err
	}
	return a.show(adminclient.Deleted{ID: pos[0], Deleted: true}, func(w io.Writer) {
		fmt.Fprintf(w, "deleted tenant %s (its keys are revoked; its usage stays queryable)\n", pos[0])
	})
}

func printTenant(w io.Writer, t tenant.Tenant) {
	fmt.Fprintf(w, "id:\t%s\n", t.ID)
	fmt.Fprintf(w, "name:\t%s\n", orDash(t.Name))
	fmt.Fprintf(w, "weight:\t%d\n", t.Weight)
	fmt.Fprintf(w, "disabled:\t%v\n", t.Disabled)
	fmt.Fprintf(w, "created:\t%s\n", t.CreatedAt.Format(time.RFC3339))
	printLimits(w, t.Limits)
}

func printLimits(w io.Writer, l tenant.Limits) {
	fmt.Fprintf(w, "requests_per_minute:\t%s\n", limit(l.RequestsPerMinute))
	fmt.Fprintf(w, "tokens_per_minute:\t%s\n", limit(l.TokensPerMinute))
	fmt.Fprintf(w, "max_concurrent:\t%s\n", limit(l.MaxConcurrent))
	fmt.Fprintf(w, "budget:\t%s\n", budget(l))
	fmt.Fprintf(w, "allowed_models:\t%s\n", listOr(l.AllowedModels, "all"))
	fmt.Fprintf(w, "max_priority:\t%s\n", limit(int64(l.MaxPriority)))
}

// limit renders a limit, 0 being unlimited.
func limit(v int64) string {
	if v == 0 {
		return "unlimited"
	}
	return strconv.FormatInt(v, 10)
}

func budget(l tenant.Limits) string {
	if l.Budget == 0 {
		return "unlimited"
	}
	period := l.BudgetPeriod
	if period == "" {
		period = tenant.PeriodMonth
	}
	return fmt.Sprintf("%d/%s", l.Budget, period)
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

func adminKeyIssue(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	name := fs.String("name", "", "label of the key")
	pos, err := a.parse(fs, args, "<tenant>")
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	k, err := c.IssueKey(ctx, pos[0], *name)
	if err != nil {
		return err
	}
	if a.conn.json {
		return printJSON(a.e.stdout, k)
	}
	fmt.Fprintln(a.e.stdout, k.Key)
	fmt.Fprintf(a.e.stderr, "issued key %s for tenant %s; store it now: it cannot be shown again\n", k.ID, k.TenantID)
	return nil
}

func adminKeyList(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	var f adminclient.KeyFilter
	fs.StringVar(&f.Tenant, "tenant", "", "only this tenant's keys")
	fs.StringVar(&f.Prefix, "prefix", "", "only keys whose prefix starts with this (wdn_…)")
	if _, err := a.parse(fs, args); err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	keys, err := c.ListKeys(ctx, f)
	if err != nil {
		return err
	}
	return a.show(keys, func(w io.Writer) {
		fmt.Fprintln(w, "ID\tTENANT\tPREFIX\tNAME\tCREATED\tREVOKED")
		for _, k := range keys {
			revoked := "-"
			if k.RevokedAt != nil {
				revoked = k.RevokedAt.Format(time.RFC3339)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.TenantID, k.Prefix, orDash(k.Name), k.CreatedAt.Format(time.RFC3339), revoked)
		}
	})
}

func adminKeyRevoke(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	pos, err := a.parse(fs, args, "<key-id>")
	if err != nil {
		return err
	}
	// Accept the key ID, its display prefix "wdn_<id>" or the whole key.
	id := pos[0]
	if rest, ok := strings.CutPrefix(id, tenant.KeyPrefix); ok {
		id, _, _ = strings.Cut(rest, "_")
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	k, err := c.RevokeKey(ctx, id)
	if err != nil {
		return err
	}
	return a.show(k, func(w io.Writer) {
		fmt.Fprintf(w, "revoked key %s of tenant %s\n", k.ID, k.TenantID)
	})
}

func adminLimitsGet(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	pos, err := a.parse(fs, args, "<tenant>")
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	t, err := c.GetTenant(ctx, pos[0])
	if err != nil {
		return err
	}
	return a.show(t.Limits, func(w io.Writer) { printLimits(w, t.Limits) })
}

func adminLimitsSet(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	lf := addLimitFlags(fs)
	pos, err := a.parse(fs, args, "<tenant>")
	if err != nil {
		return err
	}
	p := lf.patch()
	if p == nil {
		fmt.Fprintf(a.e.stderr, "warden admin %s: give at least one limit flag\n", a.cmd.path)
		fs.Usage()
		return errUsage
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	t, err := c.UpdateTenant(ctx, pos[0], adminclient.TenantPatch{Limits: p})
	if err != nil {
		return err
	}
	return a.show(t.Limits, func(w io.Writer) { printLimits(w, t.Limits) })
}

func adminModelLimitsList(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	if _, err := a.parse(fs, args); err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	ms, err := c.ListModelLimits(ctx)
	if err != nil {
		return err
	}
	return a.show(ms, func(w io.Writer) {
		fmt.Fprintln(w, "MODEL\tMAX_CONTEXT\tMAX_OUTPUT_TOKENS\tALLOWED_TENANTS")
		for _, m := range ms {
			printModelLimitsRow(w, m)
		}
	})
}

func printModelLimitsRow(w io.Writer, m tenant.ModelLimits) {
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", m.Model, limit(m.MaxContext), limit(m.MaxOutputTokens), listOr(m.AllowedTenants, "all"))
}

func adminModelLimitsGet(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	pos, err := a.parse(fs, args, "<model>")
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	m, err := c.GetModelLimits(ctx, pos[0])
	if err != nil {
		return err
	}
	return a.show(m, func(w io.Writer) {
		fmt.Fprintln(w, "MODEL\tMAX_CONTEXT\tMAX_OUTPUT_TOKENS\tALLOWED_TENANTS")
		printModelLimitsRow(w, m)
	})
}

func adminModelLimitsSet(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	maxContext := fs.Int64("max-context", 0, "ceiling on prompt + output tokens (0 = none beyond the effective context)")
	maxOutput := fs.Int64("max-output-tokens", 0, "cap on max_tokens (0 = none)")
	tenants := fs.String("allowed-tenants", "", "comma-separated tenants that may use the model (empty = all)")
	pos, err := a.parse(fs, args, "<model>")
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["max-context"] && !set["max-output-tokens"] && !set["allowed-tenants"] {
		fmt.Fprintf(a.e.stderr, "warden admin %s: give at least one of --max-context, --max-output-tokens, --allowed-tenants\n", a.cmd.path)
		fs.Usage()
		return errUsage
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	m, err := c.GetModelLimits(ctx, pos[0])
	if err != nil && !adminclient.IsNotFound(err) {
		return err
	}
	m.Model = pos[0]
	if set["max-context"] {
		m.MaxContext = *maxContext
	}
	if set["max-output-tokens"] {
		m.MaxOutputTokens = *maxOutput
	}
	if set["allowed-tenants"] {
		m.AllowedTenants = splitList(*tenants)
	}
	m, err = c.SetModelLimits(ctx, m)
	if err != nil {
		return err
	}
	return a.show(m, func(w io.Writer) {
		fmt.Fprintln(w, "MODEL\tMAX_CONTEXT\tMAX_OUTPUT_TOKENS\tALLOWED_TENANTS")
		printModelLimitsRow(w, m)
	})
}

func adminModelLimitsDelete(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	pos, err := a.parse(fs, args, "<model>")
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	if err := c.DeleteModelLimits(ctx, pos[0]); err != nil {
		return err
	}
	return a.show(adminclient.Deleted{ID: pos[0], Deleted: true}, func(w io.Writer) {
		fmt.Fprintf(w, "deleted the limits of model %s\n", pos[0])
	})
}

func adminUsage(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	from := fs.String("from", "", "first UTC day, YYYY-MM-DD (default today)")
	to := fs.String("to", "", "last UTC day, YYYY-MM-DD (default today)")
	pos, err := a.parse(fs, args, "<tenant>")
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	us, err := c.Usage(ctx, pos[0], *from, *to)
	if err != nil {
		return err
	}
	return a.show(us, func(w io.Writer) {
		fmt.Fprintln(w, "DAY\tMODEL\tREQUESTS\tPROMPT_TOKENS\tCOMPLETION_TOKENS\tTOTAL_TOKENS")
		var total tenant.Usage
		for _, u := range us {
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\n", u.Day, u.Model, u.Requests, u.PromptTokens, u.CompletionTokens, u.PromptTokens+u.CompletionTokens)
			total.Requests += u.Requests
			total.PromptTokens += u.PromptTokens
			total.CompletionTokens += u.CompletionTokens
		}
		fmt.Fprintf(w, "total\t\t%d\t%d\t%d\t%d\n", total.Requests, total.PromptTokens, total.CompletionTokens, total.PromptTokens+total.CompletionTokens)
	})
}

func adminWorkers(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	if _, err := a.parse(fs, args); err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	ws, err := c.Workers(ctx)
	if err != nil {
		return err
	}
	return a.show(ws, func(w io.Writer) {
		fmt.Fprintln(w, "ID\tROLE\tMODEL\tHEALTHY\tCAPACITY_TOKENS\tPAGES\tFREE\tRESERVED\tIN_USE\tQUARANTINED\tVIOLATIONS\tRUNNING\tWAITING\tCONTROL\tTRANSFER\tLAST_HEARTBEAT")
		for _, v := range ws {
			p := v.Pool
			transfer := "-"
			if v.TransferAddr != "" {
				transfer = v.TransferBackend + "://" + v.TransferAddr
			}
			hb := "-"
			if !v.LastHeartbeat.IsZero() {
				hb = v.LastHeartbeat.Format(time.RFC3339)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%v\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n",
				v.ID, v.Role, v.Model, v.Healthy, p.CapacityTokens, p.TotalPages, p.FreePages, p.ReservedPages, p.InUsePages,
				p.QuarantinedPages, p.OwnerViolations, v.Running, v.Waiting, v.ControlAddr, transfer, hb)
		}
	})
}

func adminModels(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	if _, err := a.parse(fs, args); err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	ms, err := c.Models(ctx)
	if err != nil {
		return err
	}
	return a.show(ms, func(w io.Writer) {
		fmt.Fprintln(w, "MODEL\tPOLICY\tCONFIGURED\tEFFECTIVE\tVERDICT\tSERVING\tWORKERS")
		for _, m := range ms {
			var workers []string
			for _, wc := range m.Workers {
				workers = append(workers, fmt.Sprintf("%s(%s)=%d", wc.ID, wc.Role, wc.CapacityTokens))
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\t%v\t%s\n", m.Name, m.Policy, m.ConfiguredContext, m.EffectiveContext,
				m.Verdict, m.Serving, listOr(workers, "-"))
		}
	})
}

func adminRequestList(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	var f adminclient.RequestFilter
	fs.StringVar(&f.Tenant, "tenant", "", "only this tenant's requests")
	fs.StringVar(&f.Model, "model", "", "only requests for this model")
	if _, err := a.parse(fs, args); err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	rs, err := c.Requests(ctx, f)
	if err != nil {
		return err
	}
	return a.show(rs, func(w io.Writer) {
		fmt.Fprintln(w, "ID\tTENANT\tMODEL\tSTATE\tPROMPT\tCOMPLETION\tPREFILL\tDECODE\tSTARTED")
		for _, r := range rs {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", r.ID, r.Tenant, r.Model, r.State, r.PromptTokens,
				r.CompletionTokens, orDash(r.PrefillWorker), orDash(r.DecodeWorker), r.Started.Format(time.RFC3339))
		}
	})
}

func printRequest(w io.Writer, r adminclient.RequestView) {
	fmt.Fprintf(w, "id:\t%s\n", r.ID)
	fmt.Fprintf(w, "client_request_id:\t%s\n", orDash(r.ClientRequestID))
	fmt.Fprintf(w, "tenant:\t%s\n", r.Tenant)
	fmt.Fprintf(w, "model:\t%s\n", r.Model)
	fmt.Fprintf(w, "state:\t%s\n", r.State)
	fmt.Fprintf(w, "cause:\t%s\n", orDash(r.Cause))
	fmt.Fprintf(w, "prefill_worker:\t%s\n", orDash(r.PrefillWorker))
	fmt.Fprintf(w, "decode_worker:\t%s\n", orDash(r.DecodeWorker))
	fmt.Fprintf(w, "prompt_tokens:\t%d\n", r.PromptTokens)
	fmt.Fprintf(w, "completion_tokens:\t%d\n", r.CompletionTokens)
	fmt.Fprintf(w, "started:\t%s\n", r.Started.Format(time.RFC3339Nano))
	if !r.Finished.IsZero() {
		fmt.Fprintf(w, "finished:\t%s\n", r.Finished.Format(time.RFC3339Nano))
	}
}

func adminRequestGet(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	pos, err := a.parse(fs, args, "<id>")
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	r, err := c.Request(ctx, pos[0])
	if err != nil {
		return err
	}
	return a.show(r, func(w io.Writer) { printRequest(w, r) })
}

func adminRequestAbort(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	pos, err := a.parse(fs, args, "<id>")
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	res, err := c.AbortRequest(ctx, pos[0])
	if err != nil {
		return err
	}
	return a.show(res, func(w io.Writer) {
		fmt.Fprintf(w, "aborted request %s (cause %s)\n", res.ID, res.Cause)
		if res.Request != nil {
			printRequest(w, *res.Request)
		}
	})
}

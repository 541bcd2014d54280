package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/tenant"
)

// limitFlags are the flags that set tenant limits.
type limitFlags struct {
	fs                 *flag.FlagSet
	rpm, tpm, conc, bg int64
	adapters           int64
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
	fs.Int64Var(&l.adapters, "max-adapters", 0, "LoRA adapters the tenant may register itself with POST /v1/adapters (0 = none; the platform registers them)")
	fs.IntVar(&l.prio, "max-priority", 0, fmt.Sprintf("highest request priority the tenant may ask for, 0 to %d (0 = priority 0 only)", tenant.MaxRequestPriority))
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
		case "max-adapters":
			p.MaxAdapters = &l.adapters
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
	pos, c, err := a.open(fs, args, "<id>")
	if err != nil {
		return err
	}
	in := adminclient.TenantCreate{ID: pos[0], Name: *name, Weight: *weight, Disabled: *disabled}
	if p := lf.patch(); p != nil {
		in.Limits = p.Apply(tenant.Limits{})
	}
	t, err := c.CreateTenant(ctx, in)
	return a.show(t, err, func(w io.Writer) { printTenant(w, t) })
}

func adminTenantList(ctx context.Context, a *adminRun, args []string) error {
	_, c, err := a.open(a.flags(), args)
	if err != nil {
		return err
	}
	ts, err := c.ListTenants(ctx)
	return a.show(ts, err, func(w io.Writer) {
		fmt.Fprintln(w, "ID\tNAME\tWEIGHT\tDISABLED\tRPM\tTPM\tCONCURRENT\tBUDGET\tCREATED")
		for _, t := range ts {
			l := t.Limits
			fmt.Fprintf(w, "%s\t%s\t%d\t%v\t%s\t%s\t%s\t%s\t%s\n", t.ID, orDash(t.Name), t.Weight, t.Disabled,
				limit(l.RequestsPerMinute), limit(l.TokensPerMinute), limit(l.MaxConcurrent), budget(l), t.CreatedAt.Format(time.RFC3339))
		}
	})
}

func adminTenantGet(ctx context.Context, a *adminRun, args []string) error {
	pos, c, err := a.open(a.flags(), args, "<id>")
	if err != nil {
		return err
	}
	t, err := c.GetTenant(ctx, pos[0])
	return a.show(t, err, func(w io.Writer) { printTenant(w, t) })
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
		return a.usageError(fs, "nothing to change")
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	t, err := c.UpdateTenant(ctx, pos[0], p)
	return a.show(t, err, func(w io.Writer) { printTenant(w, t) })
}

func adminTenantDelete(ctx context.Context, a *adminRun, args []string) error {
	pos, c, err := a.open(a.flags(), args, "<id>")
	if err != nil {
		return err
	}
	err = c.DeleteTenant(ctx, pos[0])
	return a.show(adminclient.Deleted{ID: pos[0], Deleted: true}, err, func(w io.Writer) {
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
	// Not limit(): 0 is "priority 0 only", not unlimited.
	fmt.Fprintf(w, "max_priority:\t%d\n", l.MaxPriority)
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

func adminKeyIssue(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	name := fs.String("name", "", "label of the key")
	pos, c, err := a.open(fs, args, "<tenant>")
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
	_, c, err := a.open(fs, args)
	if err != nil {
		return err
	}
	keys, err := c.ListKeys(ctx, f)
	return a.show(keys, err, func(w io.Writer) {
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
	pos, c, err := a.open(a.flags(), args, "<key-id>")
	if err != nil {
		return err
	}
	// Accept the key ID, its display prefix "wdn_<id>" or the whole key.
	id := pos[0]
	if rest, ok := strings.CutPrefix(id, tenant.KeyPrefix); ok {
		id, _, _ = strings.Cut(rest, "_")
	}
	k, err := c.RevokeKey(ctx, id)
	return a.show(k, err, func(w io.Writer) {
		fmt.Fprintf(w, "revoked key %s of tenant %s\n", k.ID, k.TenantID)
	})
}

func adminLimitsGet(ctx context.Context, a *adminRun, args []string) error {
	pos, c, err := a.open(a.flags(), args, "<tenant>")
	if err != nil {
		return err
	}
	t, err := c.GetTenant(ctx, pos[0])
	return a.show(t.Limits, err, func(w io.Writer) { printLimits(w, t.Limits) })
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
		return a.usageError(fs, "give at least one limit flag")
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	t, err := c.UpdateTenant(ctx, pos[0], adminclient.TenantPatch{Limits: p})
	return a.show(t.Limits, err, func(w io.Writer) { printLimits(w, t.Limits) })
}

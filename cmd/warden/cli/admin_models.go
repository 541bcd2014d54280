package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/tenant"
)

func adminModelLimitsList(ctx context.Context, a *adminRun, args []string) error {
	_, c, err := a.open(a.flags(), args)
	if err != nil {
		return err
	}
	ms, err := c.ListModelLimits(ctx)
	return a.show(ms, err, func(w io.Writer) { printModelLimits(w, ms...) })
}

// printModelLimits prints a table of ms, its header included.
func printModelLimits(w io.Writer, ms ...tenant.ModelLimits) {
	fmt.Fprintln(w, "MODEL\tMAX_CONTEXT\tMAX_OUTPUT_TOKENS\tALLOWED_TENANTS")
	for _, m := range ms {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", m.Model, limit(m.MaxContext), limit(m.MaxOutputTokens), listOr(m.AllowedTenants, "all"))
	}
}

func adminModelLimitsGet(ctx context.Context, a *adminRun, args []string) error {
	pos, c, err := a.open(a.flags(), args, "<model>")
	if err != nil {
		return err
	}
	m, err := c.GetModelLimits(ctx, pos[0])
	return a.show(m, err, func(w io.Writer) { printModelLimits(w, m) })
}

func adminModelLimitsSet(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	maxContext := fs.Int64("max-context", 0, "ceiling on prompt + output tokens (0 = none beyond the effective context)")
	maxOutput := fs.Int64("max-output-tokens", 0, "cap on max_tokens (0 = none)")
	tenants := fs.String("allowed-tenants", "", "comma-separated tenants that may use the model (empty = all)")
	force := fs.Bool("force", false, "set the limits even if the gateway does not serve the model (yet)")
	pos, err := a.parse(fs, args, "<model>")
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["max-context"] && !set["max-output-tokens"] && !set["allowed-tenants"] {
		return a.usageError(fs, "give at least one of --max-context, --max-output-tokens, --allowed-tenants")
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	if !*force {
		if err := checkServed(ctx, c, pos[0]); err != nil {
			return err
		}
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
	return a.show(m, err, func(w io.Writer) { printModelLimits(w, m) })
}

func adminModelLimitsDelete(ctx context.Context, a *adminRun, args []string) error {
	pos, c, err := a.open(a.flags(), args, "<model>")
	if err != nil {
		return err
	}
	err = c.DeleteModelLimits(ctx, pos[0])
	return a.show(adminclient.Deleted{ID: pos[0], Deleted: true}, err, func(w io.Writer) {
		fmt.Fprintf(w, "deleted the limits of model %s\n", pos[0])
	})
}

func adminModels(ctx context.Context, a *adminRun, args []string) error {
	_, c, err := a.open(a.flags(), args)
	if err != nil {
		return err
	}
	ms, err := c.Models(ctx)
	return a.show(ms, err, func(w io.Writer) {
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

// checkServed returns an error, unless the gateway's configuration lists
// model, that says which models it serves and how to go on anyway: limits
// of a misspelt model would silently apply to nothing.
func checkServed(ctx context.Context, c *adminclient.Client, model string) error {
	models, err := c.Models(ctx)
	if err != nil {
		return err
	}
	var names []string
	for _, m := range models {
		if m.Name == model {
			return nil
		}
		names = append(names, m.Name)
	}
	return exitError{code: 1, msg: fmt.Sprintf("model %q is not served by this gateway (it serves: %s); check the name, or give --force to set its limits before the model is added",
		model, strings.Join(names, ", "))}
}

package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/tenant"
)

// adminAdapterAdd uploads the PEFT adapter in a directory
// (adapter_config.json, adapter_model.safetensors).
func adminAdapterAdd(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	base := fs.String("base", "", "the served model the adapter is for (required)")
	name := fs.String("name", "", "the adapter's name: requests use <base>:<name> (required)")
	owner := fs.String("owner", "", "the tenant that owns the adapter (required)")
	share := fs.String("share", "", "comma-separated other tenants that may use it")
	pin := fs.Bool("pin", false, "keep it loaded on workers (never evicted for another)")
	pos, err := a.parse(fs, args, "<dir>")
	if err != nil {
		return err
	}
	if *base == "" || *name == "" || *owner == "" {
		return a.usageError(fs, "--base, --name and --owner are required")
	}
	u := adminclient.AdapterUpload{Base: *base, Name: *name, Owner: *owner, SharedWith: splitList(*share), Pin: *pin}
	if u.ConfigJSON, err = os.ReadFile(filepath.Join(pos[0], adminclient.AdapterFileConfig)); err != nil {
		return fmt.Errorf("adapter: %w", err)
	}
	if u.Weights, err = os.ReadFile(filepath.Join(pos[0], adminclient.AdapterFileWeights)); err != nil {
		return fmt.Errorf("adapter: %w", err)
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	ad, err := c.CreateAdapter(ctx, u)
	return a.show(ad, err, func(w io.Writer) { printAdapters(w, ad) })
}

func adminAdapterList(ctx context.Context, a *adminRun, args []string) error {
	_, c, err := a.open(a.flags(), args)
	if err != nil {
		return err
	}
	as, err := c.ListAdapters(ctx)
	return a.show(as, err, func(w io.Writer) { printAdapters(w, as...) })
}

func adminAdapterShow(ctx context.Context, a *adminRun, args []string) error {
	pos, c, err := a.open(a.flags(), args, "<base:adapter>")
	if err != nil {
		return err
	}
	ad, err := c.GetAdapter(ctx, pos[0])
	return a.show(ad, err, func(w io.Writer) {
		printAdapters(w, ad)
		fmt.Fprintf(w, "\nhash\t%s\nrank\t%d\ntargets\t%s\ncreated\t%s\n", ad.Hash, ad.Rank, strings.Join(ad.Targets, ","),
			ad.CreatedAt.Format("2006-01-02 15:04:05Z07:00"))
	})
}

// adminAdapterShare replaces the tenants an adapter is shared with.
func adminAdapterShare(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	with := fs.String("with", "", "comma-separated tenants that may use it besides its owner (empty = none)")
	pos, c, err := a.open(fs, args, "<base:adapter>")
	if err != nil {
		return err
	}
	tenants := splitList(*with)
	ad, err := c.UpdateAdapter(ctx, pos[0], adminclient.AdapterPatch{SharedWith: &tenants})
	return a.show(ad, err, func(w io.Writer) { printAdapters(w, ad) })
}

func adminAdapterDelete(ctx context.Context, a *adminRun, args []string) error {
	pos, c, err := a.open(a.flags(), args, "<base:adapter>")
	if err != nil {
		return err
	}
	err = c.DeleteAdapter(ctx, pos[0])
	return a.show(adminclient.Deleted{ID: pos[0], Deleted: true}, err, func(w io.Writer) {
		fmt.Fprintf(w, "deleted adapter %s\n", pos[0])
	})
}

// printAdapters prints a table of as, its header included.
func printAdapters(w io.Writer, as ...tenant.Adapter) {
	fmt.Fprintln(w, "ADAPTER\tBASE\tOWNER\tSHARED WITH\tRANK\tBYTES\tPINNED")
	for _, ad := range as {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%v\n", ad.Name, ad.BaseModel, ad.Owner, listOr(ad.SharedWith, "-"), ad.Rank, ad.Bytes, ad.Pinned)
	}
}

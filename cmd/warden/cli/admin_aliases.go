package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/warden-ai/warden/internal/adminclient"
)

func adminAliasList(ctx context.Context, a *adminRun, args []string) error {
	_, c, err := a.open(a.flags(), args)
	if err != nil {
		return err
	}
	as, err := c.ListAliases(ctx)
	return a.show(as, err, func(w io.Writer) { printAliases(w, as...) })
}

// printAliases prints a table of as, its header included.
func printAliases(w io.Writer, as ...adminclient.Alias) {
	fmt.Fprintln(w, "ALIAS\tMODEL\tSOURCE")
	for _, al := range as {
		fmt.Fprintf(w, "%s\t%s\t%s\n", al.Name, al.Target, al.Source)
	}
}

func adminAliasSet(ctx context.Context, a *adminRun, args []string) error {
	pos, c, err := a.open(a.flags(), args, "<alias>", "<model>")
	if err != nil {
		return err
	}
	al, err := c.SetAlias(ctx, pos[0], pos[1])
	return a.show(al, err, func(w io.Writer) { printAliases(w, al) })
}

func adminAliasDelete(ctx context.Context, a *adminRun, args []string) error {
	pos, c, err := a.open(a.flags(), args, "<alias>")
	if err != nil {
		return err
	}
	err = c.DeleteAlias(ctx, pos[0])
	return a.show(adminclient.Deleted{ID: pos[0], Deleted: true}, err, func(w io.Writer) {
		fmt.Fprintf(w, "deleted alias %s\n", pos[0])
	})
}

package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/tenant"
)

func adminUsage(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	from := fs.String("from", "", "first UTC day, YYYY-MM-DD (default today)")
	to := fs.String("to", "", "last UTC day, YYYY-MM-DD (default today)")
	pos, c, err := a.open(fs, args, "<tenant>")
	if err != nil {
		return err
	}
	us, err := c.Usage(ctx, pos[0], *from, *to)
	return a.show(us, err, func(w io.Writer) {
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
	_, c, err := a.open(a.flags(), args)
	if err != nil {
		return err
	}
	ws, err := c.Workers(ctx)
	return a.show(ws, err, func(w io.Writer) {
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

func adminRequestList(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	var f adminclient.RequestFilter
	fs.StringVar(&f.Tenant, "tenant", "", "only this tenant's requests")
	fs.StringVar(&f.Model, "model", "", "only requests for this model")
	_, c, err := a.open(fs, args)
	if err != nil {
		return err
	}
	rs, err := c.Requests(ctx, f)
	return a.show(rs, err, func(w io.Writer) {
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
	fmt.Fprintf(w, "priority:\t%d\n", r.Priority)
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
	pos, c, err := a.open(a.flags(), args, "<id>")
	if err != nil {
		return err
	}
	r, err := c.Request(ctx, pos[0])
	return a.show(r, err, func(w io.Writer) { printRequest(w, r) })
}

func adminRequestAbort(ctx context.Context, a *adminRun, args []string) error {
	pos, c, err := a.open(a.flags(), args, "<id>")
	if err != nil {
		return err
	}
	res, err := c.AbortRequest(ctx, pos[0])
	return a.show(res, err, func(w io.Writer) {
		fmt.Fprintf(w, "aborted request %s (cause %s)\n", res.ID, res.Cause)
		if res.Request != nil {
			printRequest(w, *res.Request)
		}
	})
}

func adminWorkerCordon(ctx context.Context, a *adminRun, args []string) error {
	pos, c, err := a.open(a.flags(), args, "<id>")
	if err != nil {
		return err
	}
	v, err := c.CordonWorker(ctx, pos[0])
	return a.show(v, err, func(w io.Writer) { printPlacement(w, v) })
}

func adminWorkerUncordon(ctx context.Context, a *adminRun, args []string) error {
	pos, c, err := a.open(a.flags(), args, "<id>")
	if err != nil {
		return err
	}
	v, err := c.UncordonWorker(ctx, pos[0])
	return a.show(v, err, func(w io.Writer) { printPlacement(w, v) })
}

// adminWorkerDrain cordons the worker, then asks again every second until
// it is idle or --wait passed (0: answer at once).
func adminWorkerDrain(ctx context.Context, a *adminRun, args []string) error {
	fs := a.flags()
	wait := fs.Duration("wait", 5*time.Minute, "how long to wait for the worker's requests to end (0: do not wait)")
	pos, c, err := a.open(fs, args, "<id>")
	if err != nil {
		return err
	}
	v, err := c.DrainWorker(ctx, pos[0])
	deadline := time.Now().Add(*wait)
	for err == nil && !v.Idle && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		v, err = c.DrainWorker(ctx, pos[0])
	}
	if err == nil && !v.Idle && *wait > 0 {
		err = fmt.Errorf("worker %s is cordoned but not idle after %s: %d requests assigned, %d running, %d waiting",
			v.ID, *wait, v.Assigned, v.Running, v.Waiting)
	}
	return a.show(v, err, func(w io.Writer) { printPlacement(w, v) })
}

// printPlacement prints a worker's placement state.
func printPlacement(w io.Writer, v adminclient.WorkerView) {
	state := "schedulable"
	if v.Cordoned {
		state = "cordoned"
	}
	if v.Draining {
		state += ", draining (shutting down)"
	}
	fmt.Fprintf(w, "worker %s: %s, %d requests assigned, %d running, %d waiting, idle %v\n",
		v.ID, state, v.Assigned, v.Running, v.Waiting, v.Idle)
}

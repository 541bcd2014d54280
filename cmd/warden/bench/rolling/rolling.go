package rolling

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/internal/haproxyrun"
)

// Process is a child process of the fleet, which a round restarts.
type Process interface {
	// Start starts the process (again, after Stop).
	Start() error
	// Stop sends SIGTERM and waits until the process has exited (it is
	// killed when ctx ends); a non-nil error is an unclean exit.
	Stop(ctx context.Context) error
}

// Gateway is a gateway of the fleet.
type Gateway struct {
	Name string
	// APIAddr is the host:port of its HTTPS API, which HAProxy checks.
	APIAddr string
	// Admin is its admin API.
	Admin *adminclient.Client
	Proc  Process
}

// Worker is a worker of the fleet.
type Worker struct {
	// ID is its worker.id; Role is prefill, decode or both.
	ID, Role string
	Proc     Process
}

// Options shape a run.
type Options struct {
	Gateways []Gateway
	Workers  []Worker
	// HTTP trusts the gateways' API certificate (CAFile).
	HTTP   *http.Client
	CAFile string
	// HAProxy is the haproxy binary; Dir receives its files.
	HAProxy, Dir string
	// Model is the served model name; Prompts the user messages sent in
	// turn; MaxTokens the max_tokens of each.
	Model     string
	Prompts   []string
	MaxTokens int
	// Duration is how long to keep restarting: rounds repeat until it
	// has passed (at least one round).
	Duration time.Duration
	// Clients is the number of streaming clients.
	Clients int
	// StepTimeout bounds each wait: a process ready, a worker drained,
	// HAProxy seeing a gateway back.
	StepTimeout time.Duration
	// Progress reports each step; may be nil.
	Progress func(format string, args ...any)
}

// DefaultPrompts are the prompts of a run.
var DefaultPrompts = []string{"Tell me a story.", "Count to ten.", "Name three colours.", "Say hello."}

// tenantID is the tenant a run creates and issues its key for.
const tenantID = "bench-rolling"

// run is the state of one Run.
type run struct {
	o   Options
	lb  *haproxyrun.Proxy
	t   *tally
	say func(string, ...any)
}

// Run starts the fleet and HAProxy, runs the clients while restarting
// every process in rounds, and returns what it counted. The processes are
// left running (the caller stops them); HAProxy is stopped.
func Run(ctx context.Context, o Options) (Report, error) {
	if len(o.Gateways) == 0 || len(o.Workers) == 0 || o.Clients < 1 || len(o.Prompts) == 0 {
		return Report{}, errors.New("rolling: want gateways, workers, clients and prompts")
	}
	r := &run{o: o, say: o.Progress}
	if r.say == nil {
		r.say = func(string, ...any) {}
	}
	for _, p := range r.procs() {
		if err := p.Start(); err != nil {
			return Report{}, err
		}
	}
	r.say("started %d gateways and %d workers", len(o.Gateways), len(o.Workers))
	for _, g := range o.Gateways {
		if err := r.waitGateway(ctx, g); err != nil {
			return Report{}, err
		}
	}
	if err := r.waitWorkers(ctx); err != nil {
		return Report{}, err
	}
	var servers []string
	for _, g := range o.Gateways {
		servers = append(servers, g.APIAddr)
	}
	var err error
	if r.lb, err = haproxyrun.Start(haproxyrun.Options{Bin: o.HAProxy, Dir: o.Dir, Servers: servers, CAFile: o.CAFile}); err != nil {
		return Report{}, err
	}
	defer r.lb.Close()
	if err := r.waitLB(ctx); err != nil {
		return Report{}, err
	}
	r.say("haproxy %s has every gateway up", r.lb.Addr)
	key, err := issueKey(ctx, o.Gateways[0].Admin)
	if err != nil {
		return Report{}, err
	}
	url := "https://" + r.lb.Addr + "/v1/chat/completions"
	ref := make([]Answer, len(o.Prompts))
	for i, p := range o.Prompts {
		out := Stream(ctx, o.HTTP, url, key, ChatBody(o.Model, p, o.MaxTokens))
		if out.Error != "" || out.Cut {
			return Report{}, fmt.Errorf("reference answer to %q: %s (cut %v)", p, out.Error, out.Cut)
		}
		ref[i] = Answer{Text: out.Text, Finish: out.Finish}
	}
	r.t = newTally(ref)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	for i := range o.Clients {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				p := (i + n) % len(o.Prompts)
				out := Stream(ctx, o.HTTP, url, key, ChatBody(o.Model, o.Prompts[p], o.MaxTokens))
				out.Prompt = p
				r.t.add(out)
			}
		})
	}
	rounds, err := r.rounds(ctx, start)
	close(stop)
	wg.Wait()
	rep := r.t.report()
	rep.Elapsed, rep.Clients, rep.Rounds = time.Since(start), o.Clients, rounds
	return rep, err
}

// procs returns every process, gateways first.
func (r *run) procs() []Process {
	var ps []Process
	for _, g := range r.o.Gateways {
		ps = append(ps, g.Proc)
	}
	for _, w := range r.o.Workers {
		ps = append(ps, w.Proc)
	}
	return ps
}

// rounds restarts every process, one at a time, in rounds until the
// duration has passed since start, and returns the rounds completed.
func (r *run) rounds(ctx context.Context, start time.Time) (int, error) {
	if err := r.served(ctx, "load before the restarts"); err != nil {
		return 0, err
	}
	n := 0
	for n == 0 || time.Since(start) < r.o.Duration {
		for _, w := range r.o.Workers {
			if err := r.restartWorker(ctx, w); err != nil {
				return n, err
			}
		}
		for _, g := range r.o.Gateways {
			if err := r.restartGateway(ctx, g); err != nil {
				return n, err
			}
		}
		n++
		r.say("round %d done after %v", n, time.Since(start).Round(time.Second))
	}
	return n, nil
}

// restartWorker cordons w on every gateway, waits until it is idle on
// every one, stops it, starts it again, waits until every gateway has it
// back, and uncordons it.
func (r *run) restartWorker(ctx context.Context, w Worker) error {
	for _, g := range r.o.Gateways {
		if _, err := g.Admin.CordonWorker(ctx, w.ID); err != nil {
			return fmt.Errorf("cordoning %s on %s: %w", w.ID, g.Name, err)
		}
	}
	if err := r.waitWorker(ctx, w.ID, "drained", func(v adminclient.WorkerView) bool { return v.Cordoned && v.Idle }); err != nil {
		return err
	}
	stopCtx, cancel := context.WithTimeout(ctx, r.o.StepTimeout)
	err := w.Proc.Stop(stopCtx)
	cancel()
	if err != nil {
		return fmt.Errorf("%s %s after SIGTERM: %w", w.Role, w.ID, err)
	}
	if err := w.Proc.Start(); err != nil {
		return err
	}
	if err := r.waitWorker(ctx, w.ID, "registered again", func(v adminclient.WorkerView) bool { return v.Healthy && !v.Draining }); err != nil {
		return err
	}
	for _, g := range r.o.Gateways {
		if _, err := g.Admin.UncordonWorker(ctx, w.ID); err != nil {
			return fmt.Errorf("uncordoning %s on %s: %w", w.ID, g.Name, err)
		}
	}
	r.t.restarted(w.Role)
	r.say("restarted %s worker %s", w.Role, w.ID)
	return r.served(ctx, "load after restarting "+w.ID)
}

// restartGateway stops g with SIGTERM (it leaves HAProxy's rotation
// during its shutdown delay, then drains), starts it again and waits
// until HAProxy has it back.
func (r *run) restartGateway(ctx context.Context, g Gateway) error {
	stopCtx, cancel := context.WithTimeout(ctx, r.o.StepTimeout)
	err := g.Proc.Stop(stopCtx)
	cancel()
	if err != nil {
		return fmt.Errorf("%s after SIGTERM: %w", g.Name, err)
	}
	if err := g.Proc.Start(); err != nil {
		return err
	}
	if err := r.waitGateway(ctx, g); err != nil {
		return err
	}
	if err := r.waitWorkers(ctx); err != nil {
		return err
	}
	if err := r.waitLB(ctx); err != nil {
		return err
	}
	r.t.restarted("gateway")
	r.say("restarted %s", g.Name)
	return r.served(ctx, "load after restarting "+g.Name)
}

// served waits until the clients have completed a few more streams, so
// that every step runs under load.
func (r *run) served(ctx context.Context, what string) error {
	target := r.t.completed() + 2*int64(r.o.Clients)
	return r.wait(ctx, what, func() error {
		if n := r.t.completed(); n < target {
			return fmt.Errorf("%d streams completed, waiting for %d", n, target)
		}
		return nil
	})
}

// waitWorker waits until every gateway's view of worker id satisfies ok.
func (r *run) waitWorker(ctx context.Context, id, what string, ok func(adminclient.WorkerView) bool) error {
	return r.wait(ctx, id+" "+what, func() error {
		for _, g := range r.o.Gateways {
			ws, err := g.Admin.Workers(ctx)
			if err != nil {
				return fmt.Errorf("%s: %w", g.Name, err)
			}
			found := false
			for _, v := range ws {
				if v.ID == id && ok(v) {
					found = true
				}
			}
			if !found {
				return fmt.Errorf("not yet on %s", g.Name)
			}
		}
		return nil
	})
}

// waitWorkers waits until every worker is registered and healthy on
// every gateway. A gateway's /readyz needs one worker of each role, not
// every one; a cordon needs the worker registered.
func (r *run) waitWorkers(ctx context.Context) error {
	for _, w := range r.o.Workers {
		if err := r.waitWorker(ctx, w.ID, "registered", func(v adminclient.WorkerView) bool { return v.Healthy }); err != nil {
			return err
		}
	}
	return nil
}

// waitGateway waits until g's /readyz answers 200.
func (r *run) waitGateway(ctx context.Context, g Gateway) error {
	return r.wait(ctx, g.Name+" ready", func() error {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, "https://"+g.APIAddr+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := r.o.HTTP.Do(req)
		if err != nil {
			return err
		}
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s: %s", resp.Status, strings.TrimSpace(string(data)))
		}
		return nil
	})
}

// waitLB waits until HAProxy sees every gateway up.
func (r *run) waitLB(ctx context.Context) error {
	return r.wait(ctx, "haproxy to see every gateway up", r.lb.AllUp)
}

// wait polls check until it returns nil, for at most StepTimeout.
func (r *run) wait(ctx context.Context, what string, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, r.o.StepTimeout)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// issueKey creates the bench tenant, unless the store has it, and issues
// a key for it.
func issueKey(ctx context.Context, admin *adminclient.Client) (string, error) {
	_, err := admin.CreateTenant(ctx, adminclient.TenantCreate{ID: tenantID, Name: "warden bench rolling"})
	if apiErr, ok := errors.AsType[*adminclient.Error](err); ok && apiErr.Code == adminclient.CodeAlreadyExists {
		err = nil
	}
	if err != nil {
		return "", fmt.Errorf("creating tenant %q: %w", tenantID, err)
	}
	k, err := admin.IssueKey(ctx, tenantID, "warden bench rolling")
	if err != nil {
		return "", fmt.Errorf("issuing a key for tenant %q: %w", tenantID, err)
	}
	return k.Key, nil
}

package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/adminclient"
)

// Timings of `warden up`.
const (
	// upStopGrace is how long a child may take to shut down before it is
	// killed.
	upStopGrace = 20 * time.Second
	// upPoll is the readiness polling interval.
	upPoll = 100 * time.Millisecond
)

// upTenant is the tenant `warden up` creates and issues a key for.
const upTenant = "dev"

// runUp runs a gateway and its workers on this machine as child processes
// of this one, prints how to call them, and stops them all on Ctrl-C.
func runUp(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "up", "up [--listen HOST:PORT] [--state-dir DIR] [--model-dir DIR] [--config FILE] [--transfer tcp|shm] [--single]")
	var o upOptions
	fs.StringVar(&o.stateDir, "state-dir", ".warden", "directory for the dev PKI, dev model, tokens, generated configs and logs")
	fs.StringVar(&o.listen, "listen", "", "host:port of the OpenAI-compatible API; port 0 picks a free one (default gateway.listen of --config, else "+upDefaultListen+")")
	fs.StringVar(&o.modelDir, "model-dir", "", "Hugging Face Llama-family model directory or .gguf file (default worker.model_dir of --config, else a generated tiny model in the state dir)")
	fs.StringVar(&o.model, "model", "", "served model name (default worker.model of --config; with --model-dir, the directory's name)")
	fs.StringVar(&o.configPath, "config", "", "YAML config file: its values are kept, including pinned ports, Redis and TLS (see config/examples/up.yaml)")
	fs.StringVar(&o.transfer, "transfer", "", "KV transfer between prefill and decode: tcp or shm (default worker.transfer.backend of --config, else tcp)")
	fs.BoolVar(&o.single, "single", false, "run one worker of role both instead of a prefill and a decode worker")
	fs.StringVar(&o.kvMemory, "kv-memory", "", "KV pool of each worker, e.g. 1GiB (default worker.kv of --config, else 256MiB)")
	fs.IntVar(&o.threads, "threads", 0, "compute threads per worker (default worker.threads of --config: every core)")
	readyTimeout := fs.Duration("ready-timeout", 5*time.Minute, "how long to wait for the gateway to serve the model")
	prepare := fs.Bool("prepare", false, "only write the state dir (dev PKI, dev model, tokens, configs) and exit, e.g. for a container volume")
	if err := parse(fs, args); err != nil {
		return err
	}
	say := func(format string, a ...any) { fmt.Fprintf(e.stderr, "warden up: "+format+"\n", a...) }

	unlock, err := lockStateDir(o.stateDir)
	if err != nil {
		return err
	}
	defer unlock()
	if name, value, err := keySecretFor(o, os.LookupEnv); err != nil {
		return err
	} else if name != "" {
		// This process only; childEnv keeps it from the children, whose
		// configs name the file.
		if err := os.Setenv(name, value); err != nil {
			return err
		}
	}
	pl, err := planUp(o, os.LookupEnv, say)
	if err != nil {
		return err
	}
	defer pl.ports.release()
	if err := pl.writeConfigs(); err != nil {
		return err
	}
	if *prepare {
		say("prepared %s (model %s in %s)", pl.stateDir, pl.model, pl.workers[0].cfg.Worker.ModelDir)
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the warden binary to run: %w", err)
	}
	u := &upRun{plan: pl, say: say}
	if isTerminal(e.stderr) {
		u.progress = say
	}
	err = u.start(ctx, exe, *readyTimeout)
	var key string
	if err == nil {
		key, err = u.issueKey(ctx)
	}
	if err == nil {
		pl.printReady(e.stdout, key)
		err = u.wait(ctx)
	}
	if ctx.Err() != nil && err == nil {
		u.sayStopping()
	}
	if stopErr := u.stopAll(); err == nil {
		err = stopErr
	}
	return err
}

// upRun is the state of a running `warden up`.
type upRun struct {
	plan *upPlan
	say  func(string, ...any)
	// progress shows the children's start-up steps; nil when stderr is
	// not a terminal.
	progress func(string, ...any)
	logs     map[*child]*logFollower
	gateway  *child
	workers  []*child
	admin    *adminclient.Client
	httpc    *http.Client
}

// all returns every child, gateway first.
func (u *upRun) all() []*child {
	if u.gateway == nil {
		return u.workers
	}
	return append([]*child{u.gateway}, u.workers...)
}

// childEnv is this process's environment without the WARDEN_* variables
// that set config fields: those are already in the children's config
// files, and one variable for all children would make the workers collide
// (e.g. WARDEN_WORKER_LISTEN).
func childEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		skip := false
		for _, section := range []string{"GATEWAY", "CLUSTER", "TENANTS", "MODELS", "WORKER", "OBSERVABILITY"} {
			if strings.HasPrefix(name, config.EnvName(section)+"_") {
				skip = true
			}
		}
		if !skip {
			out = append(out, kv)
		}
	}
	return out
}

// start runs the gateway and the workers and waits until the gateway
// serves the model with every worker registered.
func (u *upRun) start(ctx context.Context, exe string, timeout time.Duration) error {
	pl := u.plan
	var err error
	if u.httpc, err = pl.httpClient(); err != nil {
		return err
	}
	token, err := readTokenFile(pl.adminTokenFile)
	if err != nil {
		return err
	}
	if u.admin, err = adminclient.New(adminclient.Config{URL: pl.adminURL, Token: token, Transport: u.httpc.Transport, Timeout: 10 * time.Second}); err != nil {
		return err
	}
	env := childEnv()
	// Each process takes over the sockets of the ports picked for it; the
	// pinned addresses are freed for the gateway and the workers to bind.
	pl.ports.releaseFor("")
	if u.gateway, err = startChild(pl.gateway.name, exe, []string{"gateway", "--config", pl.configPath(pl.gateway)}, env,
		pl.logPath(pl.gateway), pl.ports.takeFor(pl.gateway.file)); err != nil {
		return err
	}
	u.say("started the gateway (pid %d), API %s, admin %s", u.gateway.cmd.Process.Pid, pl.apiURL, pl.adminURL)
	for _, p := range pl.workers {
		// A refused registration ends the worker with the gateway's
		// cause, which the wait below reports at once.
		c, err := startChild(p.name, exe, []string{"worker", "--config", pl.configPath(p), "--exit-on-refusal"}, env,
			pl.logPath(p), pl.ports.takeFor(p.file))
		if err != nil {
			return err
		}
		u.workers = append(u.workers, c)
		u.say("started the %s %s (pid %d), control %s", p.name, p.cfg.Worker.ID, c.cmd.Process.Pid, p.cfg.Worker.Listen)
	}
	u.say("logs are in %s", filepath.Join(pl.stateDir, upLogDir))

	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(upPoll)
	defer tick.Stop()
	var notReady error
	for {
		for _, c := range u.all() {
			if c.exited() {
				return errors.New(c.crashReport())
			}
		}
		u.showProgress()
		if notReady = u.ready(ctx); notReady == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("interrupted while starting: %w", ctx.Err())
		case <-deadline.C:
			return fmt.Errorf("not ready after %v: %v (logs in %s)", timeout, notReady, filepath.Join(pl.stateDir, upLogDir))
		case <-tick.C:
		}
	}
}

// showProgress prints the start-up steps the children logged since the
// last call (on a terminal only).
func (u *upRun) showProgress() {
	if u.progress == nil {
		return
	}
	if u.logs == nil {
		u.logs = map[*child]*logFollower{}
	}
	for _, c := range u.all() {
		f := u.logs[c]
		if f == nil {
			f = &logFollower{path: c.logPath}
			u.logs[c] = f
		}
		for _, line := range f.lines() {
			if p, ok := progressFromLog(line); ok {
				u.progress("%s: %s", c.name, p)
			}
		}
	}
}

// ready reports nil once the gateway's /readyz answers 200 and every
// worker is registered and healthy.
func (u *upRun) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.plan.apiURL+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := u.httpc.Do(req)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("gateway /readyz: %s", resp.Status)
	}
	ws, err := u.admin.Workers(ctx)
	if err != nil {
		return fmt.Errorf("gateway admin API: %w", err)
	}
	healthy := map[string]bool{}
	for _, w := range ws {
		healthy[w.ID] = w.Healthy
	}
	for _, p := range u.plan.workers {
		if !healthy[p.cfg.Worker.ID] {
			return fmt.Errorf("%s %s is not registered yet", p.name, p.cfg.Worker.ID)
		}
	}
	return nil
}

// issueKey creates the dev tenant, unless the store has it already, and
// issues a new API key for it.
func (u *upRun) issueKey(ctx context.Context) (string, error) {
	_, err := u.admin.CreateTenant(ctx, adminclient.TenantCreate{ID: upTenant, Name: "warden up"})
	if apiErr, ok := errors.AsType[*adminclient.Error](err); ok && apiErr.Code == adminclient.CodeAlreadyExists {
		err = nil
	}
	if err != nil {
		return "", fmt.Errorf("creating tenant %q: %w", upTenant, err)
	}
	k, err := u.admin.IssueKey(ctx, upTenant, "warden up")
	if err != nil {
		return "", fmt.Errorf("issuing a key for tenant %q: %w", upTenant, err)
	}
	return k.Key, nil
}

// Restarts of a worker that stopped by itself: the delay doubles from
// upRestartMin up to upRestartMax, and starts over once a worker ran for
// upRestartReset.
const (
	upRestartMin   = time.Second
	upRestartMax   = 30 * time.Second
	upRestartReset = time.Minute
)

// wait runs until ctx ends (Ctrl-C), and then returns nil. A worker that
// stops by itself meanwhile is started again, after a back-off, and
// registers with the gateway as any restarted worker does; a gateway that
// stops ends the wait with its crash report, since the tenant and the key
// printed may have gone with it (the in-memory store).
func (u *upRun) wait(ctx context.Context) error {
	const gateway = -1
	exited := make(chan int, len(u.workers)+1)
	watch := func(i int, c *child) {
		go func() {
			select {
			case <-c.done:
				exited <- i
			case <-ctx.Done():
			}
		}()
	}
	watch(gateway, u.gateway)
	for i, c := range u.workers {
		watch(i, c)
	}
	delays := make([]time.Duration, len(u.workers))
	for {
		var i int
		select {
		case <-ctx.Done():
			return nil
		case i = <-exited:
		}
		if i == gateway {
			return errors.New(u.gateway.crashReport())
		}
		old := u.workers[i]
		if time.Since(old.started) >= upRestartReset || delays[i] == 0 {
			delays[i] = upRestartMin
		} else {
			delays[i] = min(2*delays[i], upRestartMax)
		}
		u.say("%s; starting it again in %v", old.exitSummary(crashExcerpt(old.logPath, 20)), delays[i])
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delays[i]):
		}
		c, err := old.restart()
		if err != nil {
			return err
		}
		u.workers[i] = c
		u.say("restarted the %s (pid %d)", c.name, c.cmd.Process.Pid)
		watch(i, c)
	}
}

// sayStopping tells what stopping waits for: the requests in flight, which
// the gateway lets finish for up to its drain timeout.
func (u *upRun) sayStopping() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	reqs, err := u.admin.Requests(ctx, adminclient.RequestFilter{})
	switch {
	case err != nil:
		u.say("stopping")
	case len(reqs) == 0:
		u.say("stopping: no request in flight")
	default:
		u.say("stopping: draining %d request(s) in flight, for up to %v; Ctrl-C again to stop now",
			len(reqs), u.plan.gateway.cfg.Gateway.DrainTimeout)
	}
}

// stopAll stops the gateway first, so that requests in flight are aborted
// and the workers told, then the workers. Another Ctrl-C meanwhile kills
// whatever still runs at once. A child that had already stopped by itself
// was reported when it did.
func (u *upRun) stopAll() error {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	force := make(chan struct{})
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-sigs:
			u.say("killing the remaining processes")
			close(force)
		case <-stopped:
		}
	}()
	var (
		mu   sync.Mutex
		errs []error
	)
	stop := func(c *child) {
		if c.exited() {
			return
		}
		if err := c.stop(upStopGrace, force); err != nil {
			mu.Lock()
			errs = append(errs, fmt.Errorf("the %s: %w", c.name, err))
			mu.Unlock()
		}
	}
	if u.gateway != nil {
		stop(u.gateway)
	}
	var wg sync.WaitGroup
	for _, c := range u.workers {
		wg.Go(func() { stop(c) })
	}
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("stopping: %w", errors.Join(errs...))
	}
	return nil
}

// httpClient returns a client that trusts the gateway's certificate.
func (pl *upPlan) httpClient() (*http.Client, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	switch {
	case pl.caFile != "":
		pem, err := os.ReadFile(pl.caFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no certificate", pl.caFile)
		}
		tc.RootCAs = pool
	default:
		// The config brings its own API certificate, which need not name
		// the loopback address this probe of our own child dials.
		tc.InsecureSkipVerify = true
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}, Timeout: 10 * time.Second}, nil
}

// printReady prints the API key, the URLs and how to use them.
func (pl *upPlan) printReady(w io.Writer, key string) {
	shape := "P/D: a gateway, a prefill and a decode worker, KV transfer " + string(pl.workers[0].cfg.Worker.Transfer.Backend)
	if len(pl.workers) == 1 {
		shape = "single node: a gateway and one worker of role both"
	}
	cacert := ""
	if pl.caFile != "" {
		cacert = "--cacert " + shellQuote(pl.caFile) + " "
	}
	fmt.Fprintf(w, "\nwarden is up (%s).\n\n", shape)
	fmt.Fprintf(w, "  base URL   %s/v1\n", pl.apiURL)
	fmt.Fprintf(w, "  API key    %s\n", key)
	fmt.Fprintf(w, "  model      %s\n", pl.model)
	if pl.caFile != "" {
		fmt.Fprintf(w, "  CA         %s\n", pl.caFile)
	}
	fmt.Fprintf(w, "  admin URL  %s (token in %s)\n", pl.adminURL, pl.adminTokenFile)
	fmt.Fprintf(w, "  logs       %s\n", filepath.Join(pl.stateDir, upLogDir))
	fmt.Fprintf(w, "\nTry it:\n\n  curl %s%s/v1/chat/completions -H \"Authorization: Bearer %s\" -H \"Content-Type: application/json\" -d '{\"model\": \"%s\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}], \"max_tokens\": 32}'\n",
		cacert, pl.apiURL, key, pl.model)
	fmt.Fprintf(w, "\nInspect it:\n\n  warden admin --url %s --token-file %s %sworkers\n  warden check --config %s\n",
		pl.adminURL, shellQuote(pl.adminTokenFile), cacert, shellQuote(pl.configPath(pl.gateway)))
	fmt.Fprintf(w, "\nPress Ctrl-C to stop.\n")
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-:=@%+,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

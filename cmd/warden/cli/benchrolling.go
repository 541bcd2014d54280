package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warden-ai/warden/cmd/warden/bench/rolling"
	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/internal/haproxyrun"
)

// benchShutdownDelay is the gateways' shutdown_delay under `warden bench
// rolling`: three times the two failed checks HAProxy needs.
const benchShutdownDelay = 3 * 2 * haproxyrun.CheckInterval

// runBenchRolling restarts a fleet of 2 gateways, 2 prefill and 2 decode
// workers behind HAProxy, process by process, under streaming clients.
func runBenchRolling(ctx context.Context, e *env, args []string) (err error) {
	fs := newFlags(e, "bench rolling", "bench rolling [--duration 2m] [--clients 8] [--haproxy PATH] [--transfer tcp|shm] [--redis ADDR] [--state-dir DIR] [--keep] [--json]")
	duration := fs.Duration("duration", 2*time.Minute, "how long to keep restarting: rounds (every worker, then every gateway) repeat until it has passed; at least one")
	clients := fs.Int("clients", 8, "streaming clients")
	haproxy := fs.String("haproxy", "", "haproxy binary (default: haproxy on $PATH)")
	transfer := fs.String("transfer", "tcp", "KV transfer between prefill and decode: tcp or shm")
	redisAddr := fs.String("redis", "", "Redis of the tenant store, host:port (default: a private redis-server started for the run)")
	stateDir := fs.String("state-dir", "", "directory for the dev PKI, dev model, configs and logs (default: a temporary one, removed unless --keep)")
	keep := fs.Bool("keep", false, "keep the temporary state directory (configs and logs)")
	threads := fs.Int("threads", 1, "compute threads per worker")
	maxTokens := fs.Int("max-tokens", 24, "max_tokens of every request")
	stepTimeout := fs.Duration("step-timeout", 2*time.Minute, "longest wait for one step: a process ready, a worker drained, a gateway back in HAProxy")
	asJSON := fs.Bool("json", false, "write the report as JSON instead of text")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *clients < 1 {
		return errors.New("bench rolling: --clients must be at least 1")
	}
	say := func(format string, a ...any) { fmt.Fprintf(e.stderr, "warden bench rolling: "+format+"\n", a...) }
	bin, err := haproxyrun.Find(*haproxy)
	if err != nil {
		return fmt.Errorf("bench rolling: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the warden binary to run: %w", err)
	}
	dir := *stateDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "warden-bench-rolling-"); err != nil {
			return err
		}
		defer func() {
			if *keep || err != nil {
				say("configs and logs are in %s", dir)
				return
			}
			_ = os.RemoveAll(dir)
		}()
	}
	f, err := planRollingFleet(upOptions{stateDir: dir, listen: "127.0.0.1:0", transfer: *transfer, threads: *threads}, say)
	if err != nil {
		return err
	}
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()
	if *redisAddr == "" {
		r, addr, err := startBenchRedis(ctx, f.plan)
		if err != nil {
			return err
		}
		stops = append(stops, func() { _ = r.stop(upStopGrace, nil) })
		*redisAddr = addr
	}
	if err := f.useRedis(*redisAddr); err != nil {
		return err
	}
	o, procs, err := f.options(exe, *stepTimeout)
	if err != nil {
		return err
	}
	stops = append(stops, func() {
		// Workers first, then the gateways; each is killed if it has not
		// stopped within upStopGrace.
		for i := len(procs) - 1; i >= 0; i-- {
			stopCtx, cancel := context.WithTimeout(context.Background(), upStopGrace)
			_ = procs[i].Stop(stopCtx)
			cancel()
		}
	})
	o.HAProxy, o.Duration, o.Clients, o.MaxTokens, o.Prompts, o.Progress = bin, *duration, *clients, *maxTokens, rolling.DefaultPrompts, say
	say("2 gateways (Redis %s), 2 prefill and 2 decode workers (transfer %s) behind haproxy, %d clients, %v; logs in %s",
		*redisAddr, *transfer, *clients, *duration, filepath.Join(f.plan.stateDir, upLogDir))
	rep, err := rolling.Run(ctx, o)
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(rep); jerr != nil && err == nil {
			err = jerr
		}
	} else {
		fmt.Fprintln(e.stdout, "## warden bench rolling")
		rep.WriteText(e.stdout)
	}
	if err != nil {
		return err
	}
	return rep.OK()
}

// rollingFleet is the plan of `warden bench rolling`: `warden up`'s plan
// (a gateway, a prefill and a decode worker) with a second gateway and a
// second worker of each role, every worker registering with both
// gateways.
type rollingFleet struct {
	plan     *upPlan
	gateways []upProcess
	workers  []upProcess
}

// planRollingFleet plans the fleet in o.stateDir.
func planRollingFleet(o upOptions, say func(string, ...any)) (*rollingFleet, error) {
	pl, err := planUp(o, func(string) (string, bool) { return "", false }, say)
	if err != nil {
		return nil, err
	}
	pl.ports.release() // the fleet's processes start long after the plan
	f := &rollingFleet{plan: pl, gateways: []upProcess{pl.gateway}}
	var pp portPicker
	defer pp.release()
	g2 := *pl.gateway.cfg
	for _, a := range []*string{&g2.Gateway.Listen, &g2.Gateway.AdminListen, &g2.Gateway.RegistryListen} {
		if *a, err = pp.pick("127.0.0.1"); err != nil {
			return nil, err
		}
	}
	if g2.Observability.Metrics.Listen != "" {
		if g2.Observability.Metrics.Listen, err = pp.pick("127.0.0.1"); err != nil {
			return nil, err
		}
	}
	f.gateways = append(f.gateways, upProcess{name: "gateway 2", file: "gateway-2", cfg: &g2})
	f.gateways[0].name = "gateway 1"
	registries := []string{dialAddr(pl.gateway.cfg.Gateway.RegistryListen), dialAddr(g2.Gateway.RegistryListen)}
	for _, w := range pl.workers {
		wc, err := workerConfig(w.cfg, w.cfg.Worker.Role, pins{}, &pp, nil)
		if err != nil {
			return nil, err
		}
		f.workers = append(f.workers, w, upProcess{name: w.name + " 2", file: w.file + "-2", cfg: wc})
	}
	for _, w := range f.workers {
		w.cfg.Worker.Gateways = registries
	}
	return f, nil
}

// useRedis makes the gateways share tenants in Redis at addr, under a key
// prefix of this run, with one key secret.
func (f *rollingFleet) useRedis(addr string) error {
	secret, err := ensureSecretFile(filepath.Join(f.plan.stateDir, upKeySecret))
	if err != nil {
		return err
	}
	prefix := "warden-bench-rolling:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	for _, g := range f.gateways {
		t := &g.cfg.Tenants
		t.Store, t.Redis.Addr, t.Redis.KeyPrefix, t.KeySecretFile = config.StoreRedis, addr, prefix, secret
		g.cfg.Gateway.ShutdownDelay = benchShutdownDelay
		if err := g.cfg.ValidateGateway(); err != nil {
			return fmt.Errorf("%s: %w", g.name, err)
		}
	}
	return nil
}

// options writes the configs and returns the processes to run, not yet
// started, and what rolling.Run needs of them.
func (f *rollingFleet) options(exe string, stepTimeout time.Duration) (rolling.Options, []*benchProc, error) {
	pl := f.plan
	httpc, err := rollingHTTPClient(pl.caFile, stepTimeout)
	if err != nil {
		return rolling.Options{}, nil, err
	}
	token, err := readTokenFile(pl.adminTokenFile)
	if err != nil {
		return rolling.Options{}, nil, err
	}
	o := rolling.Options{HTTP: httpc, CAFile: pl.caFile, Dir: pl.stateDir, Model: pl.model, StepTimeout: stepTimeout}
	env := childEnv()
	var procs []*benchProc
	for _, g := range f.gateways {
		if err := pl.writeConfig(g); err != nil {
			return o, nil, err
		}
		admin, err := adminclient.New(adminclient.Config{URL: "https://" + dialAddr(g.cfg.Gateway.AdminListen), Token: token,
			Transport: httpc.Transport, Timeout: 10 * time.Second})
		if err != nil {
			return o, nil, err
		}
		p := &benchProc{name: g.name, exe: exe, args: []string{"gateway", "--config", pl.configPath(g)}, env: env, logPath: pl.logPath(g)}
		procs = append(procs, p)
		o.Gateways = append(o.Gateways, rolling.Gateway{Name: g.name, APIAddr: dialAddr(g.cfg.Gateway.Listen), Admin: admin, Proc: p})
	}
	for _, w := range f.workers {
		if err := pl.writeConfig(w); err != nil {
			return o, nil, err
		}
		p := &benchProc{name: w.name, exe: exe, args: []string{"worker", "--config", pl.configPath(w)}, env: env, logPath: pl.logPath(w)}
		procs = append(procs, p)
		o.Workers = append(o.Workers, rolling.Worker{ID: w.cfg.Worker.ID, Role: string(w.cfg.Worker.Role), Proc: p})
	}
	return o, procs, nil
}

// rollingHTTPClient is an HTTP/1.1 client that trusts the dev CA; the
// keep-alive race of HTTP/1.1 is what the retry rules are about.
func rollingHTTPClient(caFile string, timeout time.Duration) (*http.Client, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no certificate", caFile)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}, MaxIdleConnsPerHost: 64}
	return &http.Client{Transport: tr, Timeout: timeout}, nil
}

// benchProc is a child process that rolling.Run starts and restarts.
type benchProc struct {
	name, exe string
	args, env []string
	logPath   string
	c         *child
}

var _ rolling.Process = (*benchProc)(nil)

// Start starts the process, its log appended to after the first start.
func (p *benchProc) Start() error {
	var err error
	if p.c == nil {
		p.c, err = startChild(p.name, p.exe, p.args, p.env, p.logPath, nil)
	} else {
		p.c, err = p.c.restart()
	}
	return err
}

// Stop sends SIGTERM and waits for the exit; the process is killed when
// ctx ends.
func (p *benchProc) Stop(ctx context.Context) error {
	if p.c == nil || p.c.exited() {
		return nil
	}
	return p.c.stop(24*time.Hour, ctx.Done())
}

// startBenchRedis starts a private redis-server on a free loopback port
// and waits until it answers.
func startBenchRedis(ctx context.Context, pl *upPlan) (_ *child, addr string, err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, "", fmt.Errorf("bench rolling: redis-server is not installed (apt-get install redis-server), or give --redis ADDR: %w", err)
	}
	var pp portPicker
	addr, err = pp.pick("127.0.0.1")
	pp.release()
	if err != nil {
		return nil, "", err
	}
	_, port, _ := net.SplitHostPort(addr)
	c, err := startChild("redis-server", bin, []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", pl.stateDir},
		os.Environ(), filepath.Join(pl.stateDir, upLogDir, "redis.log"), nil)
	if err != nil {
		return nil, "", err
	}
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := rc.Ping(ctx).Err(); err == nil {
			return c, addr, nil
		} else if c.exited() || time.Now().After(deadline) {
			_ = c.stop(time.Second, nil)
			return nil, "", fmt.Errorf("redis-server on %s: %w; its log is %s", addr, err, c.logPath)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

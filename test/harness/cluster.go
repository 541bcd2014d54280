package harness

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.yaml.in/yaml/v3"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/adminclient"
)

// Defaults of a cluster.
const (
	// DefaultContext is the configured context of the default models.
	DefaultContext = 8192
	// DefaultKVBytes is each worker's KV pool: 16384 tokens of the
	// endless model, 131072 of the tiny one.
	DefaultKVBytes = 64 << 20
	// DefaultHeartbeatTimeout is the gateway's heartbeat timeout; workers
	// heartbeat four times as often.
	DefaultHeartbeatTimeout = 2 * time.Second
	// WaitTimeout bounds every Wait* method: a limit on hangs, generous
	// for a loaded machine, never a performance assertion.
	WaitTimeout = 60 * time.Second
	// pollInterval is how often Wait* methods look again.
	pollInterval = 20 * time.Millisecond
)

// WorkerSpec describes one worker of a cluster.
type WorkerSpec struct {
	// Role is prefill, decode or both.
	Role config.Role
	// Model is the served model name (default ModelTiny); it must be in
	// Options.Models.
	Model string
	// ModelDir is the model directory (default Env.Models[Model]), e.g. to
	// serve the tiny model under another name.
	ModelDir string
	// Transfer is the KV transfer backend (default tcp).
	Transfer config.TransferBackend
	// Edit, if set, changes the worker's config before it is written.
	Edit func(*config.Config)
}

// PD is a prefill and a decode worker of model over tcp.
func PD(model string) []WorkerSpec {
	return []WorkerSpec{{Role: config.RolePrefill, Model: model}, {Role: config.RoleDecode, Model: model}}
}

// Single is one worker of role both serving model.
func Single(model string) []WorkerSpec {
	return []WorkerSpec{{Role: config.RoleBoth, Model: model}}
}

// Options describe a cluster. The zero value is one gateway with a
// prefill and a decode worker of the tiny model.
type Options struct {
	// Workers are started after the gateways (default PD(ModelTiny)).
	Workers []WorkerSpec
	// Gateways is the number of gateways (default 1). Every worker
	// registers with every gateway; with Redis they share tenants.
	Gateways int
	// Models is the models list of every process (default DefaultModels).
	Models []config.Model
	// Redis keeps tenants in a Redis under a key prefix of this cluster's
	// own (its keys are deleted when the test ends): RedisAddr, else
	// Env.RedisAddr, else a private server started for the cluster
	// (Env.StartRedis).
	Redis bool
	// RedisAddr is the Redis of a cluster with Redis set, e.g. a private
	// server the test kills and restarts (Env.StartRedis).
	RedisAddr string
	// HeartbeatTimeout is the gateways' (default DefaultHeartbeatTimeout).
	HeartbeatTimeout time.Duration
	// EditGateway, if set, changes each gateway's config (index i) before
	// it is written.
	EditGateway func(i int, cfg *config.Config)
}

// DefaultModels lists ModelTiny and ModelEndless with DefaultContext.
func DefaultModels() []config.Model {
	return []config.Model{
		{Name: ModelTiny, ContextLength: DefaultContext, ContextPolicy: config.ContextClamp},
		{Name: ModelEndless, ContextLength: DefaultContext, ContextPolicy: config.ContextClamp},
	}
}

// Cluster is a running set of gateways and workers.
type Cluster struct {
	env *Env
	// Dir holds the cluster's config files, tokens and logs.
	Dir      string
	Gateways []*Gateway
	Workers  []*Worker
	// AdminToken is every gateway's admin token.
	AdminToken string
}

// Gateway is one gateway process of a cluster.
type Gateway struct {
	*Process
	Config     *config.Config
	ConfigPath string
	// APIURL is the OpenAI-compatible API's base URL (https://host:port,
	// without /v1); AdminURL the admin API's.
	APIURL, AdminURL string
	// Admin calls the admin API with the cluster's admin token.
	Admin *adminclient.Client
	// HTTP trusts the dev CA (HTTP/2 when the server offers it).
	HTTP *http.Client
}

// Worker is one worker process of a cluster.
type Worker struct {
	*Process
	// ID is its worker ID in the registry and the admin API.
	ID         string
	Role       config.Role
	Model      string
	Config     *config.Config
	ConfigPath string
	// MetricsURL serves the worker's Prometheus metrics.
	MetricsURL string
}

// Start runs a cluster (New, then Run) and waits until every gateway
// lists every worker healthy and serves every model that has workers.
// The cluster is stopped when the test ends; if the test failed, the tail
// of each process's log is logged first.
func Start(t testing.TB, env *Env, o Options) *Cluster {
	t.Helper()
	c := New(t, env, o)
	c.Run(t)
	c.WaitReady(t)
	return c
}

// New writes the configs of a cluster and creates its processes without
// starting them, for a test that starts them itself (Run, or
// Process.Start in its own order, or one that is expected to fail). The
// cluster is stopped when the test ends, with the log tails of a failed
// test.
func New(t testing.TB, env *Env, o Options) *Cluster {
	t.Helper()
	if o.Redis && o.RedisAddr == "" {
		if o.RedisAddr = env.RedisAddr; o.RedisAddr == "" {
			t.Logf("no shared Redis (%s is not set): starting a private redis-server", EnvRedis)
			o.RedisAddr = env.StartRedis(t).Addr
		}
	}
	if len(o.Workers) == 0 {
		o.Workers = PD(ModelTiny)
	}
	if o.Gateways <= 0 {
		o.Gateways = 1
	}
	if len(o.Models) == 0 {
		o.Models = DefaultModels()
	}
	if o.HeartbeatTimeout <= 0 {
		o.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	c := &Cluster{env: env, Dir: t.TempDir(), AdminToken: randomHex(16)}
	t.Cleanup(func() { // after Close: nothing writes the keys any more
		if o.Redis && len(c.Gateways) > 0 {
			deleteKeys(o.RedisAddr, c.Gateways[0].Config.Tenants.Redis.KeyPrefix)
		}
	})
	t.Cleanup(c.Close)
	t.Cleanup(func() {
		if t.Failed() {
			c.LogTails(t, 40)
		}
	})
	if err := c.build(o); err != nil {
		t.Fatal(err)
	}
	return c
}

// Run starts the gateways, then the workers.
func (c *Cluster) Run(t testing.TB) {
	t.Helper()
	for _, g := range c.Gateways {
		if err := g.Start(); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range c.Workers {
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
	}
}

// build writes every config file and creates the processes.
func (c *Cluster) build(o Options) error {
	n := c.env.next()
	tokenFile := filepath.Join(c.Dir, "admin-token")
	if err := os.WriteFile(tokenFile, []byte(c.AdminToken+"\n"), 0o600); err != nil {
		return err
	}
	secretFile := filepath.Join(c.Dir, "key-secret")
	if err := os.WriteFile(secretFile, []byte(randomHex(32)+"\n"), 0o600); err != nil {
		return err
	}
	ports := &freePorts{}
	defer ports.release()
	pki := c.env.PKI
	var registries []string
	for i := range o.Gateways {
		cfg := config.Default()
		cfg.Models = append([]config.Model(nil), o.Models...)
		gw := &cfg.Gateway
		gw.Listen, gw.AdminListen, gw.RegistryListen = ports.take(), ports.take(), ports.take()
		gw.TLS.CertFile, gw.TLS.KeyFile = pki.ServerCert, pki.ServerKey
		gw.AdminTokenFile = tokenFile
		gw.HeartbeatTimeout = o.HeartbeatTimeout
		cfg.Worker.HeartbeatInterval = o.HeartbeatTimeout / 4
		cfg.Cluster = config.Cluster{Auth: config.ClusterMTLS, CAFile: pki.CACert, CertFile: pki.GatewayCert, KeyFile: pki.GatewayKey}
		if o.Redis {
			cfg.Tenants.Store = config.StoreRedis
			cfg.Tenants.Redis.Addr = o.RedisAddr
			cfg.Tenants.Redis.KeyPrefix = fmt.Sprintf("warden:e2e:%s:", randomHex(6))
			cfg.Tenants.KeySecretFile = secretFile
		}
		if i > 0 && o.Redis {
			cfg.Tenants.Redis.KeyPrefix = c.Gateways[0].Config.Tenants.Redis.KeyPrefix
		}
		if o.EditGateway != nil {
			o.EditGateway(i, cfg)
		}
		if err := ports.err; err != nil {
			return err
		}
		g := &Gateway{Config: cfg, ConfigPath: filepath.Join(c.Dir, fmt.Sprintf("gateway-%d.yaml", i))}
		if err := writeConfig(g.ConfigPath, cfg, cfg.ValidateGateway); err != nil {
			return err
		}
		g.Process = c.env.NewProcess(fmt.Sprintf("gateway-%d", i), filepath.Join(c.Dir, fmt.Sprintf("gateway-%d.log", i)),
			"gateway", "--config", g.ConfigPath)
		g.APIURL = "https://" + gw.Listen
		g.AdminURL = "https://" + gw.AdminListen
		var err error
		if g.HTTP, err = httpClient(pki.CACert); err != nil {
			return err
		}
		if g.Admin, err = adminclient.New(adminclient.Config{URL: g.AdminURL, Token: c.AdminToken, Transport: g.HTTP.Transport}); err != nil {
			return err
		}
		c.Gateways = append(c.Gateways, g)
		registries = append(registries, gw.RegistryListen)
	}
	for i, spec := range o.Workers {
		if spec.Model == "" {
			spec.Model = ModelTiny
		}
		if spec.Transfer == "" {
			spec.Transfer = config.TransferTCP
		}
		dir := spec.ModelDir
		if dir == "" {
			var ok bool
			if dir, ok = c.env.Models[spec.Model]; !ok {
				return fmt.Errorf("harness: worker %d: no directory for model %q", i, spec.Model)
			}
		}
		cfg := config.Default()
		cfg.Models = append([]config.Model(nil), o.Models...)
		w := &cfg.Worker
		w.Role, w.Model, w.ModelDir, w.Threads = spec.Role, spec.Model, dir, 1
		w.Listen, w.Transfer.Listen = ports.take(), ports.take()
		w.ID = fmt.Sprintf("%s-%s-c%d-%d", spec.Role, spec.Model, n, i)
		w.Gateways = registries
		w.HeartbeatInterval = o.HeartbeatTimeout / 4
		cfg.Gateway.HeartbeatTimeout = o.HeartbeatTimeout
		w.KV.MemoryBytes = DefaultKVBytes
		w.KV.PoisonOnReserve = true
		w.MaxBatch = 8
		w.Transfer.Backend = spec.Transfer
		w.Transfer.SHMDir = c.env.ShmDir
		cfg.Observability.Metrics.Listen = ports.take()
		cfg.Cluster = config.Cluster{Auth: config.ClusterMTLS, CAFile: pki.CACert, CertFile: pki.WorkerCert, KeyFile: pki.WorkerKey}
		if spec.Edit != nil {
			spec.Edit(cfg)
		}
		if err := ports.err; err != nil {
			return err
		}
		wk := &Worker{ID: w.ID, Role: w.Role, Model: w.Model, Config: cfg,
			ConfigPath: filepath.Join(c.Dir, w.ID+".yaml"), MetricsURL: "http://" + cfg.Observability.Metrics.Listen + "/metrics"}
		if err := writeConfig(wk.ConfigPath, cfg, cfg.ValidateWorker); err != nil {
			return err
		}
		wk.Process = c.env.NewProcess(w.ID, filepath.Join(c.Dir, w.ID+".log"), "worker", "--config", wk.ConfigPath)
		c.Workers = append(c.Workers, wk)
	}
	return nil
}

// writeConfig validates cfg and writes it as YAML.
func writeConfig(path string, cfg *config.Config, validate func() error) error {
	if err := validate(); err != nil {
		return fmt.Errorf("harness: %s: %w", filepath.Base(path), err)
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// freePorts hands out loopback addresses with distinct free ports; the
// ports stay bound until release, just before the processes start.
type freePorts struct {
	held []net.Listener
	err  error
}

func (f *freePorts) take() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.err = err
		return "127.0.0.1:0"
	}
	f.held = append(f.held, ln)
	return ln.Addr().String()
}

func (f *freePorts) release() {
	for _, ln := range f.held {
		_ = ln.Close()
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// httpClient returns a client trusting the PEM CA in caFile.
func httpClient(caFile string) (*http.Client, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("harness: no certificate in %s", caFile)
	}
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
	}}, nil
}

// processes returns every process of the cluster.
func (c *Cluster) processes() []*Process {
	var out []*Process
	for _, g := range c.Gateways {
		out = append(out, g.Process)
	}
	for _, w := range c.Workers {
		out = append(out, w.Process)
	}
	return out
}

// Gateway returns the first gateway.
func (c *Cluster) Gateway() *Gateway { return c.Gateways[0] }

// Worker returns the first worker of role serving model, or nil.
func (c *Cluster) Worker(role config.Role, model string) *Worker {
	for _, w := range c.Workers {
		if w.Role == role && w.Model == model {
			return w
		}
	}
	return nil
}

// Close stops the gateways first (requests in flight are aborted and the
// workers told), then the workers, and kills whatever does not stop.
func (c *Cluster) Close() {
	for _, g := range c.Gateways {
		_ = g.Stop(StopGrace)
	}
	done := make(chan struct{}, len(c.Workers))
	for _, w := range c.Workers {
		go func() {
			_ = w.Stop(StopGrace)
			done <- struct{}{}
		}()
	}
	for range c.Workers {
		<-done
	}
}

// LogTails logs the last n lines of every process's log.
func (c *Cluster) LogTails(t testing.TB, n int) {
	t.Helper()
	for _, g := range c.Gateways {
		t.Logf("--- last %d lines of %s (%s):\n%s", n, g.Name, g.LogPath, g.LogTail(n))
	}
	for _, w := range c.Workers {
		t.Logf("--- last %d lines of %s (%s):\n%s", n, w.Name, w.LogPath, w.LogTail(n))
	}
}

// OpenAI returns the official OpenAI client for this gateway with key,
// without retries (a test sees every answer).
func (g *Gateway) OpenAI(key string, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{
		option.WithBaseURL(g.APIURL + "/v1/"),
		option.WithAPIKey(key),
		option.WithHTTPClient(g.HTTP),
		option.WithMaxRetries(0),
	}, opts...)...)
}

// NewKey creates tenant id through the first gateway's admin API, unless
// it exists, and issues a key for it.
func (c *Cluster) NewKey(t testing.TB, id string) string {
	t.Helper()
	return c.IssueKey(t, id).Key
}

// IssueKey is NewKey returning the key's description too (its ID, to
// revoke it).
func (c *Cluster) IssueKey(t testing.TB, id string) adminclient.IssuedKey {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	admin := c.Gateway().Admin
	if _, err := admin.CreateTenant(ctx, adminclient.TenantCreate{ID: id}); err != nil {
		if e, ok := err.(*adminclient.Error); !ok || e.Code != adminclient.CodeAlreadyExists {
			t.Fatalf("creating tenant %s: %v", id, err)
		}
	}
	k, err := admin.IssueKey(ctx, id, t.Name())
	if err != nil {
		t.Fatalf("issuing a key for %s: %v", id, err)
	}
	return k
}

// WaitReady waits until every gateway answers /readyz, lists every
// running worker healthy, and serves every model that has a running
// worker.
func (c *Cluster) WaitReady(t testing.TB) {
	t.Helper()
	c.waitFor(t, "the cluster to be ready", func(ctx context.Context) error {
		for _, g := range c.Gateways {
			if err := g.ready(ctx, c.runningWorkers()); err != nil {
				return fmt.Errorf("%s: %w", g.Name, err)
			}
		}
		return nil
	})
}

func (c *Cluster) runningWorkers() []*Worker {
	var out []*Worker
	for _, w := range c.Workers {
		if w.Running() {
			out = append(out, w)
		}
	}
	return out
}

// ready checks one gateway: /readyz, the workers, the models.
func (g *Gateway) ready(ctx context.Context, workers []*Worker) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.APIURL+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := g.HTTP.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	views, err := g.Admin.Workers(ctx)
	if err != nil {
		return err
	}
	healthy := map[string]bool{}
	for _, v := range views {
		healthy[v.ID] = v.Healthy
	}
	models := map[string]bool{}
	for _, w := range workers {
		if !healthy[w.ID] {
			return fmt.Errorf("worker %s not healthy", w.ID)
		}
		models[w.Model] = true
	}
	ms, err := g.Admin.Models(ctx)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if models[m.Name] && !m.Serving {
			return fmt.Errorf("model %s not served (%s)", m.Name, m.Verdict)
		}
	}
	return nil
}

// RestartWorker starts w again (after Kill or Stop) with the same config
// and ports, and waits until the cluster is ready again.
func (c *Cluster) RestartWorker(t testing.TB, w *Worker) {
	t.Helper()
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	c.WaitReady(t)
}

// WaitServing waits until the first gateway answers a one-token
// completion of model with key 200: the client's view of readiness.
func (c *Cluster) WaitServing(t testing.TB, key, model string) {
	t.Helper()
	body := map[string]any{"model": model, "prompt": "ping", "max_tokens": 1, "temperature": 0}
	c.waitFor(t, "the gateway to serve "+model, func(ctx context.Context) error {
		resp, err := c.Gateway().Post(ctx, key, "/v1/completions", body)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", resp.Status, data)
		}
		return nil
	})
}

// WaitWorker waits until cond holds for the first gateway's view of
// worker id (found is false when the gateway does not list it).
func (c *Cluster) WaitWorker(t testing.TB, id, what string, cond func(v adminclient.WorkerView, found bool) bool) adminclient.WorkerView {
	t.Helper()
	var last adminclient.WorkerView
	c.waitFor(t, "worker "+id+" to be "+what, func(ctx context.Context) error {
		views, err := c.Gateway().Admin.Workers(ctx)
		if err != nil {
			return err
		}
		for _, v := range views {
			if v.ID == id {
				last = v
				if cond(v, true) {
					return nil
				}
				return fmt.Errorf("now %+v", v)
			}
		}
		if cond(adminclient.WorkerView{}, false) {
			return nil
		}
		return fmt.Errorf("not listed")
	})
	return last
}

// WaitPoolsFree waits until every running worker reports, through the
// first gateway, every KV page free and no sequence running or waiting
// (pool accounting back to all-free after the test's requests).
func (c *Cluster) WaitPoolsFree(t testing.TB) {
	t.Helper()
	c.waitFor(t, "every worker's KV pool to be all free", func(ctx context.Context) error {
		views, err := c.Gateway().Admin.Workers(ctx)
		if err != nil {
			return err
		}
		byID := map[string]adminclient.WorkerView{}
		for _, v := range views {
			byID[v.ID] = v
		}
		for _, w := range c.runningWorkers() {
			v, ok := byID[w.ID]
			p := v.Pool
			switch {
			case !ok:
				return fmt.Errorf("worker %s not listed", w.ID)
			case p.FreePages != p.TotalPages || p.ReservedPages+p.InUsePages+p.QuarantinedPages != 0 || v.Running+v.Waiting != 0:
				return fmt.Errorf("worker %s: pool %+v, running %d, waiting %d", w.ID, p, v.Running, v.Waiting)
			}
		}
		return nil
	})
}

// Terminal lifecycle states.
var terminalStates = map[string]bool{"completed": true, "rejected": true, "aborted": true, "failed": true}

// WaitRequestDone waits until request id reaches a terminal state on the
// first gateway and returns it.
func (c *Cluster) WaitRequestDone(t testing.TB, id string) adminclient.RequestView {
	t.Helper()
	var rv adminclient.RequestView
	c.waitFor(t, "request "+id+" to finish", func(ctx context.Context) error {
		var err error
		if rv, err = c.Gateway().Admin.Request(ctx, id); err != nil {
			return err
		}
		if !terminalStates[rv.State] {
			return fmt.Errorf("state %s", rv.State)
		}
		return nil
	})
	return rv
}

// WaitRequestState waits until the first gateway lists a request of
// tenant in flight in state, and returns it.
func (c *Cluster) WaitRequestState(t testing.TB, tenantID, state string) adminclient.RequestView {
	t.Helper()
	var rv adminclient.RequestView
	c.waitFor(t, "a request of "+tenantID+" in state "+state, func(ctx context.Context) error {
		rs, err := c.Gateway().Admin.Requests(ctx, adminclient.RequestFilter{Tenant: tenantID})
		if err != nil {
			return err
		}
		var states []string
		for _, r := range rs {
			if r.State == state {
				rv = r
				return nil
			}
			states = append(states, r.State)
		}
		return fmt.Errorf("in flight: %s", strings.Join(states, ", "))
	})
	return rv
}

// waitFor polls check until it returns nil, failing the test after
// WaitTimeout or as soon as a process of the cluster ended that was not
// stopped or killed through Process.Stop or Process.Kill.
func (c *Cluster) waitFor(t testing.TB, what string, check func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	var last error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		last = check(ctx)
		cancel()
		if last == nil {
			return
		}
		for _, p := range c.processes() {
			if p.crashed() {
				t.Fatalf("waiting for %s: %s exited (%v); log tail:\n%s", what, p.Name, p.ExitErr(), p.LogTail(30))
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: gave up after %v: %v", what, WaitTimeout, last)
		}
		time.Sleep(pollInterval)
	}
}

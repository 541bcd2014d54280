package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway"
	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/tlsutil"
	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/worker"
	"github.com/warden-ai/warden/worker/model"
)

const (
	// modelName is the served model, the tiny preset.
	modelName = "tiny"
	// workerID names the benchmark's worker in both gateways.
	workerID = "bench-worker"
	// tenantID is the benchmark's tenant in each gateway's store.
	tenantID = "bench"
	// kvBytes is the worker's KV pool: 1024 pages of the tiny model
	// (16 tokens in 8 KiB), far more than the requests in flight need.
	kvBytes = 8 << 20
	// startTimeout bounds the wait for the worker to register.
	startTimeout = 30 * time.Second
	// maxAnswerBytes bounds what is read of one HTTP answer.
	maxAnswerBytes = 1 << 20
)

// benchTenant is the benchmark's tenant. Its limits are all set, so that
// every check runs (the whole Lua script on Redis), and so high that none
// ever denies.
func benchTenant() tenant.Tenant {
	return tenant.Tenant{ID: tenantID, Limits: tenant.Limits{
		RequestsPerMinute: 1_000_000_000, TokensPerMinute: 1_000_000_000_000, MaxConcurrent: 1_000_000,
		Budget: 1_000_000_000_000_000, AllowedModels: []string{modelName},
	}}
}

// clusterOptions configures startCluster.
type clusterOptions struct {
	redisAddr string // "" = memory-store gateway only
	threads   int
	logger    *slog.Logger
	// transfer, when set, starts a prefill and a decode worker joined by
	// that transfer backend instead of one both worker (no direct path).
	transfer config.TransferBackend
	// roles, when set, are the workers to start instead (no direct path);
	// routing is the gateways' gateway.routing.
	roles   []config.Role
	routing config.Routing
}

// cluster is a worker (role both, tiny model) and the gateways in front of
// it, running in this process over mTLS.
type cluster struct {
	dir      string
	pki      tlsutil.PKI
	modelDir string
	log      *slog.Logger

	gateways []*gatewayNode
	workers  []*running
	// workerMetrics are the workers' registries, by worker ID.
	workerMetrics map[string]*prometheus.Registry
	routing       config.Routing
	conn          *grpc.ClientConn
	direct        controlpb.WorkerClient
	directN       atomic.Int64 // request IDs of direct calls

	redisAddr, redisPrefix string
}

// running is a server's Run in its goroutine.
type running struct {
	stop context.CancelFunc
	done chan error
}

func run(f func(context.Context) error) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- f(ctx) }()
	return r
}

// wait stops the server and returns what Run returned.
func (r *running) wait() error {
	r.stop()
	return <-r.done
}

// gatewayNode is one gateway with its tenant, key and HTTPS client.
type gatewayNode struct {
	store string // config.StoreMemory or config.StoreRedis
	g     *gateway.Gateway
	run   *running
	admin *adminclient.Client
	key   string
	url   string // of /v1/chat/completions
	tr    *http.Transport
	http  *http.Client
}

// startCluster generates the dev PKI and the tiny model in a temporary
// directory, starts the gateways (memory store, and Redis store when
// redisAddr is set) with tenant "bench" and a key, then the worker
// registered with all of them, and waits until every gateway serves it.
func startCluster(ctx context.Context, o clusterOptions) (_ *cluster, err error) {
	c := &cluster{log: o.logger, redisAddr: o.redisAddr, routing: o.routing, workerMetrics: make(map[string]*prometheus.Registry)}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.close())
		}
	}()
	if o.redisAddr != "" {
		if err := RedisAvailable(ctx, o.redisAddr); err != nil {
			return nil, err
		}
		c.redisPrefix = uniquePrefix()
	}
	if c.dir, err = os.MkdirTemp("", "warden-bench-"); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if c.pki, err = tlsutil.EnsureDevPKI(filepath.Join(c.dir, "pki"), nil); err != nil {
		return nil, fmt.Errorf("bench: dev PKI: %w", err)
	}
	c.modelDir = filepath.Join(c.dir, "model")
	if err := model.Init(c.modelDir, model.PresetTiny, 1, model.F32); err != nil {
		return nil, fmt.Errorf("bench: tiny model: %w", err)
	}
	stores := []config.StoreKind{config.StoreMemory}
	if o.redisAddr != "" {
		stores = append(stores, config.StoreRedis)
	}
	var registries []string
	for _, s := range stores {
		n, err := c.startGateway(ctx, s)
		if err != nil {
			return nil, err
		}
		registries = append(registries, n.g.RegistryAddr().String())
	}
	roles := []config.Role{config.RoleBoth}
	if o.transfer != "" {
		roles = []config.Role{config.RolePrefill, config.RoleDecode}
	}
	if o.roles != nil {
		roles = o.roles
	}
	for i, role := range roles {
		id := workerID
		if role != config.RoleBoth || o.roles != nil {
			id += "-" + string(role)
		}
		if o.roles != nil {
			id += fmt.Sprint("-", i)
		}
		if err := c.startWorker(id, role, o.transfer, o.threads, registries); err != nil {
			return nil, err
		}
	}
	addr, err := c.waitServed(ctx, len(roles))
	if err != nil {
		return nil, err
	}
	if o.transfer != "" || o.roles != nil {
		return c, nil
	}
	tc, err := tlsutil.ClusterClientConfig(c.pki.CACert, c.pki.GatewayCert, c.pki.GatewayKey, tlsutil.PeerWorker)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	// The gateway's identity: the worker accepts no other (I10).
	if c.conn, err = grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tc))); err != nil {
		return nil, fmt.Errorf("bench: dialing the worker: %w", err)
	}
	c.direct = controlpb.NewWorkerClient(c.conn)
	return c, nil
}

// baseConfig is what the gateways and the worker share: loopback ports
// picked by the kernel, mTLS between them, model tiny.
func (c *cluster) baseConfig() *config.Config {
	cfg := config.Default()
	cfg.Cluster = config.Cluster{Auth: config.ClusterMTLS, CAFile: c.pki.CACert}
	cfg.Models = []config.Model{{Name: modelName, ContextLength: 2048, ContextPolicy: config.ContextClamp}}
	return cfg
}

func (c *cluster) startGateway(ctx context.Context, store config.StoreKind) (*gatewayNode, error) {
	cfg := c.baseConfig()
	gw := &cfg.Gateway
	gw.Listen, gw.AdminListen, gw.RegistryListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	gw.TLS.CertFile, gw.TLS.KeyFile = c.pki.ServerCert, c.pki.ServerKey
	gw.AdminToken = rand.Text()
	if c.routing != "" {
		gw.Routing = c.routing
	}
	cfg.Cluster.CertFile, cfg.Cluster.KeyFile = c.pki.GatewayCert, c.pki.GatewayKey
	cfg.Tenants.Store = store
	if store == config.StoreRedis {
		secret := make([]byte, 32)
		_, _ = rand.Read(secret)
		file := filepath.Join(c.dir, "key-secret")
		if err := os.WriteFile(file, []byte(hex.EncodeToString(secret)), 0o600); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		cfg.Tenants.KeySecretFile = file
		cfg.Tenants.Redis.Addr, cfg.Tenants.Redis.KeyPrefix = c.redisAddr, c.redisPrefix
	}
	if err := cfg.ValidateGateway(); err != nil {
		return nil, fmt.Errorf("bench: gateway config: %w", err)
	}
	g, err := gateway.New(cfg, gateway.WithLogger(c.log.With("gateway", string(store))), gateway.WithRegistry(prometheus.NewRegistry()))
	if err != nil {
		return nil, err
	}
	n := &gatewayNode{store: string(store), g: g, run: run(g.Run), url: "https://" + g.APIAddr().String() + "/v1/chat/completions"}
	c.gateways = append(c.gateways, n)

	if _, err := g.Store().CreateTenant(ctx, benchTenant()); err != nil {
		return nil, fmt.Errorf("bench: creating the tenant: %w", err)
	}
	if n.key, _, err = g.Store().IssueKey(ctx, tenantID, "bench"); err != nil {
		return nil, fmt.Errorf("bench: issuing a key: %w", err)
	}
	ca, err := os.ReadFile(c.pki.CACert)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	n.tr = &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 64,
	}
	n.http = &http.Client{Transport: n.tr, Timeout: time.Minute}
	n.admin, err = adminclient.New(adminclient.Config{
		URL: "https://" + g.AdminAddr().String(), Token: gw.AdminToken, Transport: n.tr,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return n, nil
}

func (c *cluster) startWorker(id string, role config.Role, transfer config.TransferBackend, threads int, registries []string) error {
	cfg := c.baseConfig()
	w := &cfg.Worker
	w.ID, w.Role, w.Model, w.ModelDir, w.Threads = id, role, modelName, c.modelDir, threads
	w.Listen, w.Transfer.Listen = "127.0.0.1:0", "127.0.0.1:0"
	if transfer != "" {
		w.Transfer.Backend, w.Transfer.SHMDir = transfer, c.dir
	}
	w.KV.MemoryBytes = kvBytes
	w.Gateways = registries
	cfg.Cluster.CertFile, cfg.Cluster.KeyFile = c.pki.WorkerCert, c.pki.WorkerKey
	if err := cfg.ValidateWorker(); err != nil {
		return fmt.Errorf("bench: worker config: %w", err)
	}
	reg := prometheus.NewRegistry()
	wk, err := worker.New(cfg, worker.WithLogger(c.log.With("worker", id)), worker.WithRegistry(reg))
	if err != nil {
		return err
	}
	c.workerMetrics[id] = reg
	c.workers = append(c.workers, run(wk.Run))
	return nil
}

// waitServed waits until every gateway is ready and lists n healthy
// workers, and returns the control address of the first.
func (c *cluster) waitServed(ctx context.Context, n int) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	var addr string
	for _, gn := range c.gateways {
		for {
			ws, err := gn.admin.Workers(ctx)
			if err == nil && gn.g.Ready() == nil && healthy(ws) == n {
				addr = ws[0].ControlAddr
				break
			}
			if err := c.workerStopped(); err != nil {
				return "", err
			}
			select {
			case <-ctx.Done():
				return "", fmt.Errorf("bench: the workers did not register with the %s-store gateway: %w", gn.store, context.Cause(ctx))
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return addr, nil
}

func healthy(ws []adminclient.WorkerView) int {
	n := 0
	for _, w := range ws {
		if w.Healthy {
			n++
		}
	}
	return n
}

// workerStopped reports a worker whose Run has returned.
func (c *cluster) workerStopped() error {
	for _, w := range c.workers {
		select {
		case err := <-w.done:
			w.done <- err // for close
			return fmt.Errorf("bench: a worker stopped: %v", err)
		default:
		}
	}
	return nil
}

// close stops everything, deletes the run's Redis keys and the temporary
// directory.
func (c *cluster) close() error {
	var errs []error
	if c.conn != nil {
		errs = append(errs, c.conn.Close())
	}
	for _, n := range c.gateways {
		if n.tr != nil {
			n.tr.CloseIdleConnections()
		}
		if err := n.run.wait(); err != nil {
			errs = append(errs, fmt.Errorf("bench: %s-store gateway: %w", n.store, err))
		}
	}
	for _, w := range c.workers {
		if err := w.wait(); err != nil {
			errs = append(errs, fmt.Errorf("bench: worker: %w", err))
		}
	}
	if c.redisPrefix != "" {
		errs = append(errs, deletePrefix(c.redisAddr, c.redisPrefix))
	}
	if c.dir != "" {
		errs = append(errs, os.RemoveAll(c.dir))
	}
	return errors.Join(errs...)
}

// directAnswer is what the worker returned for one Generate.
type directAnswer struct {
	ids                      []int32
	finish                   string
	promptTokens, completion int64
}

// generate asks the worker directly for the completion of prompt.
func (c *cluster) generate(ctx context.Context, prompt []int32, maxTokens int) (directAnswer, error) {
	var a directAnswer
	id := fmt.Sprintf("direct-%d", c.directN.Add(1))
	stream, err := c.direct.Generate(ctx, &controlpb.GenerateRequest{
		Owner:    &controlpb.Owner{Tenant: tenantID, RequestId: id, Epoch: 1},
		Prompt:   prompt,
		Sampling: &controlpb.SamplingParams{Temperature: 0, TopP: 1, MaxTokens: int32(maxTokens)},
	})
	if err != nil {
		return a, fmt.Errorf("bench: direct Generate: %w", err)
	}
	done := false
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) && done {
			return a, nil
		}
		if err != nil {
			return a, fmt.Errorf("bench: direct Generate: %w", err)
		}
		a.ids = append(a.ids, ev.GetTokens().GetIds()...)
		if d := ev.GetDone(); d != nil {
			a.finish, a.promptTokens, a.completion = d.FinishReason, d.PromptTokens, d.CompletionTokens
			done = true
		}
	}
}

// chatAnswer is what a gateway returned for one chat completion.
type chatAnswer struct {
	content, finish          string
	promptTokens, completion int64
}

// chatBody is the request body of a greedy chat completion.
func chatBody(prompt string, maxTokens int) []byte {
	b, _ := json.Marshal(map[string]any{
		"model":       modelName,
		"messages":    []map[string]string{{"role": "user", "content": prompt}},
		"max_tokens":  maxTokens,
		"temperature": 0,
	})
	return b
}

// chat posts body to the gateway's /v1/chat/completions with its key.
func (n *gatewayNode) chat(ctx context.Context, body []byte) (chatAnswer, error) {
	var a chatAnswer
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.url, bytes.NewReader(body))
	if err != nil {
		return a, err
	}
	req.Header.Set("Authorization", "Bearer "+n.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.http.Do(req)
	if err != nil {
		return a, fmt.Errorf("bench: %s-store gateway: %w", n.store, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return a, fmt.Errorf("bench: %s-store gateway: reading the answer: %w", n.store, err)
	}
	if resp.StatusCode != http.StatusOK {
		return a, fmt.Errorf("bench: %s-store gateway: HTTP %d: %.300s", n.store, resp.StatusCode, data)
	}
	return parseChat(data)
}

// parseChat decodes a non-streaming chat completion with one choice.
func parseChat(data []byte) (chatAnswer, error) {
	var r struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return chatAnswer{}, fmt.Errorf("bench: decoding a chat completion: %w", err)
	}
	if len(r.Choices) != 1 {
		return chatAnswer{}, fmt.Errorf("bench: a chat completion has %d choices, want 1", len(r.Choices))
	}
	ch := r.Choices[0]
	return chatAnswer{content: ch.Message.Content, finish: ch.FinishReason,
		promptTokens: r.Usage.PromptTokens, completion: r.Usage.CompletionTokens}, nil
}

// waitQuiet waits until the worker holds no page and no request: every
// request of the run released what it reserved.
func (c *cluster) waitQuiet(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		st, err := c.direct.Status(ctx, &controlpb.StatusRequest{})
		if err == nil {
			p := st.GetPool()
			if p.FreePages == p.TotalPages && len(st.GetRequests()) == 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: the worker's pool is not quiet after the run (status %v, %v)", st, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// loadTokenizer loads the model's tokenizer, as the gateway does from the
// worker's assets.
func (c *cluster) loadTokenizer() (*tokenizer.Tokenizer, error) {
	tok, err := model.LoadTokenizer(c.modelDir)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return tok, nil
}

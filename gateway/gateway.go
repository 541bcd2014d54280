package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway/internal/admin"
	"github.com/warden-ai/warden/gateway/internal/admission"
	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/gateway/internal/fairqueue"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/gateway/internal/registry"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/obs"
	"github.com/warden-ai/warden/internal/tlsutil"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/tenant/memstore"
	"github.com/warden-ai/warden/tenant/redisstore"
)

// Timeouts of the gateway's own housekeeping.
const (
	leaseReleaseTimeout = 5 * time.Second
	leaseRetryInterval  = 100 * time.Millisecond
	shutdownTimeout     = 10 * time.Second
	redisTimeout        = time.Second
)

// Gateway is the gateway process. Create it with New, then call Run once.
type Gateway struct {
	cfg     *config.Config
	logger  *slog.Logger
	started time.Time

	store       tenant.Store
	closeStore  func() error
	auth        *authenticator
	modelLimits *tenant.ModelLimitsCache
	admission   *admission.Controller
	tokenizers  *tokenizers
	table       *lifecycle.Table
	queue       *fairqueue.Queue
	reg         *registry.Registry
	metrics     *metrics
	promReg     *prometheus.Registry
	tracer      trace.Tracer
	// stopTracing flushes the tracer provider New set up from the
	// configuration (a no-op when the caller passed one).
	stopTracing func(context.Context) error

	apiLn, adminLn, registryLn, metricsLn net.Listener
	apiSrv, adminSrv, metricsSrv          *http.Server
	grpcSrv                               *grpc.Server

	// lifeMu orders request admission against shutdown: no driver starts
	// once closing is set, so running.Wait sees them all.
	lifeMu  sync.RWMutex
	closing bool
	running sync.WaitGroup // request drivers
	runOnce sync.Once

	// hooks are test seams; unset in production.
	hooks hooks
}

// hooks let tests hold a request at a chosen point; each gets the
// request's context.
type hooks struct {
	// afterReady runs once a request's first event (decode ready) has
	// been handed to the HTTP layer.
	afterReady atomic.Pointer[func(ctx context.Context)]
	// beforePrefill runs in P/D once decode's Generate is open, before
	// Prefill is sent.
	beforePrefill atomic.Pointer[func(ctx context.Context)]
}

// runHook calls the hook in p, if set.
func runHook(ctx context.Context, p *atomic.Pointer[func(ctx context.Context)]) {
	if f := p.Load(); f != nil {
		(*f)(ctx)
	}
}

// Option adjusts New.
type Option func(*options)

type options struct {
	logger   *slog.Logger
	registry *prometheus.Registry
	tracer   trace.TracerProvider
	store    tenant.Store
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithRegistry registers the gateway's metrics on reg, which /metrics
// serves. By default the gateway creates its own registry with the Go
// runtime and process collectors.
func WithRegistry(reg *prometheus.Registry) Option { return func(o *options) { o.registry = reg } }

// WithTracerProvider traces HTTP requests, requests' lifecycles and
// worker calls with tp. By default the gateway sets up the provider its
// configuration's observability.tracing names (obs.SetupTracing) and
// flushes it when Run returns.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(o *options) { o.tracer = tp } }

// WithStore uses s as the tenant store instead of the one tenants.store
// names (tests, or a caller that shares a store).
func WithStore(s tenant.Store) Option { return func(o *options) { o.store = s } }

// New builds the gateway and binds its listeners, so that a bad
// configuration or a busy port fails here, before Run: the tenant store,
// authentication, admission, the request table, the fair queue, the
// worker registry (gRPC, cluster auth), the HTTPS API with /metrics,
// /healthz and /readyz, and the admin API when an admin token is
// configured. cfg should have passed ValidateGateway (tests may leave the
// admin token out).
func New(cfg *config.Config, opts ...Option) (g *Gateway, err error) {
	o := options{logger: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	gw := &Gateway{cfg: cfg, logger: o.logger, started: time.Now(), closeStore: func() error { return nil },
		stopTracing: func(context.Context) error { return nil }}
	g = gw
	defer func() {
		if err != nil {
			// gw, not g: every failed return has already set g to nil.
			gw.release()
		}
	}()
	cluster, err := newClusterAuth(&cfg.Cluster)
	if err != nil {
		return nil, err
	}
	if o.tracer == nil {
		if o.tracer, g.stopTracing, err = obs.SetupTracing(context.Background(), cfg.Observability.Tracing, "warden-gateway"); err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
	}
	g.tracer = o.tracer.Tracer(tracerName)
	if err := g.openStore(o.store); err != nil {
		return nil, err
	}
	g.promReg = o.registry
	if g.promReg == nil {
		g.promReg = prometheus.NewRegistry()
		g.promReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}

	g.modelLimits = tenant.NewModelLimitsCache(g.store, tenant.ModelLimitsCacheConfig{Logger: g.logger})
	// A worker that cannot be told to abort within the heartbeat timeout
	// is declared lost anyway.
	g.table = lifecycle.NewTable(lifecycle.Config{Logger: g.logger, AbortTimeout: cfg.Gateway.HeartbeatTimeout})
	g.queue = fairqueue.New(fairqueue.Config{MaxWaiting: cfg.Gateway.Queue.MaxWaiting, MaxWait: cfg.Gateway.Queue.MaxWait})
	models := admission.ModelsFromConfig(cfg.Models)
	names := make([]string, len(models))
	for i, m := range models {
		names[i] = m.Name
	}
	if g.metrics, err = newMetrics(g.promReg, names, cfg.Observability.Metrics.TenantLabelCap,
		func() float64 { return float64(g.table.InFlight()) },
		func() float64 { return float64(g.queue.Len()) },
		func() []registry.Snapshot { return g.reg.Workers() }); err != nil {
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	g.admission = admission.NewController(admission.Config{Models: models, Limits: g.modelLimits, OnChange: g.onModelChange})

	dial := append(cluster.dial, grpc.WithStatsHandler(obs.GRPCClientHandler(o.tracer)))
	hostname, _ := os.Hostname()
	g.tokenizers = &tokenizers{models: make(map[string]*modelTokenizer)}
	g.reg = registry.New(registry.Config{
		GatewayID:        "gateway-" + hostname,
		HeartbeatTimeout: cfg.Gateway.HeartbeatTimeout,
		Dial:             func(addr string) (*grpc.ClientConn, error) { return grpc.NewClient(addr, dial...) },
		Accept:           g.acceptWorker,
		OnChange:         g.onWorkerChange,
		Logger:           g.logger,
	})
	g.tokenizers.reg = g.reg
	g.metrics.workerStates(nil)

	if err := g.listen(cluster, o.tracer); err != nil {
		return nil, err
	}
	return g, nil
}

// openStore opens the tenant store tenants.store names, unless given one.
func (g *Gateway) openStore(given tenant.Store) error {
	t := &g.cfg.Tenants
	if given != nil {
		g.store = given
	} else {
		var secret []byte
		if t.KeySecretFile != "" {
			b, err := os.ReadFile(t.KeySecretFile)
			if err != nil {
				return fmt.Errorf("gateway: tenants.key_secret_file: %w", err)
			}
			secret = bytes.TrimSpace(b)
		} else if t.Store == config.StoreMemory {
			// Keys live only as long as the process: a random secret will do.
			secret = make([]byte, 32)
			_, _ = rand.Read(secret)
		}
		switch t.Store {
		case config.StoreMemory:
			s, err := memstore.New(secret)
			if err != nil {
				return fmt.Errorf("gateway: memory tenant store: %w", err)
			}
			g.store = s
		case config.StoreRedis:
			rdb, err := redisClient(&t.Redis)
			if err != nil {
				return err
			}
			s, err := redisstore.New(rdb, secret, redisstore.WithPrefix(t.Redis.KeyPrefix),
				redisstore.WithFailOpen(t.FailOpen), redisstore.WithLogger(g.logger))
			if err != nil {
				_ = rdb.Close()
				return fmt.Errorf("gateway: redis tenant store: %w", err)
			}
			g.store, g.closeStore = s, rdb.Close
		default:
			return fmt.Errorf("gateway: unknown tenants.store %q", t.Store)
		}
	}
	var authn tenant.Authenticator = g.store
	if t.AuthCacheTTL > 0 {
		authn = tenant.NewAuthCache(g.store, tenant.AuthCacheConfig{TTL: t.AuthCacheTTL, Grace: t.OutageGrace, Logger: g.logger})
	}
	g.auth = &authenticator{next: authn, tenants: make(map[string]tenantInfo)}
	return nil
}

// redisClient connects to the Redis store: one dial retry and short
// timeouts, so an outage fails requests fast (503) instead of hanging them.
func redisClient(r *config.Redis) (*redis.Client, error) {
	opts := &redis.Options{
		Addr: r.Addr, Username: r.Username, DB: r.DB,
		DialerRetries: 1, DialTimeout: redisTimeout, ReadTimeout: redisTimeout, WriteTimeout: redisTimeout,
		PoolTimeout: 2 * redisTimeout,
	}
	if r.PasswordFile != "" {
		b, err := os.ReadFile(r.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("gateway: tenants.redis.password_file: %w", err)
		}
		opts.Password = string(bytes.TrimSpace(b))
	}
	if r.TLS {
		host, _, err := net.SplitHostPort(r.Addr)
		if err != nil {
			return nil, fmt.Errorf("gateway: tenants.redis.addr: %w", err)
		}
		opts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
	}
	return redis.NewClient(opts), nil
}

// adminToken reads the admin token from the configuration ("" when none).
func (g *Gateway) adminToken() (string, error) {
	gw := &g.cfg.Gateway
	if gw.AdminTokenFile == "" {
		return gw.AdminToken, nil
	}
	b, err := os.ReadFile(gw.AdminTokenFile)
	if err != nil {
		return "", fmt.Errorf("gateway: gateway.admin_token_file: %w", err)
	}
	return string(bytes.TrimSpace(b)), nil
}

// listen binds every listener and builds the servers.
func (g *Gateway) listen(cluster *clusterAuth, tp trace.TracerProvider) error {
	gw := &g.cfg.Gateway
	var serverTLS *tls.Config
	if !gw.TLS.Plaintext {
		var err error
		if serverTLS, err = tlsutil.ServerTLSConfig(gw.TLS.CertFile, gw.TLS.KeyFile); err != nil {
			return fmt.Errorf("gateway: gateway.tls: %w", err)
		}
	}
	var err error
	if g.apiLn, err = net.Listen("tcp", gw.Listen); err != nil {
		return fmt.Errorf("gateway: API listener (gateway.listen): %w", err)
	}
	var h http.Handler = api.NewHandler(api.Config{
		MaxBodyBytes: int64(gw.MaxBodyBytes),
		Ready:        func(context.Context) error { return g.Ready() },
		Metrics:      promhttp.HandlerFor(g.promReg, promhttp.HandlerOpts{}),
	}, g.auth, service{g}, g.logger)
	h = otelhttp.NewHandler(h, "warden.api", append(obs.HTTPServerOptions(g.cfg.Observability.Tracing, tp), apiTraceOptions()...)...)
	g.apiSrv = httpServer(h, serverTLS)

	token, err := g.adminToken()
	if err != nil {
		return err
	}
	if token != "" {
		if g.adminLn, err = net.Listen("tcp", gw.AdminListen); err != nil {
			return fmt.Errorf("gateway: admin listener (gateway.admin_listen): %w", err)
		}
		g.adminSrv = httpServer(admin.NewHandler(admin.Config{Token: token}, g.store, clusterView{g}, requestsView{g.table}, g.logger), serverTLS)
	} else {
		g.logger.Warn("no admin token configured: the admin API is not served")
	}

	if g.registryLn, err = net.Listen("tcp", gw.RegistryListen); err != nil {
		return fmt.Errorf("gateway: registry listener (gateway.registry_listen): %w", err)
	}
	g.grpcSrv = grpc.NewServer(cluster.server...)
	controlpb.RegisterRegistryServer(g.grpcSrv, g.reg)

	if addr := g.cfg.Observability.Metrics.Listen; addr != "" {
		if g.metricsLn, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("gateway: metrics listener (observability.metrics.listen): %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(g.promReg, promhttp.HandlerOpts{}))
		g.metricsSrv = httpServer(mux, nil)
	}
	return nil
}

// httpServer serves h, over TLS when cfg is set (each server gets its own
// copy: serving adds HTTP/2 to it). WriteTimeout stays 0: streams are
// long; the API bounds each write itself.
func httpServer(h http.Handler, cfg *tls.Config) *http.Server {
	if cfg != nil {
		cfg = cfg.Clone()
	}
	return &http.Server{Handler: h, TLSConfig: cfg, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
}

// APIAddr is the address the OpenAI-compatible API listens on.
func (g *Gateway) APIAddr() net.Addr { return g.apiLn.Addr() }

// AdminAddr is the admin API's address; nil without an admin token.
func (g *Gateway) AdminAddr() net.Addr {
	if g.adminLn == nil {
		return nil
	}
	return g.adminLn.Addr()
}

// RegistryAddr is the address workers register at.
func (g *Gateway) RegistryAddr() net.Addr { return g.registryLn.Addr() }

// Store is the tenant store, e.g. to create a tenant and issue its key
// (`warden up`).
func (g *Gateway) Store() tenant.Store { return g.store }

// Ready reports whether at least one model is being served.
func (g *Gateway) Ready() error {
	for _, s := range g.admission.States() {
		if s.Serving {
			return nil
		}
	}
	return errors.New("gateway: no model is servable yet")
}

// Run serves until ctx is done or a listener fails, then shuts down: it
// stops accepting requests, aborts those in flight (every worker involved
// is told), stops the servers and closes the worker connections and the
// tenant store. It returns nil after ctx ended. Run may be called once.
func (g *Gateway) Run(ctx context.Context) error {
	err := errors.New("gateway: Run called twice")
	g.runOnce.Do(func() { err = g.run(ctx) })
	return err
}

func (g *Gateway) run(ctx context.Context) error {
	defer g.release()
	regCtx, stopSweeper := context.WithCancel(context.Background())
	defer stopSweeper()
	go g.reg.Run(regCtx)

	failed := make(chan error, 4)
	var serving sync.WaitGroup
	serveHTTP := func(name string, srv *http.Server, ln net.Listener) {
		if srv == nil {
			return
		}
		serving.Go(func() {
			var err error
			if srv.TLSConfig != nil {
				err = srv.ServeTLS(ln, "", "")
			} else {
				err = srv.Serve(ln)
			}
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				failed <- fmt.Errorf("gateway: %s server: %w", name, err)
			}
		})
	}
	serveHTTP("API", g.apiSrv, g.apiLn)
	serveHTTP("admin", g.adminSrv, g.adminLn)
	serveHTTP("metrics", g.metricsSrv, g.metricsLn)
	serving.Go(func() {
		if err := g.grpcSrv.Serve(g.registryLn); err != nil {
			failed <- fmt.Errorf("gateway: registry server: %w", err)
		}
	})
	attrs := []any{"api", g.apiLn.Addr().String(), "registry", g.registryLn.Addr().String(), "tls", g.apiSrv.TLSConfig != nil}
	if g.adminLn != nil {
		attrs = append(attrs, "admin", g.adminLn.Addr().String())
	}
	g.logger.Info("gateway serving", attrs...)

	var runErr error
	select {
	case <-ctx.Done():
		g.logger.Info("gateway shutting down")
	case runErr = <-failed:
		g.logger.Error("gateway stopping", "err", runErr)
	}
	g.shutdown()
	serving.Wait()
	return runErr
}

// shutdown stops new requests, aborts in-flight ones everywhere and stops
// the servers.
func (g *Gateway) shutdown() {
	g.lifeMu.Lock()
	g.closing = true
	g.lifeMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if n := g.table.AbortAll(lifecycle.CauseShutdown); n > 0 {
		g.logger.Info("aborting requests in flight", "count", n)
	}
	drivers := make(chan struct{})
	go func() { g.running.Wait(); close(drivers) }()
	select {
	case <-drivers:
	case <-ctx.Done():
	}
	for _, srv := range []*http.Server{g.apiSrv, g.adminSrv, g.metricsSrv} {
		if srv != nil {
			if err := srv.Shutdown(ctx); err != nil {
				_ = srv.Close()
			}
		}
	}
	stopped := make(chan struct{})
	go func() { g.grpcSrv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		g.grpcSrv.Stop()
	}
	if err := g.table.Wait(ctx); err != nil {
		g.logger.Warn("shutdown: abort fan-out still running", "err", err)
	}
}

// begin counts a new request driver, unless the gateway is shutting down.
func (g *Gateway) begin() bool {
	g.lifeMu.RLock()
	defer g.lifeMu.RUnlock()
	if g.closing {
		return false
	}
	g.running.Add(1)
	return true
}

// release frees what New opened.
func (g *Gateway) release() {
	for _, ln := range []net.Listener{g.apiLn, g.adminLn, g.registryLn, g.metricsLn} {
		if ln != nil {
			_ = ln.Close()
		}
	}
	if g.reg != nil {
		g.reg.Close()
	}
	if err := g.closeStore(); err != nil {
		g.logger.Warn("closing the tenant store", "err", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.stopTracing(ctx); err != nil {
		g.logger.Warn("flushing traces", "err", err)
	}
}

// Close frees what New opened, for a Gateway that will not Run (Run frees
// it itself; Close is then a no-op).
func (g *Gateway) Close() error {
	g.runOnce.Do(g.release)
	return nil
}

// acceptWorker vets a registering worker: its model must be configured
// here, and its tokenizer must be the model's (see tokenizers.accept).
func (g *Gateway) acceptWorker(ctx context.Context, info *controlpb.WorkerInfo, client controlpb.WorkerClient) error {
	if !g.admission.Has(info.Model) {
		return fmt.Errorf("model %q is not configured on this gateway", info.Model)
	}
	return g.tokenizers.accept(ctx, info, client)
}

// onWorkerChange follows the registry: every model's effective context is
// recomputed at once (I2), a lost worker's requests are aborted, and
// waiting requests get a chance at the capacity that appeared.
func (g *Gateway) onWorkerChange(c registry.Change) {
	for _, s := range g.admission.States() {
		g.admission.SetWorkers(s.Model, capacities(g.reg.Healthy(s.Model)))
	}
	g.metrics.workerStates(g.reg.Workers())
	if c.Kind == registry.Lost {
		if n := g.table.AbortWorker(c.Worker.ID, lifecycle.CauseWorkerLost); n > 0 {
			g.logger.Warn("aborted requests of a lost worker", "worker", c.Worker.ID, "count", n)
		}
	}
	g.queue.Signal()
}

// onModelChange exports and logs a model's context agreement (I2).
func (g *Gateway) onModelChange(prev, cur admission.State) {
	g.metrics.modelState(cur)
	if prev.Verdict == cur.Verdict && prev.Effective == cur.Effective && prev.Reason == cur.Reason {
		return
	}
	attrs := []any{"model", cur.Model, "verdict", string(cur.Verdict), "configured", cur.Configured,
		"effective", cur.Effective, "policy", string(cur.Policy), "workers", len(cur.Workers)}
	switch cur.Verdict {
	case admission.VerdictClamped:
		g.logger.Warn("model context clamped to the smallest KV pool: "+cur.Reason, attrs...)
	case admission.VerdictRefused:
		g.logger.Error("model not served: "+cur.Reason, attrs...)
	case admission.VerdictNoWorkers:
		if prev.Verdict != "" {
			g.logger.Warn("model not served: "+cur.Reason, attrs...)
		}
	default:
		g.logger.Info("model context agrees with every serving worker", attrs...)
	}
}

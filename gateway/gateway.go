package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway/internal/adapters"
	"github.com/warden-ai/warden/gateway/internal/admission"
	"github.com/warden-ai/warden/gateway/internal/aliases"
	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/gateway/internal/domainevict"
	"github.com/warden-ai/warden/gateway/internal/fairqueue"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/gateway/internal/registry"
	"github.com/warden-ai/warden/gateway/internal/storedresp"
	"github.com/warden-ai/warden/gateway/internal/storefailover"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/health"
	"github.com/warden-ai/warden/internal/obs"
	"github.com/warden-ai/warden/tenant"
)

// Timeouts of the gateway's own housekeeping.
const (
	leaseReleaseTimeout = 5 * time.Second
	shutdownTimeout     = 10 * time.Second
)

// Gateway is the gateway process. Create it with New, then call Run once.
type Gateway struct {
	cfg     *config.Config
	logger  *slog.Logger
	started time.Time

	store   tenant.Store
	domains *cacheDomains // prefix-cache domains of requests
	// responses keeps the Responses API's stored responses.
	responses *storedresp.Store
	// evictor evicts a tenant's cache domains from the workers when the
	// admin API deletes or disables it, revokes a per-key domain's key or
	// changes its prefix_cache setting (DESIGN I8).
	evictor    *domainevict.Evictor
	grammars   grammarCache // compiled structured-output constraints
	closeStore func() error
	// adapterStore is the tenant store's tenant.AdapterStore, if it is one.
	adapterStore tenant.AdapterStore
	auth         *authenticator
	modelLimits  *tenant.ModelLimitsCache
	// failover wraps a Redis store: degraded mode through its outages
	// (nil with another store).
	failover *storefailover.Store
	aliases  *aliases.Resolver // model aliases, resolved before anything else
	// adapters is the LoRA adapter registry; nil when the tenant store
	// holds no adapters (tenant.AdapterStore).
	adapters   *adapters.Registry
	admission  *admission.Controller
	tokenizers *tokenizers
	layouts    *layoutAgreement
	rates      prefillRates // measured prefill time per token, for reservation timeouts
	table      *lifecycle.Table
	journal    *tenant.ReleaseJournal
	fleet      *tenant.FleetInFlight // nil when tenants.share_interval is 0
	queue      *fairqueue.Queue
	reg        *registry.Registry
	metrics    *metrics
	promReg    *prometheus.Registry
	tracer     trace.Tracer
	// stopTracing flushes the tracer provider New set up from the
	// configuration (a no-op when the caller passed one).
	stopTracing func(context.Context) error

	apiLn, adminLn, registryLn, metricsLn net.Listener
	apiSrv, adminSrv                      *http.Server
	grpcSrv                               *grpc.Server
	// probe serves metricsLn from the start of New (internal/health).
	probe *health.Server

	// lifeMu orders request admission against shutdown: no driver starts
	// once closing is set, so running.Wait sees them all.
	lifeMu  sync.RWMutex
	closing bool
	// leaving is set at SIGTERM: /readyz turns 503 and every API response
	// carries Connection: close for gateway.shutdown_delay, before the
	// drain sets closing.
	leaving atomic.Bool
	// warm is set once every configured model had its workers and its
	// tokenizer (warmedUp); until then the gateway is starting.
	warm    atomic.Bool
	running sync.WaitGroup // request drivers
	runOnce sync.Once
	drain   drainState
	reload  reloadState

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
	level    *slog.LevelVar
	ratio    *obs.LiveRatio
	source   func() (*config.Config, error)
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
	gw.reload.level, gw.reload.source, gw.reload.ratio = o.level, o.source, o.ratio
	g = gw
	defer func() {
		if err != nil {
			// gw, not g: every failed return has already set g to nil.
			gw.release()
		}
	}()
	if err := g.listenProbe(); err != nil {
		return nil, err
	}
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

	if g.failover != nil {
		if err := g.failover.Register(g.promReg); err != nil {
			return nil, fmt.Errorf("gateway: metrics: %w", err)
		}
	}
	g.journal = tenant.NewReleaseJournal(tenant.JournalConfig{Logger: g.logger})
	g.aliases = aliases.New(g.store, aliases.Config{Static: cfg.Aliases(), Logger: g.logger})
	if g.adapterStore != nil {
		g.adapters = adapters.New(g.adapterStore, g.modelShape, int64(cfg.Gateway.Adapters.MaxBytes))
	}
	// A worker that cannot be told to abort within the heartbeat timeout
	// is declared lost anyway.
	g.table = lifecycle.NewTable(lifecycle.Config{Logger: g.logger, AbortTimeout: cfg.Gateway.HeartbeatTimeout})
	queueCfg := fairqueue.Config{MaxWaiting: cfg.Gateway.Queue.MaxWaiting, MaxWait: cfg.Gateway.Queue.MaxWait}
	if cfg.Tenants.ShareInterval > 0 {
		g.fleet = tenant.NewFleetInFlight(g.store, tenant.FleetConfig{Interval: cfg.Tenants.ShareInterval, Logger: g.logger})
		queueCfg.Fleet = g.fleet
		if err := g.promReg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "warden_fair_share_degraded",
			Help: "1 while this gateway's last report of requests in flight to the tenant store failed: fair queuing then counts this gateway's requests only.",
		}, func() float64 {
			if g.fleet.Degraded() {
				return 1
			}
			return 0
		})); err != nil {
			return nil, fmt.Errorf("gateway: metrics: %w", err)
		}
	}
	g.queue = fairqueue.New(queueCfg)
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
	if err := g.promReg.Register(g.domains); err != nil {
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	g.grammars = newGrammarCache(cfg.Gateway.GrammarCache)
	if err := g.promReg.Register(g.grammars); err != nil {
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	if err := g.promReg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "warden_lease_release_journal",
		Help: "Tenant lease releases that failed while the tenant store was unavailable, waiting to be retried.",
	}, func() float64 { return float64(g.journal.Len()) })); err != nil {
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	g.admission = admission.NewController(admission.Config{Models: models, Limits: g.modelLimits, OnChange: g.onModelChange})

	dial := append(cluster.dial, grpc.WithStatsHandler(obs.GRPCClientHandler(o.tracer)))
	hostname, _ := os.Hostname()
	g.tokenizers = &tokenizers{models: make(map[string]*modelTokenizer), logger: g.logger, reasoning: reasoningOverrides(cfg.Models)}
	g.reg = registry.New(registry.Config{
		GatewayID:        "gateway-" + hostname,
		HeartbeatTimeout: cfg.Gateway.HeartbeatTimeout,
		Dial:             func(addr string) (*grpc.ClientConn, error) { return grpc.NewClient(addr, dial...) },
		Agree:            func(i *controlpb.WorkerInfo, p *controlpb.PoolStats) error { return g.layouts.agree(i, p) },
		Accept:           g.acceptWorker,
		OnChange:         g.onWorkerChange,
		PrefixCache:      g.domains.report,
		Logger:           g.logger,
	})
	g.tokenizers.reg = g.reg
	g.evictor = g.domains.evictor(g.reg, g.adapters, cfg.Gateway.HeartbeatTimeout, g.logger)
	if err := g.promReg.Register(g.evictor); err != nil {
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	g.layouts = newLayoutAgreement(g.reg, g.metrics)
	g.metrics.workerStates(nil)

	if err := g.listen(cluster, o.tracer); err != nil {
		return nil, err
	}
	return g, nil
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

// Ready reports whether the gateway should take traffic (/readyz): not
// while it is starting (until every configured model has a registered,
// layout-checked worker for each role and its tokenizer loaded, see
// warmedUp), nor once it is shutting down (from SIGTERM on, through
// gateway.shutdown_delay and the drain). A gateway that has started is
// ready while at least one model is served: a model that lost its
// workers afterwards answers 503 model_unavailable, as every other
// gateway, which share the workers, would.
func (g *Gateway) Ready() error {
	if g.leaving.Load() || g.stopping() {
		return errDraining
	}
	if !g.warmedUp() {
		return fmt.Errorf("%w: waiting for %s", errStarting, strings.Join(g.coldModels(), "; "))
	}
	for _, s := range g.admission.States() {
		if s.Serving {
			return nil
		}
	}
	return errors.New("gateway: no model is servable")
}

// errStarting is Ready's answer while the gateway is starting.
var errStarting = errors.New("gateway: starting")

// warmedUp reports whether the gateway has started: every configured
// model had, at some point since the gateway started, workers for each
// role (a both worker, or a prefill and a decode worker) that passed
// registration (layout agreement, I11) and its tokenizer loaded. It stays
// true once it was.
func (g *Gateway) warmedUp() bool {
	if g.warm.Load() {
		return true
	}
	if len(g.coldModels()) > 0 {
		return false
	}
	if g.warm.CompareAndSwap(false, true) {
		g.logger.Info("gateway started: every model has its workers and its tokenizer; /readyz is 200")
	}
	return true
}

// coldModels names the models that keep the gateway starting, each with
// what it waits for.
func (g *Gateway) coldModels() []string {
	var cold []string
	for _, s := range g.admission.States() {
		switch {
		case s.Verdict == admission.VerdictNoWorkers:
			cold = append(cold, fmt.Sprintf("model %s: %s", s.Model, s.Reason))
		case g.tokenizers.get(s.Model) == nil:
			cold = append(cold, fmt.Sprintf("model %s: tokenizer not loaded", s.Model))
		}
	}
	return cold
}

// startingError is the 503 not_ready of a request for model while the
// gateway is starting and model does not have its workers and tokenizer
// yet; nil otherwise (a model that is ready is served at once, and one
// that lost its workers after the start is model_unavailable).
func (g *Gateway) startingError(model string) error {
	if g.warmedUp() {
		return nil
	}
	st, ok := g.admission.Current(model)
	if ok && st.Verdict != admission.VerdictNoWorkers && g.tokenizers.get(model) != nil {
		return nil
	}
	return api.NotReady(model)
}

// acceptWorker vets a registering worker: its model must be configured
// here, and its tokenizer must be the model's (see tokenizers.accept).
// A refusal is counted by reason (warden_worker_registrations_refused_total);
// the registry logs it and returns it to the worker.
func (g *Gateway) acceptWorker(ctx context.Context, info *controlpb.WorkerInfo, client controlpb.WorkerClient) error {
	var err error
	if !g.admission.Has(info.Model) {
		err = refuse(refusedUnknownModel, codes.FailedPrecondition, "model %q is not configured on this gateway", info.Model)
	} else {
		err = g.tokenizers.accept(ctx, info, client)
	}
	if r, ok := errors.AsType[*refusal](err); ok {
		g.metrics.refused.WithLabelValues(r.reason).Inc()
	}
	return err
}

// onWorkerChange follows the registry: every model's effective context is
// recomputed at once (I2), a lost worker's requests are aborted, and
// waiting requests get a chance at the capacity that appeared.
func (g *Gateway) onWorkerChange(c registry.Change) {
	for _, s := range g.admission.States() {
		g.admission.SetWorkers(s.Model, capacities(g.reg.Healthy(s.Model)))
	}
	g.metrics.workerStates(g.reg.Workers())
	g.warmedUp()
	if c.Kind == registry.Lost || c.Kind == registry.Registered {
		// A restarted (or lost) worker's prefix cache is gone.
		g.domains.index.Forget(c.Worker.ID)
	}
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

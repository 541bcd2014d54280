package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/tenant/memstore"
	"github.com/warden-ai/warden/tenant/redisstore"
)

// DefaultIterations is the default of TenantsOptions.Iterations.
const DefaultIterations = 5000

// TenantsOptions configures RunTenants; zero fields take the defaults.
type TenantsOptions struct {
	// RedisAddr is the Redis to measure; required.
	RedisAddr string
	// Iterations is the number of requests measured one at a time on each
	// store, for the per-operation latencies.
	Iterations int
	// Duration is how long each store runs at each concurrency, for the
	// requests/s.
	Duration time.Duration
	// Round is the longest stretch one store runs before the other takes
	// its turn.
	Round time.Duration
	// Concurrency is the sweep of requests in flight; 1 is always included.
	Concurrency []int
	// Logger receives the stores' logs; nil discards them.
	Logger *slog.Logger
}

func (o *TenantsOptions) defaults() error {
	if o.RedisAddr == "" {
		return errors.New("bench: the tenant store benchmark needs a Redis address")
	}
	if o.Iterations <= 0 {
		o.Iterations = DefaultIterations
	}
	if o.Duration <= 0 {
		o.Duration = DefaultDuration / 2
	}
	if o.Round <= 0 {
		o.Round = DefaultRound
	}
	conc, err := sweep(o.Concurrency)
	o.Concurrency = conc
	return err
}

// Op is one tenant operation of a request, measured separately.
type Op int

// The operations, in report order.
const (
	OpAuthStore    Op = iota // Authenticate asking the store
	OpAuthCached             // Authenticate through an AuthCache, as the gateway does
	OpAcquire                // Acquire, every limit checked
	OpRelease                // Lease.Release, usage recorded
	OpRequest                // cached auth + Acquire + Release: a gateway request's tenant work
	OpRequestStore           // uncached auth + Acquire + Release
	numOps
)

// String names the operation in reports.
func (k Op) String() string {
	switch k {
	case OpAuthStore:
		return "Authenticate, store"
	case OpAuthCached:
		return "Authenticate, AuthCache (TTL 1s)"
	case OpAcquire:
		return "Acquire (RPM, TPM, concurrency, budget, model)"
	case OpRelease:
		return "Release (refund, usage)"
	case OpRequest:
		return "**request**: cached auth + Acquire + Release"
	case OpRequestStore:
		return "request with uncached auth"
	}
	return fmt.Sprintf("Op(%d)", int(k))
}

// StoreResult is the measurements of one store.
type StoreResult struct {
	// Name is "memory" or "Redis".
	Name string
	// Ops are the latencies of each operation, indexed by Op.
	Ops [numOps]Latency
	// Runs are whole requests (cached auth + Acquire + Release) at each
	// TenantsOptions.Concurrency.
	Runs []Throughput
}

// TenantsReport is the result of RunTenants.
type TenantsReport struct {
	Machine Machine
	// Options are the options used, defaults filled in.
	Options TenantsOptions
	// Stores are memory, then Redis.
	Stores []StoreResult
}

// benchStore is a store with the benchmark's tenant and key.
type benchStore struct {
	name  string
	store tenant.Store
	cache *tenant.AuthCache
	key   string
}

// The request whose tenant work is measured: the gateway benchmark's,
// 37 prompt tokens and max_tokens 4, all generated.
const (
	requestPromptTokens = 37
	requestMaxTokens    = 4
)

// startStores opens the two stores, each with the benchmark's tenant and
// key, logging to logger (nil discards). cleanup closes the Redis client
// and deletes the run's keys.
func startStores(ctx context.Context, redisAddr string, logger *slog.Logger) (_ []*benchStore, cleanup func() error, err error) {
	if err := RedisAvailable(ctx, redisAddr); err != nil {
		return nil, nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	mem, err := memstore.New(secret)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	rdb := newRedisClient(redisAddr)
	prefix := uniquePrefix()
	closeRedis := func() error { return errors.Join(rdb.Close(), deletePrefix(redisAddr, prefix)) }
	defer func() {
		if err != nil {
			err = errors.Join(err, closeRedis())
		}
	}()
	red, err := redisstore.New(rdb, secret, redisstore.WithPrefix(prefix), redisstore.WithLogger(logger))
	if err != nil {
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	var stores []*benchStore
	for _, s := range []struct {
		name  string
		store tenant.Store
	}{{"memory", mem}, {"Redis", red}} {
		bs, err := newBenchStore(ctx, s.name, s.store, logger)
		if err != nil {
			return nil, nil, err
		}
		stores = append(stores, bs)
	}
	return stores, closeRedis, nil
}

// RunTenants measures the tenant work of one request on the in-memory
// store and on Redis, directly against the stores.
func RunTenants(ctx context.Context, o TenantsOptions) (rep *TenantsReport, err error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	rep = &TenantsReport{Machine: currentMachine(), Options: o}
	stores, closeStores, err := startStores(ctx, o.RedisAddr, o.Logger)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := closeStores(); cerr != nil && err == nil {
			rep, err = nil, cerr
		}
	}()
	fns := make([]request, len(stores))
	for i, s := range stores {
		fns[i] = s.request
	}
	if err := warmUp(ctx, fns); err != nil {
		return nil, err
	}

	// One request at a time, the stores taking turns.
	lat := make([][numOps][]time.Duration, len(stores))
	for range o.Iterations {
		for i, s := range stores {
			d, err := s.timed(ctx)
			if err != nil {
				return nil, err
			}
			for k := range numOps {
				lat[i][k] = append(lat[i][k], d[k])
			}
		}
	}
	rep.Stores = make([]StoreResult, len(stores))
	for i, s := range stores {
		rep.Stores[i].Name = s.name
		for k := range numOps {
			rep.Stores[i].Ops[k] = summarize(lat[i][k])
		}
	}
	for _, conc := range o.Concurrency {
		runs, err := alternate(ctx, conc, o.Duration, o.Round, fns)
		if err != nil {
			return nil, err
		}
		for i, r := range runs {
			rep.Stores[i].Runs = append(rep.Stores[i].Runs, r)
		}
	}
	rep.Machine.finish()
	return rep, nil
}

func newBenchStore(ctx context.Context, name string, s tenant.Store, logger *slog.Logger) (*benchStore, error) {
	if _, err := s.CreateTenant(ctx, benchTenant()); err != nil {
		return nil, fmt.Errorf("bench: %s store: creating the tenant: %w", name, err)
	}
	key, _, err := s.IssueKey(ctx, tenantID, "bench")
	if err != nil {
		return nil, fmt.Errorf("bench: %s store: issuing a key: %w", name, err)
	}
	cache := tenant.NewAuthCache(s, tenant.AuthCacheConfig{TTL: tenant.DefaultAuthTTL, Logger: logger})
	return &benchStore{name: name, store: s, cache: cache, key: key}, nil
}

// admit acquires and releases a lease for the principal, checking what
// the store answers.
func (s *benchStore) admit(ctx context.Context, p tenant.Principal) (acquire, release time.Duration, err error) {
	if p.Tenant.ID != tenantID {
		return 0, 0, fmt.Errorf("bench: %s store: the key authenticated tenant %q, want %q", s.name, p.Tenant.ID, tenantID)
	}
	t0 := time.Now()
	l, err := s.store.Acquire(ctx, p.Tenant.ID, tenant.AcquireRequest{Model: modelName, Tokens: requestPromptTokens + requestMaxTokens})
	if err != nil {
		return 0, 0, fmt.Errorf("bench: %s store: Acquire: %w", s.name, err)
	}
	t1 := time.Now()
	if info := l.Info(); info.TenantID != tenantID || info.HeldTokens != requestPromptTokens+requestMaxTokens || info.Degraded {
		return 0, 0, fmt.Errorf("bench: %s store: lease %+v does not hold the request", s.name, info)
	}
	if err := l.Release(ctx, tenant.Consumed{PromptTokens: requestPromptTokens, CompletionTokens: requestMaxTokens}); err != nil {
		return 0, 0, fmt.Errorf("bench: %s store: Release: %w", s.name, err)
	}
	return t1.Sub(t0), time.Since(t1), nil
}

// request is one gateway request's tenant work: cached auth, Acquire,
// Release.
func (s *benchStore) request(ctx context.Context) error {
	p, err := s.cache.Authenticate(ctx, s.key)
	if err != nil {
		return fmt.Errorf("bench: %s store: Authenticate: %w", s.name, err)
	}
	_, _, err = s.admit(ctx, p)
	return err
}

// timed runs one request with each operation timed, authenticating both
// ways.
func (s *benchStore) timed(ctx context.Context) (d [numOps]time.Duration, err error) {
	t0 := time.Now()
	if _, err := s.store.Authenticate(ctx, s.key); err != nil {
		return d, fmt.Errorf("bench: %s store: Authenticate: %w", s.name, err)
	}
	t1 := time.Now()
	p, err := s.cache.Authenticate(ctx, s.key)
	if err != nil {
		return d, fmt.Errorf("bench: %s store: Authenticate: %w", s.name, err)
	}
	d[OpAuthStore], d[OpAuthCached] = t1.Sub(t0), time.Since(t1)
	if d[OpAcquire], d[OpRelease], err = s.admit(ctx, p); err != nil {
		return d, err
	}
	d[OpRequest] = d[OpAuthCached] + d[OpAcquire] + d[OpRelease]
	d[OpRequestStore] = d[OpAuthStore] + d[OpAcquire] + d[OpRelease]
	return d, nil
}

// WriteMarkdown writes the report as Markdown tables.
func (r *TenantsReport) WriteMarkdown(w io.Writer) error {
	p := &printer{w: w}
	o := r.Options
	p.f("Machine: %s.\n\n", r.Machine)
	if len(r.Stores) != 2 {
		return p.err
	}
	mem, red := r.Stores[0], r.Stores[1]
	p.f("Per operation, %d requests one at a time on each store (taking turns), every limit enabled and none binding:\n\n", o.Iterations)
	p.f("| operation | memory p50 | memory p99 | Redis p50 | Redis p99 | Redis / memory p50 | Redis / memory p99 |\n|---|---|---|---|---|---|---|\n")
	for k := range numOps {
		m, rd := mem.Ops[k], red.Ops[k]
		p.f("| %s | %s | %s | %s | %s | %s | %s |\n", Op(k), µs(m.P50), µs(m.P99), µs(rd.P50), µs(rd.P99), ratio(rd.P50, m.P50), ratio(rd.P99, m.P99))
	}
	p.f("\nRequests/s of the tenant work alone (cached auth + Acquire + Release), %s per store and concurrency:\n\n", o.Duration)
	p.f("| concurrency | memory | Redis | Redis / memory | Redis p50 | Redis p99 |\n|---|---|---|---|---|---|\n")
	for i, conc := range o.Concurrency {
		m, rd := mem.Runs[i], red.Runs[i]
		p.f("| %d | %.0f | %.0f | %s | %s | %s |\n", conc, m.RPS(), rd.RPS(), ratioF(rd.RPS(), m.RPS()), µs(rd.Latency.P50), µs(rd.Latency.P99))
	}
	return p.err
}

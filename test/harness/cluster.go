package harness

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/internal/redistest"
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
	// RedisCluster, with Redis set, keeps tenants in a private
	// three-master Redis Cluster started for this cluster
	// (redistest.StartCluster); the gateways connect with
	// tenants.redis.cluster.
	RedisCluster bool

	// redisPrefix is the key prefix of a cluster with RedisCluster set
	// (chosen before the gateways' seed node); empty for a random one.
	redisPrefix string
	// HeartbeatTimeout is the gateways' (default DefaultHeartbeatTimeout).
	HeartbeatTimeout time.Duration
	// EditGateway, if set, changes each gateway's config (index i) before
	// it is written.
	EditGateway func(i int, cfg *config.Config)
}

// DefaultModels lists ModelTiny and ModelEndless with DefaultContext
// (Options.Models keeps those the workers serve).
func DefaultModels() []config.Model {
	return []config.Model{
		{Name: ModelTiny, ContextLength: DefaultContext, ContextPolicy: config.ContextClamp},
		{Name: ModelEndless, ContextLength: DefaultContext, ContextPolicy: config.ContextClamp},
	}
}

// servedModels keeps the models of ms that one of workers serves (a
// spec without a model serves ModelTiny): a
// gateway configured with a model no worker serves never becomes ready
// (its /readyz waits for every configured model).
func servedModels(ms []config.Model, workers []WorkerSpec) []config.Model {
	var out []config.Model
	for _, m := range ms {
		for _, w := range workers {
			if w.Model == m.Name || w.Model == "" && m.Name == ModelTiny {
				out = append(out, m)
				break
			}
		}
	}
	return out
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
	if o.Redis && o.RedisCluster {
		// The gateways are seeded with a master that does not hold the
		// prefix's slot: they reach their keys only by following the
		// cluster's redirections.
		o.redisPrefix = fmt.Sprintf("warden:{e2e-%s}:", randomHex(6))
		o.RedisAddr = redistest.StartCluster(t).NodeNotHolding(t, o.redisPrefix+"x")
	}
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
		o.Models = servedModels(DefaultModels(), o.Workers)
	}
	if o.HeartbeatTimeout <= 0 {
		o.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	c := &Cluster{env: env, Dir: t.TempDir(), AdminToken: randomHex(16)}
	t.Cleanup(func() { // after Close: nothing writes the keys any more
		if o.Redis && !o.RedisCluster && len(c.Gateways) > 0 { // a private cluster goes with the test
			deleteKeys(o.RedisAddr, c.Gateways[0].Config.Tenants.Redis.KeyPrefix)
		}
	})
	t.Cleanup(c.Close)
	t.Cleanup(func() { c.checkErrorBodies(t) })
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

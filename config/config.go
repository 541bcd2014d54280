// Package config is warden's configuration: the schema, the embedded
// defaults, WARDEN_* environment overrides and validation.
//
// One YAML file configures a gateway, a worker or `warden up`; each process
// reads the sections it needs. A configuration is built in layers, later
// layers winning:
//
//  1. the embedded defaults (defaults.yaml in this package, see Default);
//  2. the user's YAML file (Load, LoadBytes): only the keys it names
//     change; lists (models, worker.gateways) replace the default list
//     as a whole; unknown keys are an error naming the key;
//  3. environment variables WARDEN_<SECTION>_<FIELD> for scalar fields
//     (ApplyEnv; the naming rule is documented there).
//
// Validate reports every problem at once, each naming the field path and
// the reason. Durations are Go duration strings ("30s", "10m"); byte sizes
// are ByteSize values ("512MiB", "2GB" or a plain integer of bytes).
//
// The field reference lives on the types below and, as tables, in
// config/README.md.
package config

import "time"

// Config is the whole configuration of one warden process.
type Config struct {
	// Gateway configures the gateway: the OpenAI-compatible API, the admin
	// API and the worker registry.
	Gateway Gateway `yaml:"gateway"`
	// Cluster configures how gateways and workers authenticate each other
	// (invariant I10).
	Cluster Cluster `yaml:"cluster"`
	// Tenants configures the tenant store and API-key authentication.
	Tenants Tenants `yaml:"tenants"`
	// Models lists the served models and their serving policy. At least
	// one model is required; names must be unique.
	Models []Model `yaml:"models"`
	// Worker configures a worker process (and the workers `warden up`
	// starts).
	Worker Worker `yaml:"worker"`
	// Observability configures logs, metrics and traces.
	Observability Observability `yaml:"observability"`
}

// GrammarCache bounds a cache of compiled structured-output grammars,
// least recently used first out.
type GrammarCache struct {
	// Entries is the most grammars kept. Default 256.
	Entries int `yaml:"entries"`
	// MaxBytes is the most memory they may hold together (an estimate
	// of their automata). Default 64MiB.
	MaxBytes ByteSize `yaml:"max_bytes"`
}

// Gateway configures the gateway process.
type Gateway struct {
	// Listen is the host:port of the OpenAI-compatible HTTPS API.
	// Default "127.0.0.1:8443".
	Listen string `yaml:"listen"`
	// AdminListen is the host:port of the admin HTTPS API, which requires
	// the admin token. Default "127.0.0.1:8444".
	AdminListen string `yaml:"admin_listen"`
	// RegistryListen is the host:port of the gRPC registry where workers
	// register and heartbeat (cluster auth, see Cluster).
	// Default "127.0.0.1:8445".
	RegistryListen string `yaml:"registry_listen"`
	// TLS holds the certificate of the API and admin listeners.
	TLS ServerTLS `yaml:"tls"`
	// AdminTokenFile is a file holding the admin API bearer token
	// (surrounding whitespace is ignored). A standalone gateway needs it
	// or AdminToken.
	AdminTokenFile string `yaml:"admin_token_file" warden:"path"`
	// AdminToken is the admin token inline. Discouraged: prefer
	// AdminTokenFile, or the WARDEN_GATEWAY_ADMIN_TOKEN variable. Setting
	// both is an error. Render redacts it.
	AdminToken string `yaml:"admin_token"`
	// MaxBodyBytes caps a request body; larger bodies get HTTP 413.
	// Default 4MiB.
	MaxBodyBytes ByteSize `yaml:"max_body_bytes"`
	// MaxN is the largest n (choices per request) accepted; above it a
	// request gets 400 naming n. The choices share one prefill and run
	// as n sequences of one worker, so keep it <= worker.max_batch.
	// Default 8.
	MaxN int `yaml:"max_n"`
	// GrammarCache bounds the compiled structured-output constraints
	// (response_format, guided_*, text.format, forced or strict tool
	// calls) the gateway keeps, so a schema sent again is not compiled
	// again.
	GrammarCache GrammarCache `yaml:"grammar_cache"`
	// RequestTimeout bounds a request from arrival to its last byte; the
	// request is aborted everywhere when it passes. Default 10m.
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// HeartbeatTimeout is how long a worker may stay silent before the
	// gateway declares it lost and aborts its requests. Default 6s.
	HeartbeatTimeout time.Duration `yaml:"heartbeat_timeout"`
	// DrainTimeout is how long a stopping gateway (SIGTERM, Ctrl-C) lets
	// the requests in flight finish: it turns unready at once, answers new
	// requests 503 with retry-after, and aborts what still runs when the
	// timeout passes (or at a second signal). 0 aborts at once. Default
	// 30s; keep Kubernetes' terminationGracePeriodSeconds above it.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// ShutdownDelay is how long a stopping gateway keeps serving after
	// SIGTERM (Ctrl-C) before it drains: /readyz answers 503 at once so
	// that load balancers take it out of rotation, while requests are
	// still admitted, every response carrying Connection: close (a GOAWAY
	// on HTTP/2) so that no client reuses a connection about to close.
	// Set it to the load balancer's health-check interval times its fall
	// count (the Kubernetes preStop pattern); 0 drains at once (no load
	// balancer, or a preStop hook that waits instead). A second signal
	// cuts it short. Default 5s.
	ShutdownDelay time.Duration `yaml:"shutdown_delay"`
	// Queue bounds the admission queue used when workers are busy.
	Queue Queue `yaml:"queue"`
	// TrustClientRequestID, when true, records a client's X-Request-ID as
	// client_request_id in logs, traces and the admin API. The gateway
	// always assigns its own request ID (I6); when false the client's
	// header is ignored. Default false.
	TrustClientRequestID bool `yaml:"trust_client_request_id"`
	// CORSOrigins lists the browser origins (scheme://host[:port]) allowed
	// to call the public API cross-origin; "*" allows any. Empty, the
	// default, sends no CORS headers, so browsers refuse cross-origin calls.
	CORSOrigins []string `yaml:"cors_origins"`
	// Routing chooses how requests are placed on workers: cache_aware
	// (default) scores workers by the prompt pages they report holding in
	// the request's cache domain, their load and free pages; round_robin
	// takes the workers in turn (a baseline for benchmarks).
	Routing Routing `yaml:"routing"`
	// Responses configures the Responses API's stored responses.
	Responses StoredResponses `yaml:"responses"`
	// Adapters configures the LoRA adapter registry.
	Adapters AdapterRegistry `yaml:"adapters"`
}

// MaxAdapterBytes is the most gateway.adapters.max_bytes may be.
const MaxAdapterBytes = 4 << 30

// AdapterRegistry configures the registry of LoRA adapters (admin API
// /admin/v1/adapters, gateway/internal/adapters).
type AdapterRegistry struct {
	// MaxBytes bounds one adapter's files (adapter_config.json plus
	// adapter_model.safetensors) as uploaded. Default 256MiB; at most
	// 4GiB.
	MaxBytes ByteSize `yaml:"max_bytes"`
}

// StoredResponses bounds the stored responses of the Responses API
// (previous_response_id, GET and DELETE /v1/responses/{id}). They live in
// the tenant store's backend — Redis, shared by the replicas, or memory —
// sealed with a key derived from tenants.key_secret_file (random per
// process without one) and the tenant's incarnation.
type StoredResponses struct {
	// StoreByDefault stores a response whose request did not send
	// "store" (OpenAI's default); "store": false always opts out.
	// Default true.
	StoreByDefault bool `yaml:"store_by_default"`
	// TTL is how long a stored response lives. Default 168h.
	TTL time.Duration `yaml:"ttl"`
	// MaxTenantBytes bounds one tenant's stored responses together;
	// storing past it evicts that tenant's oldest. Default 64MiB.
	MaxTenantBytes ByteSize `yaml:"max_tenant_bytes"`
}

// Routing is a placement policy (Gateway.Routing).
type Routing string

// Routing policies.
const (
	RoutingCacheAware Routing = "cache_aware"
	RoutingRoundRobin Routing = "round_robin"
)

// ServerTLS is the certificate a public listener presents.
type ServerTLS struct {
	// CertFile is a PEM certificate chain. Set it together with KeyFile.
	CertFile string `yaml:"cert_file" warden:"path"`
	// KeyFile is the PEM private key of CertFile.
	KeyFile string `yaml:"key_file" warden:"path"`
	// Plaintext serves plain HTTP. Only an explicit true does this; it is
	// meant for a gateway behind a TLS-terminating proxy. Default false.
	Plaintext bool `yaml:"plaintext"`
}

// Queue bounds the admission queue.
type Queue struct {
	// MaxWaiting is how many admitted requests may wait for capacity;
	// beyond it requests get 429. 0 disables waiting. Default 256.
	MaxWaiting int `yaml:"max_waiting"`
	// MaxWait is how long a request may wait before it gets 429.
	// Default 30s.
	MaxWait time.Duration `yaml:"max_wait"`
}

// ClusterAuth names how gateways and workers authenticate each other.
type ClusterAuth string

// Cluster authentication modes.
const (
	// ClusterMTLS: both sides present certificates signed by CAFile; a
	// worker accepts only the gateway identity, the gateway only workers.
	ClusterMTLS ClusterAuth = "mtls"
	// ClusterSharedSecret: callers present the secret of
	// SharedSecretFile; the channel is still TLS (server certificates from
	// CertFile/KeyFile, verified against CAFile) unless InsecurePlaintext.
	ClusterSharedSecret ClusterAuth = "shared_secret"
)

// Cluster configures gateway<->worker authentication (invariant I10):
// worker control and transfer endpoints accept only authenticated peers.
type Cluster struct {
	// Auth is mtls (default) or shared_secret.
	Auth ClusterAuth `yaml:"auth"`
	// CAFile is the PEM CA that signs every cluster certificate.
	CAFile string `yaml:"ca_file" warden:"path"`
	// CertFile is this process's cluster certificate (PEM). With mtls it
	// must carry the URI SAN spiffe://warden/gateway or
	// spiffe://warden/worker (see internal/tlsutil).
	CertFile string `yaml:"cert_file" warden:"path"`
	// KeyFile is the PEM private key of CertFile.
	KeyFile string `yaml:"key_file" warden:"path"`
	// SharedSecretFile holds the cluster secret (auth shared_secret only;
	// at least 16 bytes after trimming whitespace).
	SharedSecretFile string `yaml:"shared_secret_file" warden:"path"`
	// InsecurePlaintext runs the cluster channels without TLS. Allowed only
	// with auth shared_secret, on a network you trust. Default false.
	InsecurePlaintext bool `yaml:"insecure_plaintext"`
}

// StoreKind names a tenant store implementation.
type StoreKind string

// Tenant stores.
const (
	// StoreMemory keeps tenants in the gateway's memory (lost on exit).
	StoreMemory StoreKind = "memory"
	// StoreRedis keeps tenants, keys, limits and usage in Redis.
	StoreRedis StoreKind = "redis"
)

// Tenants configures the tenant store and API-key authentication.
type Tenants struct {
	// Store is memory (default) or redis.
	Store StoreKind `yaml:"store"`
	// Redis is used when Store is redis.
	Redis Redis `yaml:"redis"`
	// KeySecretFile holds the HMAC secret under which API keys are
	// stored hashed. Required with the redis store (keys must verify
	// across restarts); with memory a random secret is used when empty.
	KeySecretFile string `yaml:"key_secret_file" warden:"path"`
	// AuthCacheTTL is how long the gateway caches a verified key and its
	// tenant's limits. 0 disables the cache. Default 1s.
	AuthCacheTTL time.Duration `yaml:"auth_cache_ttl"`
	// OutageGrace is how long cached authentications keep being honoured
	// while the store is unreachable. Default 30s.
	OutageGrace time.Duration `yaml:"outage_grace"`
	// FailOpen decides admission while the store is unreachable: false
	// (default) rejects requests with 503; true admits requests whose key
	// was verified within OutageGrace, without limit checks (their usage
	// is recorded if the store is back when they end). After OutageGrace
	// every request gets 503 either way.
	FailOpen bool `yaml:"fail_open"`
	// ShareInterval is how often each gateway reports its requests in
	// flight per tenant to the store and learns the other replicas', so
	// that its fair queue weighs tenants by their requests in flight across
	// every replica: the staleness of the other replicas' counts. 0
	// disables sharing (fairness per replica). Default 250ms.
	ShareInterval time.Duration `yaml:"share_interval"`
}

// Redis locates the Redis tenant store.
type Redis struct {
	// Addr is the host:port of Redis. Default "127.0.0.1:6379". Ignored
	// when Addrs or Sentinel is set.
	Addr string `yaml:"addr"`
	// Addrs are the seed nodes of a Redis Cluster (Cluster true): the
	// client asks any of them for the slot map, so list every node you
	// know, and it keeps working while any one of them is up. Empty: Addr
	// is the only seed.
	Addrs []string `yaml:"addrs"`
	// Username is the Redis ACL user; empty for the default user.
	Username string `yaml:"username"`
	// PasswordFile holds the Redis password; empty for none.
	PasswordFile string `yaml:"password_file" warden:"path"`
	// DB is the Redis database number. Default 0.
	DB int `yaml:"db"`
	// TLS connects to Redis over TLS (system roots). Default false.
	TLS bool `yaml:"tls"`
	// KeyPrefix prefixes every Redis key, so several warden deployments
	// can share one Redis. Default "warden:". With Cluster it must
	// contain a hash tag, e.g. "warden:{prod}:".
	KeyPrefix string `yaml:"key_prefix"`
	// Cluster connects to a Redis Cluster seeded by Addrs (or Addr): the
	// client discovers the other nodes, follows MOVED and ASK, and reloads
	// the slot map on connection errors and every second, so it routes to
	// a promoted replica as soon as the cluster has failed over. Default
	// false.
	Cluster bool `yaml:"cluster"`
	// Sentinel connects through Redis Sentinel to the master it names, and
	// follows its failovers. Not with Cluster.
	Sentinel Sentinel `yaml:"sentinel"`
}

// Sentinel locates a Redis master through Redis Sentinel.
type Sentinel struct {
	// MasterName is the name the sentinels monitor the master under;
	// setting it turns Sentinel on.
	MasterName string `yaml:"master_name"`
	// Addrs are the sentinels' host:port; any one of them answering is
	// enough.
	Addrs []string `yaml:"addrs"`
	// PasswordFile holds the sentinels' own password (requirepass of the
	// sentinels, not of Redis); empty for none.
	PasswordFile string `yaml:"password_file" warden:"path"`
}

// Enabled reports whether the store is reached through Sentinel.
func (s *Sentinel) Enabled() bool { return s.MasterName != "" || len(s.Addrs) > 0 }

// Seeds returns the addresses a client dials first: Addrs, or Addr alone.
func (r *Redis) Seeds() []string {
	if len(r.Addrs) > 0 {
		return r.Addrs
	}
	return []string{r.Addr}
}

// ContextPolicy decides what happens when a model's configured context is
// larger than the KV pool of a worker that serves it (invariant I2).
type ContextPolicy string

// Context policies.
const (
	// ContextClamp advertises and enforces the smaller window, warns and
	// exports a metric.
	ContextClamp ContextPolicy = "clamp"
	// ContextRefuse does not serve the model (503) until they agree.
	ContextRefuse ContextPolicy = "refuse"
)

// Model is the serving policy of one model.
type Model struct {
	// Name is the model name clients send ("model" in requests) and
	// workers serve. Letters, digits and . _ - : / only, at most 128.
	Name string `yaml:"name"`
	// ContextLength is the configured (advertised) context window in
	// tokens: prompt plus output. The effective window is the smaller of
	// this and every serving worker's KV pool (I2). Must be > 0.
	ContextLength int `yaml:"context_length"`
	// ContextPolicy is clamp (default when omitted) or refuse.
	ContextPolicy ContextPolicy `yaml:"context_policy"`
	// MaxOutputTokens caps the output tokens of one request; 0 means no
	// cap beyond the context window. Must be < ContextLength.
	MaxOutputTokens int `yaml:"max_output_tokens"`
	// ReasoningParser is how the model's reasoning is told apart from
	// its answer in chat output: qwen3, deepseek_r1 or none; "" or auto
	// detects it from the chat template (see internal/reasoning).
	ReasoningParser string `yaml:"reasoning_parser"`
	// Pooling is how /v1/embeddings pools the model's final hidden
	// states: last (the last position's; "" means last, vLLM's default for
	// a decoder-only model served for embeddings) or mean.
	Pooling Pooling `yaml:"pooling"`
	// Aliases are other names clients may use for the model (a stable
	// "default", say). The admin API may add, repoint or override them
	// (gateway/internal/aliases). Each follows the rules of Name and
	// differs from every model's name and every other alias.
	Aliases []string `yaml:"aliases"`
}

// Pooling is a model's embedding pooling (Model.Pooling).
type Pooling string

// Poolings.
const (
	PoolingLast Pooling = "last"
	PoolingMean Pooling = "mean"
)

// Role is what a worker does.
type Role string

// Worker roles.
const (
	// RoleBoth prefills and decodes (no KV transfer).
	RoleBoth Role = "both"
	// RolePrefill computes prompt KV and pushes it to a decode worker.
	RolePrefill Role = "prefill"
	// RoleDecode receives prompt KV and generates tokens.
	RoleDecode Role = "decode"
)

// Backend is the compute backend of a worker.
type Backend string

// Compute backends.
const (
	// BackendCPU is the pure-Go backend (always available).
	BackendCPU Backend = "cpu"
	// BackendCUDA needs a binary built with -tags cuda and an NVIDIA GPU.
	BackendCUDA Backend = "cuda"
)

// WeightFormat is how the cpu backend holds a model's projection
// weights in memory.
type WeightFormat string

// Weight formats.
const (
	// WeightsFile keeps the file's element type (f32, f16 or bf16); 16-bit
	// weights are widened inside the kernels, giving the same results as
	// float32.
	WeightsFile WeightFormat = "file"
	// WeightsQ8 quantizes the projections and the LM head at load into
	// 32-weight int8 blocks with a float32 scale (about 1.1 bytes a
	// weight); the cpu backend quantizes activations the same way per
	// block, the cuda backend keeps them float32.
	WeightsQ8 WeightFormat = "q8"
)

// DType is the element type a worker computes with, converted at load
// when it differs from the checkpoint's (as vLLM's --dtype).
type DType string

// Weight dtypes.
const (
	// DTypeAuto keeps the checkpoint's element type (f32, f16 or bf16),
	// or q8 when worker.weights is q8.
	DTypeAuto DType = "auto"
	// DTypeF32, DTypeF16 and DTypeBF16 convert the matrices at load (one
	// round to nearest even; a weight beyond f16's ±65504 refuses to
	// load). A bf16 checkpoint served as f16 keeps 2 bytes a weight and
	// runs the f16 kernels; as f32 it takes twice the memory.
	DTypeF32  DType = "f32"
	DTypeF16  DType = "f16"
	DTypeBF16 DType = "bf16"
	// DTypeQ8 quantizes the projections and the LM head at load, as
	// worker.weights q8 does.
	DTypeQ8 DType = "q8"
)

// WeightsDType resolves worker.dtype and worker.weights into the one
// element type to compute with: q8 when either says q8, else DType.
func (w *Worker) WeightsDType() DType {
	if w.Weights == WeightsQ8 {
		return DTypeQ8
	}
	return w.DType
}

// Worker configures a worker process.
type Worker struct {
	// ID names the worker in the registry, logs and metrics. Empty means
	// "<hostname>-<role>-<listen port>" (see ResolvedID).
	ID string `yaml:"id"`
	// Role is both (default), prefill or decode.
	Role Role `yaml:"role"`
	// Model is the served model's name; ValidateWorker requires it to be
	// listed in Models. Default "tiny".
	Model string `yaml:"model"`
	// ModelDir is a Hugging Face layout directory (config.json,
	// model.safetensors, tokenizer.json), or a GGUF model: a .gguf file,
	// or a directory without config.json holding exactly one .gguf file
	// (llama architecture; docs/models.md#gguf-files). Required for a
	// standalone worker; `warden up` generates a dev model when empty.
	ModelDir string `yaml:"model_dir" warden:"path"`
	// Backend is cpu (default) or cuda.
	Backend Backend `yaml:"backend"`
	// Weights is file (default: the file's element type) or q8; q8 is
	// the same as DType q8.
	Weights WeightFormat `yaml:"weights"`
	// DType is the element type to compute with: auto (default: the
	// checkpoint's), f32, f16, bf16 (converted at load, cpu backend) or
	// q8. See WeightsDType.
	DType DType `yaml:"dtype"`
	// Numerics is how bf16 weights are multiplied: exact (default) or
	// bf16 (cpu backend). See NumericsBF16.
	Numerics Numerics `yaml:"numerics"`
	// Threads is the number of compute threads; 0 uses every core.
	Threads int `yaml:"threads"`
	// ComputeSpin is how long an idle compute thread spins for the next
	// piece of a step before it blocks (cpu backend). Steps run their
	// loops tens to hundreds of microseconds apart, and a thread woken
	// from blocking often runs late, after its waker on the same CPU;
	// a shorter spin leaves more CPU to other processes on an
	// oversubscribed host at that cost. Default 2ms.
	ComputeSpin time.Duration `yaml:"compute_spin"`
	// Listen is the host:port of the worker's gRPC control server
	// (cluster auth). Default "127.0.0.1:9001".
	Listen string `yaml:"listen"`
	// AdvertiseAddr is the host:port gateways dial to reach Listen. Empty
	// means Listen; required when Listen binds every interface.
	AdvertiseAddr string `yaml:"advertise_addr"`
	// Gateways are the registry addresses (gateway.registry_listen) this
	// worker registers with. At least one. From the environment, a
	// comma-separated list. Default ["127.0.0.1:8445"].
	Gateways []string `yaml:"gateways"`
	// HeartbeatInterval is how often the worker heartbeats to each
	// gateway; at most half of gateway.heartbeat_timeout. Default 2s.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// DrainTimeout is how long a stopping worker (SIGTERM, Ctrl-C) drains:
	// it tells every gateway at once (they place no new request on it),
	// lets the requests in flight finish, and stops when it is idle and
	// every gateway it reaches heard it, or when the timeout passes (the
	// rest are aborted), or at a second signal. 0 aborts at once. Default
	// 30s.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// KV sizes and hardens the paged KV pool.
	KV KV `yaml:"kv"`
	// PrefillChunkTokens is how many prompt tokens one prefill step
	// processes. Default 512.
	PrefillChunkTokens int `yaml:"prefill_chunk_tokens"`
	// PrefillChunkTokensDecoding bounds the prompt tokens of a step that
	// also decodes running sequences: each of them waits for the whole
	// step, so this bounds their inter-token latency while arriving
	// prompts are prefilled; such a step still takes a quarter of the
	// prompt tokens waiting, times the waiting sequences' share of the
	// batch, when that is more (up to PrefillChunkTokens), so a backlog
	// clears. PrefillChunkTokens applies to a step with nothing to decode.
	// Default 80.
	PrefillChunkTokensDecoding int `yaml:"prefill_chunk_tokens_decoding"`
	// PrefillOrder is which prompts get a step's prefill_chunk_tokens
	// first. Default shortest_first.
	PrefillOrder PrefillOrder `yaml:"prefill_order"`
	// MaxBatch is the most sequences in one batched step. Default 32.
	MaxBatch int `yaml:"max_batch"`
	// Speculative configures exact speculative decoding without a draft
	// model (n-gram prompt lookup).
	Speculative Speculative `yaml:"speculative"`
	// Transfer configures the KV data plane between prefill and decode.
	Transfer Transfer `yaml:"transfer"`
	// Adapters sizes the worker's LoRA adapter memory.
	Adapters AdapterMemory `yaml:"adapters"`
}

// AdapterMemory sizes a worker's LoRA adapter memory (worker/adapters).
type AdapterMemory struct {
	// Memory is the budget of the adapters held at once, in their
	// compute form (float32 A and B matrices); least recently used
	// adapters no request runs under are evicted for new ones. 0 disables
	// adapters: requests naming one are refused. Default 256MiB.
	Memory ByteSize `yaml:"memory"`
}

// KV sizes and hardens a worker's paged KV pool.
type KV struct {
	// PageTokens is the number of token slots per page (1..4096).
	// Default 16.
	PageTokens int `yaml:"page_tokens"`
	// MemoryBytes is the pool budget. 0 means MemoryFraction of the
	// memory available after loading the weights. Default 0.
	MemoryBytes ByteSize `yaml:"memory_bytes"`
	// MemoryFraction is used when MemoryBytes is 0; in (0, 1].
	// Default 0.5.
	MemoryFraction float64 `yaml:"memory_fraction"`
	// MemoryHeadroom is what a worker under a cgroup memory limit (a
	// container's) leaves unplanned for its own working memory (Go heap,
	// compute scratch, tokenizer, connections) when MemoryBytes is 0: the
	// pool is MemoryFraction of min(host MemAvailable, cgroup limit −
	// cgroup usage − MemoryHeadroom) less the weights. Without a cgroup
	// limit it is not used. Default 256MiB.
	MemoryHeadroom ByteSize `yaml:"memory_headroom"`
	// ZeroOnRelease zeroes pages when they are freed (I9). Default false:
	// owner tags already make unwritten slots unreadable.
	ZeroOnRelease bool `yaml:"zero_on_release"`
	// PoisonOnReserve fills pages with a poison pattern when reserved, so
	// a read of an unwritten slot shows in the output. Test mode.
	PoisonOnReserve bool `yaml:"poison_on_reserve"`
	// PrefixCache keeps the full prompt pages of finished prefills as
	// sealed pages that later requests of the same cache domain reuse
	// (DESIGN I3). Default true, with either backend.
	PrefixCache bool `yaml:"prefix_cache"`
}

// Speculative configures n-gram (prompt lookup) speculative decoding: a
// decoding sequence proposes the tokens that followed the latest earlier
// occurrence of its last tokens in its own prompt and output, and one
// forward verifies them. Outputs are identical with it on or off.
type Speculative struct {
	// Method is off or ngram: the default for requests that do not set
	// "speculative". Default off.
	Method SpeculativeMethod `yaml:"method"`
	// K is the most tokens proposed per step, 1..32. Default 4.
	K int `yaml:"k"`
	// NgramMax and NgramMin bound the length of the suffix looked up,
	// longest first, 1 <= ngram_min <= ngram_max <= 16. Default 3 and 2.
	NgramMax int `yaml:"ngram_max"`
	NgramMin int `yaml:"ngram_min"`
}

// Numerics names how the cpu backend multiplies bf16 weights.
type Numerics string

// Numerics modes.
const (
	// NumericsExact widens bf16 (and f16) weights to float32 inside the
	// kernels: every product equals the float32 one bit for bit.
	NumericsExact Numerics = "exact"
	// NumericsBF16 multiplies bf16 weights with activations rounded to
	// bf16, two products per 32-bit lane (AVX512-BF16 VDPBF16PS, as
	// llama.cpp's bf16 path): faster prefill, not exact. Outputs stay
	// independent of batch, chunk and thread count.
	NumericsBF16 Numerics = "bf16"
)

// PrefillOrder names how the engine shares a step's prompt tokens.
type PrefillOrder string

// Prefill orders.
const (
	// PrefillShortestFirst: the prompt with the fewest positions left to
	// compute per tenant weight first (admission order among equals, and
	// one step in four), so a short prompt behind a long one starts at
	// once and a prompt under way finishes before an equal new one.
	PrefillShortestFirst PrefillOrder = "shortest_first"
	// PrefillArrival: admission order (first come, first served).
	PrefillArrival PrefillOrder = "arrival"
)

// SpeculativeMethod names a speculative decoding method.
type SpeculativeMethod string

// Speculative decoding methods.
const (
	// SpeculativeOff: requests decode one token per step unless they ask
	// for speculation ("speculative": true uses ngram).
	SpeculativeOff SpeculativeMethod = "off"
	// SpeculativeNgram: n-gram prompt lookup, on by default.
	SpeculativeNgram SpeculativeMethod = "ngram"
)

// TransferBackend names a KV transfer implementation.
type TransferBackend string

// Transfer backends.
const (
	// TransferTCP: the receiver writes pages it receives over TCP (fenced).
	TransferTCP TransferBackend = "tcp"
	// TransferSHM: the sender writes into the receiver's shared memory
	// (one-sided, like RDMA); same host only.
	TransferSHM TransferBackend = "shm"
)

// Transfer configures the KV data plane of a worker.
type Transfer struct {
	// Backend is tcp (default) or shm.
	Backend TransferBackend `yaml:"backend"`
	// Listen is the host:port where a decode worker accepts transfers.
	// Default "127.0.0.1:9101".
	Listen string `yaml:"listen"`
	// AdvertiseAddr is the host:port prefill workers dial to reach
	// Listen. Empty means the host of worker.advertise_addr (or of Listen)
	// with the port of Listen.
	AdvertiseAddr string `yaml:"advertise_addr"`
	// SHMDir is where shm pools are created. Default "/dev/shm".
	SHMDir string `yaml:"shm_dir" warden:"path"`
	// DrainTimeout is how long aborted pages wait for every one-sided
	// writer to acknowledge its drain before they are quarantined (I5).
	// Default 5s.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// ReclaimQuarantine (decode, shm): every DrainTimeout, release
	// (zeroed) the pages quarantined for writers that never acknowledged
	// their drain once no process has the segment mapped as a writer (the
	// lock every prefill holds while it has the segment mapped is free).
	// Default false: prefill workers of a version without that lock make
	// it unprovable, so turn it on once every prefill on the host has it.
	ReclaimQuarantine bool `yaml:"reclaim_quarantine"`
	// ReserveTimeout is the lease of a decode reservation: the gateway
	// renews it (every third of it) while the request lives and decode is
	// not yet ready, however slow the prefill; pages of a reservation not
	// renewed this long before decoding started are fenced and released,
	// so a lost gateway can never leak pages. Default 30s.
	ReserveTimeout time.Duration `yaml:"reserve_timeout"`
	// ReserveTimeoutMax is the ceiling of a reservation's first lease,
	// before any renewal, when the gateway asks for more than
	// ReserveTimeout because the prompt is long and prefill is slow (its
	// measured rate × the prompt's tokens). Default 10m.
	ReserveTimeoutMax time.Duration `yaml:"reserve_timeout_max"`
}

// Observability configures logs, metrics and traces.
type Observability struct {
	// LogLevel is debug, info (default), warn or error (as parsed by
	// slog.Level.UnmarshalText, so "warn+2" also works).
	LogLevel string `yaml:"log_level"`
	// LogFormat is json (default) or text.
	LogFormat LogFormat `yaml:"log_format"`
	// Metrics configures Prometheus metrics.
	Metrics Metrics `yaml:"metrics"`
	// Tracing configures OpenTelemetry tracing.
	Tracing Tracing `yaml:"tracing"`
}

// LogFormat is the log line encoding.
type LogFormat string

// Log formats.
const (
	// LogJSON writes one JSON object per line.
	LogJSON LogFormat = "json"
	// LogText writes key=value lines.
	LogText LogFormat = "text"
)

// Metrics configures Prometheus metrics.
type Metrics struct {
	// Listen is an optional plain-HTTP (ops) listener serving /metrics,
	// for workers (which have no HTTP API) or the gateway's scrape port;
	// bind it to a private interface (the gateway's metrics name
	// tenants). Empty: the gateway serves /metrics only on its admin
	// listener, behind the admin token; never on the public API listener.
	Listen string `yaml:"listen"`
	// TenantLabelCap bounds the distinct tenant label values per metric;
	// further tenants are counted under tenant="other". 0 drops the
	// tenant label. Default 100.
	TenantLabelCap int `yaml:"tenant_label_cap"`
}

// Exporter names where spans go.
type Exporter string

// Trace exporters.
const (
	// ExporterNone records nothing.
	ExporterNone Exporter = "none"
	// ExporterStdout writes spans as JSON to standard output.
	ExporterStdout Exporter = "stdout"
	// ExporterOTLP sends spans with OTLP over HTTP (protobuf).
	ExporterOTLP Exporter = "otlp"
)

// IncomingTrace decides what the gateway does with a client's
// traceparent header.
type IncomingTrace string

// Incoming trace policies.
const (
	// IncomingFollow continues the client's trace (spans become children).
	IncomingFollow IncomingTrace = "follow"
	// IncomingLink starts a new trace that links to the client's span.
	IncomingLink IncomingTrace = "link"
	// IncomingIgnore starts a new trace and drops the client's context.
	IncomingIgnore IncomingTrace = "ignore"
)

// Tracing configures OpenTelemetry tracing.
type Tracing struct {
	// Exporter is none (default), stdout or otlp.
	Exporter Exporter `yaml:"exporter"`
	// Endpoint is the OTLP/HTTP collector: a URL
	// ("https://collector:4318", path defaults to /v1/traces) or a
	// host:port (HTTPS unless Insecure). Required for otlp.
	Endpoint string `yaml:"endpoint"`
	// Insecure sends OTLP over plain HTTP when Endpoint is a host:port.
	// A URL's scheme decides by itself. Default false.
	Insecure bool `yaml:"insecure"`
	// Headers are sent with every OTLP export (e.g. an auth header).
	// Render redacts the values. Not settable from the environment (the
	// exporter also honours OTEL_EXPORTER_OTLP_HEADERS).
	Headers map[string]string `yaml:"headers"`
	// SampleRatio is the fraction of new traces recorded, in [0, 1];
	// sampled parents are always followed. Default 1.0.
	SampleRatio float64 `yaml:"sample_ratio"`
	// Incoming is follow (default), link or ignore.
	Incoming IncomingTrace `yaml:"incoming"`
}

package config

import (
	"reflect"
	"testing"
	"time"
)

// TestValidationRules breaks one rule at a time and checks the exact
// message, so each rule names its field and reason.
func TestValidationRules(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(c *Config)
		want   []string
	}{
		{"listen not host:port", func(c *Config) { c.Gateway.Listen = "8443" },
			[]string{`gateway.listen: must be host:port (got "8443")`}},
		{"port out of range", func(c *Config) { c.Gateway.AdminListen = "127.0.0.1:70000" },
			[]string{`gateway.admin_listen: port must be a number in 0..65535 (got "127.0.0.1:70000")`}},
		{"listeners collide", func(c *Config) { c.Gateway.RegistryListen = c.Gateway.Listen },
			[]string{`gateway.registry_listen: must differ from gateway.listen (both "127.0.0.1:8443")`}},
		{"shutdown delay", func(c *Config) { c.Gateway.ShutdownDelay = -time.Second },
			[]string{`gateway.shutdown_delay: must be >= 0 (got -1s)`}},
		{"port 0 may repeat", func(c *Config) { c.Gateway.Listen, c.Gateway.AdminListen = ":0", ":0" }, nil},
		{"tls key without cert", func(c *Config) { c.Gateway.TLS.KeyFile = "k.pem" },
			[]string{`gateway.tls.cert_file: required when gateway.tls.key_file is set`}},
		{"plaintext with cert", func(c *Config) {
			c.Gateway.TLS = ServerTLS{CertFile: "c", KeyFile: "k", Plaintext: true}
		}, []string{`gateway.tls.plaintext: is true but gateway.tls.cert_file is set; choose one`}},
		{"two admin tokens", func(c *Config) { c.Gateway.AdminToken, c.Gateway.AdminTokenFile = "t", "f" },
			[]string{`gateway.admin_token: set either admin_token or admin_token_file, not both`}},
		{"body limit", func(c *Config) { c.Gateway.MaxBodyBytes = 0 },
			[]string{`gateway.max_body_bytes: must be > 0 (got 0)`}},
		{"request timeout", func(c *Config) { c.Gateway.RequestTimeout = -time.Second },
			[]string{`gateway.request_timeout: must be > 0 (got -1s)`}},
		{"heartbeat timeout", func(c *Config) { c.Gateway.HeartbeatTimeout = 0 },
			[]string{`gateway.heartbeat_timeout: must be > 0 (got 0s)`}},
		{"queue size", func(c *Config) { c.Gateway.Queue.MaxWaiting = -1 },
			[]string{`gateway.queue.max_waiting: must be >= 0 (got -1)`}},
		{"queue wait", func(c *Config) { c.Gateway.Queue.MaxWait = 0 },
			[]string{`gateway.queue.max_wait: must be > 0 (got 0s)`}},
		{"no queue, no wait", func(c *Config) { c.Gateway.Queue = Queue{} }, nil},
		{"cors origins", func(c *Config) {
			c.Gateway.CORSOrigins = []string{"*", "https://app.example.com", "http://localhost:3000/", "app.example.com", "https://x.example/path"}
		}, []string{
			`gateway.cors_origins[3]: must be "*" or an origin such as https://app.example.com (got "app.example.com")`,
			`gateway.cors_origins[4]: must be "*" or an origin such as https://app.example.com (got "https://x.example/path")`,
		}},

		{"cluster auth", func(c *Config) { c.Cluster.Auth = "kerberos" },
			[]string{`cluster.auth: must be one of mtls, shared_secret (got "kerberos")`}},
		{"cluster files together", func(c *Config) { c.Cluster.CAFile = "ca.pem" },
			[]string{
				`cluster.cert_file: required when cluster.ca_file is set`,
				`cluster.key_file: required when cluster.ca_file is set`,
			}},
		{"plaintext with mtls", func(c *Config) { c.Cluster.InsecurePlaintext = true },
			[]string{`cluster.insecure_plaintext: not allowed with cluster.auth mtls, which is TLS`}},
		{"secret with mtls", func(c *Config) { c.Cluster.SharedSecretFile = "s" },
			[]string{`cluster.shared_secret_file: only used with cluster.auth shared_secret`}},
		{"plaintext with TLS files", func(c *Config) {
			c.Cluster = Cluster{Auth: ClusterSharedSecret, CAFile: "a", CertFile: "b", KeyFile: "c", InsecurePlaintext: true}
		}, []string{`cluster.insecure_plaintext: is true but TLS files are set; choose one`}},

		{"store kind", func(c *Config) { c.Tenants.Store = "etcd" },
			[]string{`tenants.store: must be one of memory, redis (got "etcd")`}},
		{"redis needs addr and secret", func(c *Config) { c.Tenants.Store, c.Tenants.Redis.Addr = StoreRedis, "redis" },
			[]string{
				`tenants.redis.addr: must be host:port (got "redis")`,
				`tenants.key_secret_file: required with the redis store, so stored keys verify after a restart`,
			}},
		{"redis db", func(c *Config) { c.Tenants.Redis.DB = -2 },
			[]string{`tenants.redis.db: must be >= 0 (got -2)`}},
		{"redis cluster needs a hash tag and db 0", func(c *Config) {
			c.Tenants.Redis.Cluster, c.Tenants.Redis.DB, c.Tenants.Redis.KeyPrefix = true, 1, "warden:{}:"
		}, []string{
			`tenants.redis.db: must be 0 with tenants.redis.cluster (Redis Cluster has one database)`,
			`tenants.redis.key_prefix: must contain a hash tag such as {prod} with tenants.redis.cluster, so that the keys one script uses share a hash slot (got "warden:{}:")`,
		}},
		{"redis several seeds without cluster", func(c *Config) {
			c.Tenants.Store, c.Tenants.KeySecretFile, c.Tenants.Redis.Addrs = StoreRedis, "s", []string{"r1:6379", "r2", "r1:6379"}
		}, []string{
			`tenants.redis.addrs: several addresses need tenants.redis.cluster: true (or tenants.redis.sentinel for a master and its replicas); got 3`,
			`tenants.redis.addrs[1]: must be host:port (got "r2")`,
			`tenants.redis.addrs[2]: "r1:6379" is listed twice`,
		}},
		{"redis cluster seeds", func(c *Config) {
			c.Tenants.Store, c.Tenants.KeySecretFile, c.Tenants.Redis.Cluster = StoreRedis, "s", true
			c.Tenants.Redis.KeyPrefix, c.Tenants.Redis.Addr, c.Tenants.Redis.Addrs = "w:{p}:", "not an address", []string{"r1:6379", "r2:6379"}
		}, nil},
		{"redis sentinel", func(c *Config) {
			c.Tenants.Store, c.Tenants.KeySecretFile, c.Tenants.Redis.Cluster = StoreRedis, "s", true
			c.Tenants.Redis.KeyPrefix, c.Tenants.Redis.Addrs = "w:{p}:", []string{"r1:6379"}
			c.Tenants.Redis.Sentinel = Sentinel{Addrs: []string{"s1:26379", "s1"}}
		}, []string{
			`tenants.redis.sentinel: not with tenants.redis.cluster: a Redis Cluster fails over by itself; use one or the other`,
			`tenants.redis.addrs: not with tenants.redis.sentinel: the sentinels name the master; list the sentinels in tenants.redis.sentinel.addrs`,
			`tenants.redis.sentinel.master_name: required with tenants.redis.sentinel.addrs: the name the sentinels monitor the master under`,
			`tenants.redis.sentinel.addrs[1]: must be host:port (got "s1")`,
		}},
		{"redis sentinel without sentinels", func(c *Config) {
			c.Tenants.Store, c.Tenants.KeySecretFile, c.Tenants.Redis.Sentinel.MasterName = StoreRedis, "s", "mymaster"
		}, []string{`tenants.redis.sentinel.addrs: required with tenants.redis.sentinel.master_name: at least one sentinel's host:port`}},
		{"cache ttl", func(c *Config) { c.Tenants.AuthCacheTTL = -time.Millisecond },
			[]string{`tenants.auth_cache_ttl: must be >= 0 (got -1ms)`}},
		{"outage grace", func(c *Config) { c.Tenants.OutageGrace = -time.Second },
			[]string{`tenants.outage_grace: must be >= 0 (got -1s)`}},

		{"no models", func(c *Config) { c.Models = nil },
			[]string{`models: at least one model is required`}},
		{"context length", func(c *Config) { c.Models[0].ContextLength = -5 },
			[]string{`models[0].context_length: must be > 0 (got -5)`}},
		{"model name", func(c *Config) { c.Models[0].Name = "my model" },
			[]string{`models[0].name: must be 1-128 characters of letters, digits and . _ - : /, starting with a letter or digit (got "my model")`}},
		{"duplicate model", func(c *Config) { c.Models = append(c.Models, c.Models[0]) },
			[]string{`models[1].name: duplicate of models[0].name ("tiny")`}},
		{"context policy", func(c *Config) { c.Models[0].ContextPolicy = "truncate" },
			[]string{`models[0].context_policy: must be one of clamp, refuse (got "truncate")`}},
		{"output cap negative", func(c *Config) { c.Models[0].MaxOutputTokens = -1 },
			[]string{`models[0].max_output_tokens: must be >= 0 (got -1)`}},
		{"output cap leaves no room", func(c *Config) { c.Models[0].MaxOutputTokens = 8192 },
			[]string{`models[0].max_output_tokens: must be < context_length 8192, or no prompt fits (got 8192)`}},

		{"role", func(c *Config) { c.Worker.Role = "router" },
			[]string{`worker.role: must be one of both, prefill, decode (got "router")`}},
		{"backend", func(c *Config) { c.Worker.Backend = "tpu" },
			[]string{`worker.backend: must be one of cpu, cuda (got "tpu")`}},
		{"weights", func(c *Config) { c.Worker.Weights = "q4" },
			[]string{`worker.weights: must be one of file, q8 (got "q4")`}},
		{"dtype", func(c *Config) { c.Worker.DType = "fp8" },
			[]string{`worker.dtype: must be one of auto, f32, f16, bf16, q8 (got "fp8")`}},
		{"dtype against weights q8", func(c *Config) { c.Worker.DType, c.Worker.Weights = DTypeF16, WeightsQ8 },
			[]string{`worker.dtype: f16 contradicts worker.weights q8 (which is dtype q8); set one of them`}},
		{"dtype conversion on cuda", func(c *Config) { c.Worker.DType, c.Worker.Backend = DTypeF16, BackendCUDA },
			[]string{`worker.dtype: f16 needs the cpu backend: the cuda backend computes with the checkpoint's type (auto) or q8`}},
		{"numerics", func(c *Config) { c.Worker.Numerics = "fp8" },
			[]string{`worker.numerics: must be one of exact, bf16 (got "fp8")`}},
		{"bf16 numerics on cuda", func(c *Config) { c.Worker.Numerics, c.Worker.Backend = NumericsBF16, BackendCUDA },
			[]string{`worker.numerics: bf16 needs the cpu backend`}},
		{"bf16 numerics against dtype f16", func(c *Config) { c.Worker.Numerics, c.Worker.DType = NumericsBF16, DTypeF16 },
			[]string{`worker.numerics: bf16 multiplies bf16 weights, and worker.dtype f16 converts them away; use dtype bf16 or auto`}},
		{"bf16 numerics against q8", func(c *Config) { c.Worker.Numerics, c.Worker.Weights = NumericsBF16, WeightsQ8 },
			[]string{`worker.numerics: bf16 multiplies bf16 weights, and worker.dtype q8 converts them away; use dtype bf16 or auto`}},
		{"threads", func(c *Config) { c.Worker.Threads = -1 },
			[]string{`worker.threads: must be >= 0 (got -1)`}},
		{"compute spin", func(c *Config) { c.Worker.ComputeSpin = 0 },
			[]string{`worker.compute_spin: must be > 0 (got 0s)`}},
		{"wildcard listen needs advertise", func(c *Config) { c.Worker.Listen = "0.0.0.0:9001" },
			[]string{`worker.advertise_addr: required when worker.listen binds every interface ("0.0.0.0:9001")`}},
		{"advertise must be dialable", func(c *Config) { c.Worker.Listen, c.Worker.AdvertiseAddr = ":9001", ":9001" },
			[]string{`worker.advertise_addr: must name a host and a non-zero port (got ":9001")`}},
		{"no gateways", func(c *Config) { c.Worker.Gateways = nil },
			[]string{`worker.gateways: at least one registry address is required`}},
		{"bad gateway", func(c *Config) { c.Worker.Gateways = []string{"a:1", "b:0"} },
			[]string{`worker.gateways[1]: must name a host and a non-zero port (got "b:0")`}},
		{"heartbeat interval", func(c *Config) { c.Worker.HeartbeatInterval = 4 * time.Second },
			[]string{`worker.heartbeat_interval: must be at most half of gateway.heartbeat_timeout (6s), so one lost heartbeat does not drop the worker (got 4s)`}},
		{"page tokens", func(c *Config) { c.Worker.KV.PageTokens = 0 },
			[]string{`worker.kv.page_tokens: must be in 1..4096 (got 0)`}},
		{"memory bytes", func(c *Config) { c.Worker.KV.MemoryBytes = -1 },
			[]string{`worker.kv.memory_bytes: must be >= 0 (got -1)`}},
		{"memory headroom", func(c *Config) { c.Worker.KV.MemoryHeadroom = -1 },
			[]string{`worker.kv.memory_headroom: must be >= 0 (got -1)`}},
		{"adapter memory", func(c *Config) { c.Worker.Adapters.Memory = -1 },
			[]string{`worker.adapters.memory: must be >= 0 (got -1)`}},
		{"memory fraction", func(c *Config) { c.Worker.KV.MemoryFraction = 1.5 },
			[]string{`worker.kv.memory_fraction: must be in (0, 1] (got 1.5)`}},
		{"prefill chunk", func(c *Config) { c.Worker.PrefillChunkTokens = 0 },
			[]string{`worker.prefill_chunk_tokens: must be > 0 (got 0)`}},
		{"max batch", func(c *Config) { c.Worker.MaxBatch = -3 },
			[]string{`worker.max_batch: must be > 0 (got -3)`}},
		{"transfer backend", func(c *Config) { c.Worker.Transfer.Backend = "rdma" },
			[]string{`worker.transfer.backend: must be one of tcp, shm (got "rdma")`}},
		{"transfer collides with control", func(c *Config) { c.Worker.Transfer.Listen = c.Worker.Listen },
			[]string{`worker.transfer.listen: must differ from worker.listen (both "127.0.0.1:9001")`}},
		{"transfer advertise", func(c *Config) { c.Worker.Transfer.AdvertiseAddr = "host" },
			[]string{`worker.transfer.advertise_addr: must be host:port (got "host")`}},
		{"shm dir", func(c *Config) { c.Worker.Transfer.Backend, c.Worker.Transfer.SHMDir = TransferSHM, "" },
			[]string{`worker.transfer.shm_dir: required with the shm transfer backend`}},
		{"drain timeout", func(c *Config) { c.Worker.Transfer.DrainTimeout = 0 },
			[]string{`worker.transfer.drain_timeout: must be > 0 (got 0s)`}},

		{"log level", func(c *Config) { c.Observability.LogLevel = "verbose" },
			[]string{`observability.log_level: must be debug, info, warn or error (got "verbose")`}},
		{"log format", func(c *Config) { c.Observability.LogFormat = "xml" },
			[]string{`observability.log_format: must be one of json, text (got "xml")`}},
		{"metrics listen", func(c *Config) { c.Observability.Metrics.Listen = "metrics" },
			[]string{`observability.metrics.listen: must be host:port (got "metrics")`}},
		{"label cap", func(c *Config) { c.Observability.Metrics.TenantLabelCap = -1 },
			[]string{`observability.metrics.tenant_label_cap: must be >= 0 (got -1)`}},
		{"exporter", func(c *Config) { c.Observability.Tracing.Exporter = "jaeger" },
			[]string{`observability.tracing.exporter: must be one of none, stdout, otlp (got "jaeger")`}},
		{"incoming", func(c *Config) { c.Observability.Tracing.Incoming = "trust" },
			[]string{`observability.tracing.incoming: must be one of follow, link, ignore (got "trust")`}},
		{"sample ratio", func(c *Config) { c.Observability.Tracing.SampleRatio = 2 },
			[]string{`observability.tracing.sample_ratio: must be in [0, 1] (got 2)`}},
		{"otlp needs endpoint", func(c *Config) { c.Observability.Tracing.Exporter = ExporterOTLP },
			[]string{`observability.tracing.endpoint: required with the otlp exporter`}},
		{"bad endpoint", func(c *Config) { c.Observability.Tracing.Endpoint = "ftp://x" },
			[]string{`observability.tracing.endpoint: must be an http:// or https:// URL or a host:port (got "ftp://x")`}},
		{"insecure https", func(c *Config) {
			c.Observability.Tracing.Endpoint, c.Observability.Tracing.Insecure = "https://c:4318", true
		}, []string{`observability.tracing.insecure: is true but the endpoint URL is https; use an http:// URL instead`}},
		{"header name", func(c *Config) { c.Observability.Tracing.Headers = map[string]string{"bad header": "v"} },
			[]string{`observability.tracing.headers.bad header: not a valid HTTP header name`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mutate(c)
			err := c.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if got := problems(t, err); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := Default()
	c.Models[0].ContextLength = -5
	c.Worker.MaxBatch = 0
	c.Observability.LogFormat = "xml"
	want := []string{
		`models[0].context_length: must be > 0 (got -5)`,
		`worker.max_batch: must be > 0 (got 0)`,
		`observability.log_format: must be one of json, text (got "xml")`,
	}
	err := c.Validate()
	if got := problems(t, err); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if msg := err.Error(); msg != "3 problems:\n  "+want[0]+"\n  "+want[1]+"\n  "+want[2] {
		t.Errorf("Error() = %q", msg)
	}
}

func TestStandaloneRequirements(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`gateway.tls.cert_file: required unless gateway.tls.plaintext is true`,
		`gateway.admin_token_file: required: the admin API needs a token (or set gateway.admin_token)`,
		`cluster.ca_file: required with cluster.auth mtls (with cert_file and key_file)`,
	}
	if got := problems(t, c.ValidateGateway()); !reflect.DeepEqual(got, want) {
		t.Errorf("gateway: got  %q\nwant %q", got, want)
	}
	c.Worker.Model = "llama"
	want = []string{
		`worker.model_dir: required for a standalone worker`,
		`worker.model: "llama" is not listed in models (have: tiny)`,
		`cluster.ca_file: required with cluster.auth mtls (with cert_file and key_file)`,
	}
	if got := problems(t, c.ValidateWorker()); !reflect.DeepEqual(got, want) {
		t.Errorf("worker: got  %q\nwant %q", got, want)
	}

	// Shared secret over plaintext needs only the secret.
	c = Default()
	c.Gateway.TLS.Plaintext = true
	c.Gateway.AdminTokenFile = "admin"
	c.Cluster = Cluster{Auth: ClusterSharedSecret, InsecurePlaintext: true}
	if got := problems(t, c.ValidateGateway()); !reflect.DeepEqual(got, []string{`cluster.shared_secret_file: required with cluster.auth shared_secret`}) {
		t.Errorf("got %q", got)
	}
	c.Cluster.SharedSecretFile = "secret"
	if err := c.ValidateGateway(); err != nil {
		t.Errorf("complete shared-secret gateway rejected: %v", err)
	}
}

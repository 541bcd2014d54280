package config

import (
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warden-ai/warden/internal/reasoning"
)

// Validate checks that the configuration is consistent, whatever process
// reads it. It returns nil or a *ValidationError listing every problem,
// each naming the field path and the reason, e.g.
// "models[0].context_length: must be > 0 (got -5)". It does no I/O: files
// named by the configuration are checked when a process opens them.
func (c *Config) Validate() error {
	v := &validator{}
	c.validate(v)
	return v.err()
}

// ValidateGateway is Validate plus what a standalone gateway needs:
// TLS material for its listeners (or explicit plaintext), an admin token
// and cluster credentials.
func (c *Config) ValidateGateway() error {
	v := &validator{}
	c.validate(v)
	g := &c.Gateway
	if !g.TLS.Plaintext && g.TLS.CertFile == "" && g.TLS.KeyFile == "" {
		v.add("gateway.tls.cert_file", "required unless gateway.tls.plaintext is true")
	}
	if g.AdminToken == "" && g.AdminTokenFile == "" {
		v.add("gateway.admin_token_file", "required: the admin API needs a token (or set gateway.admin_token)")
	}
	c.Cluster.requireCredentials(v)
	return v.err()
}

// ValidateWorker is Validate plus what a standalone worker needs: a model
// directory, a served model listed in models and cluster credentials.
// (Validate alone does not tie worker.model to models, so that a
// gateway-only file need not mention the worker section.)
func (c *Config) ValidateWorker() error {
	v := &validator{}
	c.validate(v)
	if c.Worker.ModelDir == "" {
		v.add("worker.model_dir", "required for a standalone worker")
	}
	if !slices.ContainsFunc(c.Models, func(m Model) bool { return m.Name == c.Worker.Model }) {
		names := make([]string, len(c.Models))
		for i, m := range c.Models {
			names[i] = m.Name
		}
		v.add("worker.model", "%q is not listed in models (have: %s)", c.Worker.Model, strings.Join(names, ", "))
	}
	c.Cluster.requireCredentials(v)
	return v.err()
}

// ResolvedID returns the worker ID: w.ID, or
// "<hostname>-<role>-<listen port>" when it is empty.
func (w *Worker) ResolvedID(hostname string) string {
	if w.ID != "" {
		return w.ID
	}
	_, port, err := net.SplitHostPort(w.Listen)
	if err != nil {
		port = "0"
	}
	return fmt.Sprintf("%s-%s-%s", hostname, w.Role, port)
}

// validator accumulates problems.
type validator struct {
	problems []Problem
}

func (v *validator) add(path, format string, args ...any) {
	v.problems = append(v.problems, Problem{Path: path, Reason: fmt.Sprintf(format, args...)})
}

func (v *validator) err() error {
	if len(v.problems) == 0 {
		return nil
	}
	return &ValidationError{Problems: v.problems}
}

func (v *validator) positiveInt(path string, got int) {
	if got <= 0 {
		v.add(path, "must be > 0 (got %d)", got)
	}
}

func (v *validator) nonNegativeInt(path string, got int) {
	if got < 0 {
		v.add(path, "must be >= 0 (got %d)", got)
	}
}

func (v *validator) positiveDuration(path string, got time.Duration) {
	if got <= 0 {
		v.add(path, "must be > 0 (got %s)", got)
	}
}

func (v *validator) nonNegativeDuration(path string, got time.Duration) {
	if got < 0 {
		v.add(path, "must be >= 0 (got %s)", got)
	}
}

// oneOf checks an enumerated string.
func oneOf[T ~string](v *validator, path string, got T, allowed ...T) {
	if !slices.Contains(allowed, got) {
		names := make([]string, len(allowed))
		for i, a := range allowed {
			names[i] = string(a)
		}
		v.add(path, "must be one of %s (got %q)", strings.Join(names, ", "), got)
	}
}

// listenAddr checks a host:port to listen on; the host may be empty (all
// interfaces) and the port 0 (any free port).
func (v *validator) listenAddr(path, addr string) {
	if _, _, err := splitAddr(addr); err != nil {
		v.add(path, "%v", err)
	}
}

// dialAddr checks a host:port to connect to: host and port both needed.
func (v *validator) dialAddr(path, addr string) {
	host, port, err := splitAddr(addr)
	switch {
	case err != nil:
		v.add(path, "%v", err)
	case host == "" || port == 0:
		v.add(path, "must name a host and a non-zero port (got %q)", addr)
	}
}

// splitAddr parses host:port with a numeric port.
func splitAddr(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("must be host:port (got %q)", addr)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port must be a number in 0..65535 (got %q)", addr)
	}
	return host, port, nil
}

// together reports the empty ones among fields that must be set
// together, and whether any is set.
func (v *validator) together(paths, values []string) bool {
	var set []string
	for i, val := range values {
		if val != "" {
			set = append(set, paths[i])
		}
	}
	if len(set) == 0 {
		return false
	}
	for i, val := range values {
		if val == "" {
			v.add(paths[i], "required when %s is set", strings.Join(set, " and "))
		}
	}
	return true
}

// distinctAddrs reports listeners of one process that would collide.
func (v *validator) distinctAddrs(paths []string, addrs []string) {
	for i := range addrs {
		for j := range i {
			_, port, err := splitAddr(addrs[i])
			if err == nil && port != 0 && addrs[i] == addrs[j] {
				v.add(paths[i], "must differ from %s (both %q)", paths[j], addrs[i])
			}
		}
	}
}

// allInterfaces reports whether a listen host binds every interface,
// where the address cannot be dialled as such by another host.
func allInterfaces(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// modelNameRE limits model names to characters safe in URLs, metric
// labels and log lines.
var modelNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$`)

// headerNameRE is an HTTP header field name (RFC 9110 token).
var headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

func (c *Config) validate(v *validator) {
	c.Gateway.validate(v)
	c.Cluster.validate(v)
	c.Tenants.validate(v)
	c.validateModels(v)
	c.validateWorker(v)
	c.Observability.validate(v)
}

func (g *Gateway) validate(v *validator) {
	v.listenAddr("gateway.listen", g.Listen)
	v.listenAddr("gateway.admin_listen", g.AdminListen)
	v.listenAddr("gateway.registry_listen", g.RegistryListen)
	v.distinctAddrs(
		[]string{"gateway.listen", "gateway.admin_listen", "gateway.registry_listen"},
		[]string{g.Listen, g.AdminListen, g.RegistryListen})
	v.together(
		[]string{"gateway.tls.cert_file", "gateway.tls.key_file"},
		[]string{g.TLS.CertFile, g.TLS.KeyFile})
	if g.TLS.Plaintext && g.TLS.CertFile != "" {
		v.add("gateway.tls.plaintext", "is true but gateway.tls.cert_file is set; choose one")
	}
	if g.AdminToken != "" && g.AdminTokenFile != "" {
		v.add("gateway.admin_token", "set either admin_token or admin_token_file, not both")
	}
	if g.MaxBodyBytes <= 0 {
		v.add("gateway.max_body_bytes", "must be > 0 (got %d)", int64(g.MaxBodyBytes))
	}
	if g.MaxN < 1 || g.MaxN > 256 {
		v.add("gateway.max_n", "must be in 1..256 (got %d)", g.MaxN)
	}
	if g.GrammarCache.Entries < 1 {
		v.add("gateway.grammar_cache.entries", "must be >= 1 (got %d)", g.GrammarCache.Entries)
	}
	if g.GrammarCache.MaxBytes < 1 {
		v.add("gateway.grammar_cache.max_bytes", "must be > 0 (got %d)", int64(g.GrammarCache.MaxBytes))
	}
	for i, o := range g.CORSOrigins {
		if u, err := url.Parse(o); o != "*" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil) {
			v.add(fmt.Sprintf("gateway.cors_origins[%d]", i), "must be \"*\" or an origin such as https://app.example.com (got %q)", o)
		}
	}
	v.positiveDuration("gateway.request_timeout", g.RequestTimeout)
	v.positiveDuration("gateway.heartbeat_timeout", g.HeartbeatTimeout)
	oneOf(v, "gateway.routing", g.Routing, RoutingCacheAware, RoutingRoundRobin)
	v.nonNegativeDuration("gateway.drain_timeout", g.DrainTimeout)
	v.nonNegativeDuration("gateway.shutdown_delay", g.ShutdownDelay)
	v.positiveDuration("gateway.responses.ttl", g.Responses.TTL)
	if g.Responses.MaxTenantBytes <= 0 {
		v.add("gateway.responses.max_tenant_bytes", "must be > 0 (got %d)", int64(g.Responses.MaxTenantBytes))
	}
	if g.Adapters.MaxBytes <= 0 || g.Adapters.MaxBytes > MaxAdapterBytes {
		v.add("gateway.adapters.max_bytes", "must be > 0 and at most 4GiB (got %d)", int64(g.Adapters.MaxBytes))
	}
	v.nonNegativeInt("gateway.queue.max_waiting", g.Queue.MaxWaiting)
	if g.Queue.MaxWaiting > 0 {
		v.positiveDuration("gateway.queue.max_wait", g.Queue.MaxWait)
	} else {
		v.nonNegativeDuration("gateway.queue.max_wait", g.Queue.MaxWait)
	}
}

func (cl *Cluster) validate(v *validator) {
	oneOf(v, "cluster.auth", cl.Auth, ClusterMTLS, ClusterSharedSecret)
	set := v.together(
		[]string{"cluster.ca_file", "cluster.cert_file", "cluster.key_file"},
		[]string{cl.CAFile, cl.CertFile, cl.KeyFile})
	switch cl.Auth {
	case ClusterMTLS:
		if cl.InsecurePlaintext {
			v.add("cluster.insecure_plaintext", "not allowed with cluster.auth mtls, which is TLS")
		}
		if cl.SharedSecretFile != "" {
			v.add("cluster.shared_secret_file", "only used with cluster.auth shared_secret")
		}
	case ClusterSharedSecret:
		if cl.InsecurePlaintext && set {
			v.add("cluster.insecure_plaintext", "is true but TLS files are set; choose one")
		}
	}
}

// requireCredentials checks that a standalone process has the files its
// cluster auth mode needs.
func (cl *Cluster) requireCredentials(v *validator) {
	needTLS := cl.Auth == ClusterMTLS || (cl.Auth == ClusterSharedSecret && !cl.InsecurePlaintext)
	if needTLS && cl.CAFile == "" && cl.CertFile == "" && cl.KeyFile == "" {
		v.add("cluster.ca_file", "required with cluster.auth %s (with cert_file and key_file)", cl.Auth)
	}
	if cl.Auth == ClusterSharedSecret && cl.SharedSecretFile == "" {
		v.add("cluster.shared_secret_file", "required with cluster.auth shared_secret")
	}
}

func (t *Tenants) validate(v *validator) {
	oneOf(v, "tenants.store", t.Store, StoreMemory, StoreRedis)
	if t.Store == StoreRedis {
		t.Redis.validateAddrs(v)
		if t.KeySecretFile == "" {
			v.add("tenants.key_secret_file", "required with the redis store, so stored keys verify after a restart")
		}
	}
	v.nonNegativeInt("tenants.redis.db", t.Redis.DB)
	if t.Redis.Cluster {
		if t.Redis.DB != 0 {
			v.add("tenants.redis.db", "must be 0 with tenants.redis.cluster (Redis Cluster has one database)")
		}
		if !hasHashTag(t.Redis.KeyPrefix) {
			v.add("tenants.redis.key_prefix", "must contain a hash tag such as {prod} with tenants.redis.cluster, so that the keys one script uses share a hash slot (got %q)", t.Redis.KeyPrefix)
		}
	}
	v.nonNegativeDuration("tenants.auth_cache_ttl", t.AuthCacheTTL)
	v.nonNegativeDuration("tenants.outage_grace", t.OutageGrace)
	v.nonNegativeDuration("tenants.share_interval", t.ShareInterval)
}

// validateAddrs checks the seeds (addr, addrs) and the sentinel settings.
func (r *Redis) validateAddrs(v *validator) {
	if r.Sentinel.Enabled() {
		if r.Cluster {
			v.add("tenants.redis.sentinel", "not with tenants.redis.cluster: a Redis Cluster fails over by itself; use one or the other")
		}
		if len(r.Addrs) > 0 {
			v.add("tenants.redis.addrs", "not with tenants.redis.sentinel: the sentinels name the master; list the sentinels in tenants.redis.sentinel.addrs")
		}
		if r.Sentinel.MasterName == "" {
			v.add("tenants.redis.sentinel.master_name", "required with tenants.redis.sentinel.addrs: the name the sentinels monitor the master under")
		}
		if len(r.Sentinel.Addrs) == 0 {
			v.add("tenants.redis.sentinel.addrs", "required with tenants.redis.sentinel.master_name: at least one sentinel's host:port")
		}
		v.dialAddrs("tenants.redis.sentinel.addrs", r.Sentinel.Addrs)
		return
	}
	if len(r.Addrs) == 0 {
		v.dialAddr("tenants.redis.addr", r.Addr)
		return
	}
	if len(r.Addrs) > 1 && !r.Cluster {
		v.add("tenants.redis.addrs", "several addresses need tenants.redis.cluster: true (or tenants.redis.sentinel for a master and its replicas); got %d", len(r.Addrs))
	}
	v.dialAddrs("tenants.redis.addrs", r.Addrs)
}

// dialAddrs checks a list of host:port, each once.
func (v *validator) dialAddrs(path string, addrs []string) {
	seen := make(map[string]bool, len(addrs))
	for i, a := range addrs {
		p := fmt.Sprintf("%s[%d]", path, i)
		v.dialAddr(p, a)
		if seen[a] {
			v.add(p, "%q is listed twice", a)
		}
		seen[a] = true
	}
}

// hasHashTag reports whether every key starting with prefix hashes by a
// Redis Cluster hash tag inside prefix: a "{" followed later by "}" with
// at least one byte between them.
func hasHashTag(prefix string) bool {
	open := strings.IndexByte(prefix, '{')
	if open < 0 {
		return false
	}
	end := strings.IndexByte(prefix[open+1:], '}')
	return end > 0
}

func (c *Config) validateModels(v *validator) {
	if len(c.Models) == 0 {
		v.add("models", "at least one model is required")
	}
	first := make(map[string]int)
	for i, m := range c.Models {
		p := fmt.Sprintf("models[%d]", i)
		if !modelNameRE.MatchString(m.Name) {
			v.add(p+".name", "must be 1-128 characters of letters, digits and . _ - : /, starting with a letter or digit (got %q)", m.Name)
		} else if j, dup := first[m.Name]; dup {
			v.add(p+".name", "duplicate of models[%d].name (%q)", j, m.Name)
		} else {
			first[m.Name] = i
		}
		v.positiveInt(p+".context_length", m.ContextLength)
		oneOf(v, p+".context_policy", m.ContextPolicy, ContextClamp, ContextRefuse)
		v.nonNegativeInt(p+".max_output_tokens", m.MaxOutputTokens)
		if m.ContextLength > 0 && m.MaxOutputTokens >= m.ContextLength {
			v.add(p+".max_output_tokens", "must be < context_length %d, or no prompt fits (got %d)", m.ContextLength, m.MaxOutputTokens)
		}
		if _, err := reasoning.ParseFormat(m.ReasoningParser); err != nil {
			v.add(p+".reasoning_parser", "must be qwen3, deepseek_r1, none or auto (got %q)", m.ReasoningParser)
		}
		if m.Pooling != "" {
			oneOf(v, p+".pooling", m.Pooling, PoolingLast, PoolingMean)
		}
	}
	c.validateAliases(v, first)
}

// validateAliases checks models[].aliases: model names, each used once,
// none a model's name.
func (c *Config) validateAliases(v *validator, models map[string]int) {
	seen := make(map[string]string)
	for i, m := range c.Models {
		for j, a := range m.Aliases {
			p := fmt.Sprintf("models[%d].aliases[%d]", i, j)
			switch k, isModel := models[a]; {
			case !modelNameRE.MatchString(a):
				v.add(p, "must be 1-128 characters of letters, digits and . _ - : /, starting with a letter or digit (got %q)", a)
			case isModel:
				v.add(p, "%q is the name of models[%d]", a, k)
			case seen[a] != "":
				v.add(p, "duplicate of %s (%q)", seen[a], a)
			default:
				seen[a] = p
			}
		}
	}
}

// Aliases returns the configured aliases, alias → model.
func (c *Config) Aliases() map[string]string {
	out := make(map[string]string)
	for _, m := range c.Models {
		for _, a := range m.Aliases {
			out[a] = m.Name
		}
	}
	return out
}

func (c *Config) validateWorker(v *validator) {
	w := &c.Worker
	oneOf(v, "worker.role", w.Role, RoleBoth, RolePrefill, RoleDecode)
	oneOf(v, "worker.backend", w.Backend, BackendCPU, BackendCUDA)
	oneOf(v, "worker.weights", w.Weights, WeightsFile, WeightsQ8)
	oneOf(v, "worker.dtype", w.DType, DTypeAuto, DTypeF32, DTypeF16, DTypeBF16, DTypeQ8)
	oneOf(v, "worker.numerics", w.Numerics, NumericsExact, NumericsBF16)
	if w.Numerics == NumericsBF16 {
		switch d := w.WeightsDType(); {
		case w.Backend == BackendCUDA:
			v.add("worker.numerics", "bf16 needs the cpu backend")
		case d != DTypeAuto && d != DTypeBF16:
			v.add("worker.numerics", "bf16 multiplies bf16 weights, and worker.dtype %s converts them away; use dtype bf16 or auto", d)
		}
	}
	switch {
	case w.Weights == WeightsQ8 && w.DType != DTypeAuto && w.DType != DTypeQ8:
		v.add("worker.dtype", "%s contradicts worker.weights q8 (which is dtype q8); set one of them", w.DType)
	case w.Backend == BackendCUDA && (w.DType == DTypeF32 || w.DType == DTypeF16 || w.DType == DTypeBF16):
		v.add("worker.dtype", "%s needs the cpu backend: the cuda backend computes with the checkpoint's type (auto) or q8", w.DType)
	}
	v.nonNegativeInt("worker.threads", w.Threads)
	v.listenAddr("worker.listen", w.Listen)
	if w.AdvertiseAddr != "" {
		v.dialAddr("worker.advertise_addr", w.AdvertiseAddr)
	} else if host, _, err := splitAddr(w.Listen); err == nil && allInterfaces(host) {
		v.add("worker.advertise_addr", "required when worker.listen binds every interface (%q)", w.Listen)
	}
	if len(w.Gateways) == 0 {
		v.add("worker.gateways", "at least one registry address is required")
	}
	for i, g := range w.Gateways {
		v.dialAddr(fmt.Sprintf("worker.gateways[%d]", i), g)
	}
	v.positiveDuration("worker.heartbeat_interval", w.HeartbeatInterval)
	v.nonNegativeDuration("worker.drain_timeout", w.DrainTimeout)
	if w.HeartbeatInterval > 0 && c.Gateway.HeartbeatTimeout > 0 && 2*w.HeartbeatInterval > c.Gateway.HeartbeatTimeout {
		v.add("worker.heartbeat_interval", "must be at most half of gateway.heartbeat_timeout (%s), so one lost heartbeat does not drop the worker (got %s)",
			c.Gateway.HeartbeatTimeout, w.HeartbeatInterval)
	}
	if w.KV.PageTokens <= 0 || w.KV.PageTokens > 4096 {
		v.add("worker.kv.page_tokens", "must be in 1..4096 (got %d)", w.KV.PageTokens)
	}
	if w.KV.MemoryBytes < 0 {
		v.add("worker.kv.memory_bytes", "must be >= 0 (got %d)", int64(w.KV.MemoryBytes))
	}
	if w.KV.MemoryHeadroom < 0 {
		v.add("worker.kv.memory_headroom", "must be >= 0 (got %d)", int64(w.KV.MemoryHeadroom))
	}
	if w.Adapters.Memory < 0 {
		v.add("worker.adapters.memory", "must be >= 0 (got %d)", int64(w.Adapters.Memory))
	}
	if !(w.KV.MemoryFraction > 0 && w.KV.MemoryFraction <= 1) {
		v.add("worker.kv.memory_fraction", "must be in (0, 1] (got %g)", w.KV.MemoryFraction)
	}
	v.positiveDuration("worker.compute_spin", w.ComputeSpin)
	v.positiveInt("worker.prefill_chunk_tokens", w.PrefillChunkTokens)
	v.positiveInt("worker.prefill_chunk_tokens_decoding", w.PrefillChunkTokensDecoding)
	oneOf(v, "worker.prefill_order", w.PrefillOrder, PrefillShortestFirst, PrefillArrival)
	v.positiveInt("worker.max_batch", w.MaxBatch)
	sp := &w.Speculative
	oneOf(v, "worker.speculative.method", sp.Method, SpeculativeOff, SpeculativeNgram)
	if sp.K < 1 || sp.K > 32 {
		v.add("worker.speculative.k", "must be in 1..32 (got %d)", sp.K)
	}
	if sp.NgramMin < 1 || sp.NgramMax < sp.NgramMin || sp.NgramMax > 16 {
		v.add("worker.speculative.ngram_min", "must satisfy 1 <= ngram_min <= ngram_max <= 16 (got %d and %d)", sp.NgramMin, sp.NgramMax)
	}

	t := &w.Transfer
	oneOf(v, "worker.transfer.backend", t.Backend, TransferTCP, TransferSHM)
	v.listenAddr("worker.transfer.listen", t.Listen)
	if t.AdvertiseAddr != "" {
		v.dialAddr("worker.transfer.advertise_addr", t.AdvertiseAddr)
	}
	v.distinctAddrs([]string{"worker.listen", "worker.transfer.listen"}, []string{w.Listen, t.Listen})
	if t.Backend == TransferSHM && t.SHMDir == "" {
		v.add("worker.transfer.shm_dir", "required with the shm transfer backend")
	}
	v.positiveDuration("worker.transfer.drain_timeout", t.DrainTimeout)
	v.positiveDuration("worker.transfer.reserve_timeout", t.ReserveTimeout)
	v.positiveDuration("worker.transfer.reserve_timeout_max", t.ReserveTimeoutMax)
	if t.ReserveTimeoutMax > 0 && t.ReserveTimeoutMax < t.ReserveTimeout {
		v.add("worker.transfer.reserve_timeout_max", "must be >= worker.transfer.reserve_timeout (%s)", t.ReserveTimeout)
	}
}

func (o *Observability) validate(v *validator) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.LogLevel)); err != nil {
		v.add("observability.log_level", "must be debug, info, warn or error (got %q)", o.LogLevel)
	}
	oneOf(v, "observability.log_format", o.LogFormat, LogJSON, LogText)
	if o.Metrics.Listen != "" {
		v.listenAddr("observability.metrics.listen", o.Metrics.Listen)
	}
	v.nonNegativeInt("observability.metrics.tenant_label_cap", o.Metrics.TenantLabelCap)

	t := &o.Tracing
	oneOf(v, "observability.tracing.exporter", t.Exporter, ExporterNone, ExporterStdout, ExporterOTLP)
	oneOf(v, "observability.tracing.incoming", t.Incoming, IncomingFollow, IncomingLink, IncomingIgnore)
	if !(t.SampleRatio >= 0 && t.SampleRatio <= 1) {
		v.add("observability.tracing.sample_ratio", "must be in [0, 1] (got %g)", t.SampleRatio)
	}
	if t.Exporter == ExporterOTLP && t.Endpoint == "" {
		v.add("observability.tracing.endpoint", "required with the otlp exporter")
	}
	if t.Endpoint != "" {
		if u, isURL, err := ParseOTLPEndpoint(t.Endpoint); err != nil {
			v.add("observability.tracing.endpoint", "%v", err)
		} else if isURL && t.Insecure && u.Scheme == "https" {
			v.add("observability.tracing.insecure", "is true but the endpoint URL is https; use an http:// URL instead")
		}
	}
	for _, k := range keys(t.Headers) {
		if !headerNameRE.MatchString(k) {
			v.add("observability.tracing.headers."+k, "not a valid HTTP header name")
		}
	}
}

// ParseOTLPEndpoint interprets observability.tracing.endpoint: either an
// http(s) URL (isURL true, u set) or a host:port (isURL false, u nil).
func ParseOTLPEndpoint(endpoint string) (u *url.URL, isURL bool, err error) {
	if strings.Contains(endpoint, "://") {
		u, err := url.Parse(endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, true, fmt.Errorf("must be an http:// or https:// URL or a host:port (got %q)", endpoint)
		}
		return u, true, nil
	}
	host, port, err := splitAddr(endpoint)
	if err != nil || host == "" || port == 0 {
		return nil, false, fmt.Errorf("must be an http:// or https:// URL or a host:port (got %q)", endpoint)
	}
	return nil, false, nil
}

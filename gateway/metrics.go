package gateway

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warden-ai/warden/gateway/internal/admission"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/gateway/internal/registry"
)

// otherLabel stands for values beyond a label's cap (tenants, unknown
// models), keeping metric cardinality bounded.
const otherLabel = "other"

// metrics are the gateway's Prometheus metrics, all prefixed warden_.
type metrics struct {
	requests      *prometheus.CounterVec   // model, outcome, code
	duration      *prometheus.HistogramVec // phase, model
	ttft          *prometheus.HistogramVec // model
	tpot          *prometheus.HistogramVec // model
	tokens        *prometheus.CounterVec   // kind[, tenant]
	prefixTokens  *prometheus.CounterVec   // model, result[, tenant]
	rejections    *prometheus.CounterVec   // reason
	errors        *prometheus.CounterVec   // reason, status
	contextTokens *prometheus.GaugeVec     // model, kind
	agreement     *prometheus.GaugeVec     // model
	workers       *prometheus.GaugeVec     // role, state
	aborts        *prometheus.CounterVec   // stage, cause
	integrity     *prometheus.CounterVec   // kind
	refused       *prometheus.CounterVec   // reason
	deg           degradedMetrics

	models  map[string]bool // configured models (label values allowed)
	tenants *labelCap       // nil: no tenant label
}

// newMetrics registers the gateway's metrics on reg. inflight, waiting
// and workers are read at scrape time.
func newMetrics(reg prometheus.Registerer, models []string, tenantCap int, inflight, waiting func() float64,
	workers func() []registry.Snapshot) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warden_requests_total",
			Help: "Generation requests by model, terminal outcome (completed, rejected, aborted, failed) and HTTP status code.",
		}, []string{"model", "outcome", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warden_request_duration_seconds",
			Help:    "Time requests spent in each phase, by model: queue (admitted until a worker took it), prefill, transfer, decode, and total.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
		}, []string{"phase", "model"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warden_time_to_first_token_seconds",
			Help:    "Time from receiving a request to its first output token, by model.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"model"}),
		tpot: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warden_time_per_output_token_seconds",
			Help:    "Mean time between output tokens of a completed request, after the first, by model.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"model"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warden_requests_rejected_total",
			Help: "API requests answered with an error, by reason (the error code, or its type when it has none) and HTTP status: every 4xx and 5xx (400, 401, 403, 404, 413, 429, 503, ...), and status 200 for an error that ended a stream.",
		}, []string{"reason", "status"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warden_admission_rejections_total",
			Help: "Requests rejected before any worker was involved, by reason (the error code).",
		}, []string{"reason"}),
		contextTokens: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "warden_model_context_tokens",
			Help: "Context window per model: configured, and effective (advertised and enforced; 0 when not served).",
		}, []string{"model", "kind"}),
		agreement: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "warden_model_context_agreement",
			Help: "1 when every serving worker's KV pool holds the model's configured context, else 0 (I2).",
		}, []string{"model"}),
		workers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "warden_workers",
			Help: "Registered workers by role and state (healthy, down).",
		}, []string{"role", "state"}),
		aborts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warden_aborts_total",
			Help: "Requests aborted or failed after admission, by the stage they were in and the cause.",
		}, []string{"stage", "cause"}),
		integrity: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warden_integrity_failures_total",
			Help: "Requests failed because a worker reported a KV integrity problem (data_loss: transfer verification; owner_violation: I3) or returned counts that disagree with admission.",
		}, []string{"kind"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warden_worker_registrations_refused_total",
			Help: "Worker registrations the gateway refused, by reason: unknown_model, tokenizer_mismatch, assets_unavailable, assets_invalid, or a disagreement with the model's other workers (I11) on page_tokens, kv_dtype, kv_layout, weights_sha256 or tokenizer_sha256 as <field>_mismatch.",
		}, []string{"reason"}),
		models: make(map[string]bool, len(models)),
	}
	tokenLabels := []string{"kind"}
	if tenantCap > 0 {
		m.tenants = &labelCap{limit: tenantCap, seen: make(map[string]bool)}
		tokenLabels = append(tokenLabels, "tenant")
	}
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warden_tokens_total",
		Help: "Tokens billed (I7): prompt tokens prefilled and completion tokens generated.",
	}, tokenLabels)
	m.prefixTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warden_prefix_cache_prompt_tokens_total",
		Help: "Prompt tokens of completed and failed requests by model and result: hit (reused from the worker's prefix cache, usage cached_tokens) or miss (computed). Hit ratio: hit / (hit + miss).",
	}, append([]string{"model", "result"}, tokenLabels[1:]...))
	for _, name := range models {
		m.models[name] = true
	}
	cs := []prometheus.Collector{m.requests, m.duration, m.ttft, m.tpot, m.tokens, m.prefixTokens, m.rejections, m.errors,
		m.contextTokens, m.agreement, m.workers, m.aborts, m.integrity, m.refused,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "warden_inflight_requests",
			Help: "Requests received and not yet finished.",
		}, inflight),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "warden_queue_waiting_requests",
			Help: "Admitted requests waiting in the fair queue for worker capacity.",
		}, waiting),
		newPoolCollector(workers),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	var err error
	if m.deg, err = newDegradedMetrics(reg); err != nil {
		return nil, err
	}
	return m, nil
}

// labelCap admits the first limit distinct values; later ones are "other".
type labelCap struct {
	limit int
	mu    sync.Mutex
	seen  map[string]bool
}

func (c *labelCap) label(v string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[v] {
		return v
	}
	if len(c.seen) >= c.limit {
		return otherLabel
	}
	c.seen[v] = true
	return v
}

func (m *metrics) modelLabel(model string) string {
	if m.models[model] {
		return model
	}
	return otherLabel
}

// finished records a request that reached its terminal state; status is
// the HTTP status the client got (499 when it had gone).
func (m *metrics) finished(s lifecycle.Snapshot, status int, firstToken, lastToken time.Time) {
	model := m.modelLabel(s.Model)
	m.requests.WithLabelValues(model, s.State.String(), strconv.Itoa(status)).Inc()
	switch s.State {
	case lifecycle.Rejected:
		m.rejections.WithLabelValues(s.Cause).Inc()
	case lifecycle.Aborted, lifecycle.Failed:
		m.aborts.WithLabelValues(s.Stage.String(), s.Cause).Inc()
	}
	e := s.Entered
	end := s.Finished
	phase := func(name string, from time.Time, to ...time.Time) {
		for _, t := range to {
			if !from.IsZero() && !t.IsZero() {
				m.duration.WithLabelValues(name, model).Observe(t.Sub(from).Seconds())
				return
			}
		}
	}
	phase("queue", e[lifecycle.Admitted], e[lifecycle.Reserved], e[lifecycle.Prefilling])
	if s.State == lifecycle.Completed {
		phase("prefill", e[lifecycle.Prefilling], e[lifecycle.Transferring], e[lifecycle.Decoding])
		phase("transfer", e[lifecycle.Transferring], e[lifecycle.Decoding])
		phase("decode", e[lifecycle.Decoding], end)
	}
	phase("total", s.Received, end)
	if !firstToken.IsZero() {
		m.ttft.WithLabelValues(model).Observe(firstToken.Sub(s.Received).Seconds())
		if s.State == lifecycle.Completed && s.CompletionTokens > 1 {
			m.tpot.WithLabelValues(model).Observe(lastToken.Sub(firstToken).Seconds() / float64(s.CompletionTokens-1))
		}
	}
	m.billed(s.Tenant, s.PromptTokens, s.CompletionTokens)
}

// rejected counts an API answer that carried an error (api.Config.OnError).
func (m *metrics) rejected(status int, reason string) {
	m.errors.WithLabelValues(reason, strconv.Itoa(status)).Inc()
}

// billed counts the tokens a request is charged for: the same numbers the
// lease is released with (I7).
func (m *metrics) billed(tenant string, prompt, completion int64) {
	if prompt == 0 && completion == 0 {
		return
	}
	if m.tenants == nil {
		m.tokens.WithLabelValues("prompt").Add(float64(prompt))
		m.tokens.WithLabelValues("completion").Add(float64(completion))
		return
	}
	t := m.tenants.label(tenant)
	m.tokens.WithLabelValues("prompt", t).Add(float64(prompt))
	m.tokens.WithLabelValues("completion", t).Add(float64(completion))
}

// prefixCache counts a request's prompt tokens by prefix-cache result:
// cached of prompt reused, the rest computed.
func (m *metrics) prefixCache(model, tenant string, prompt, cached int64) {
	if prompt <= 0 {
		return
	}
	labels := func(result string) []string {
		l := []string{m.modelLabel(model), result}
		if m.tenants != nil {
			l = append(l, m.tenants.label(tenant))
		}
		return l
	}
	m.prefixTokens.WithLabelValues(labels("hit")...).Add(float64(cached))
	m.prefixTokens.WithLabelValues(labels("miss")...).Add(float64(prompt - cached))
}

// modelState exports a model's context agreement.
func (m *metrics) modelState(s admission.State) {
	m.contextTokens.WithLabelValues(s.Model, "configured").Set(float64(s.Configured))
	m.contextTokens.WithLabelValues(s.Model, "effective").Set(float64(s.Effective))
	agree := 0.0
	if s.Verdict == admission.VerdictAgree {
		agree = 1
	}
	m.agreement.WithLabelValues(s.Model).Set(agree)
	m.deg.modelDegraded(s, s.Usable)
}

// workerStates exports the number of workers per role and state.
func (m *metrics) workerStates(ws []registry.Snapshot) {
	counts := make(map[[2]string]int)
	for _, role := range []string{registry.RolePrefill, registry.RoleDecode, registry.RoleBoth} {
		counts[[2]string{role, "healthy"}] = 0
		counts[[2]string{role, "down"}] = 0
	}
	for _, w := range ws {
		state := "down"
		if w.Healthy {
			state = "healthy"
		}
		counts[[2]string{w.Role, state}]++
	}
	for k, n := range counts {
		m.workers.WithLabelValues(k[0], k[1]).Set(float64(n))
	}
}

// integrityFailure counts a KV integrity problem reported by a worker.
func (m *metrics) integrityFailure(kind string) {
	m.integrity.WithLabelValues(kind).Inc()
}

// poolCollector exports every registered worker's KV pool as of its last
// heartbeat, so that one scrape of the gateway shows the whole cluster's
// pages (each worker's own /metrics has warden_kv_pages, live).
type poolCollector struct {
	workers           func() []registry.Snapshot
	pages, violations *prometheus.Desc
}

var _ prometheus.Collector = (*poolCollector)(nil)

func newPoolCollector(workers func() []registry.Snapshot) *poolCollector {
	return &poolCollector{
		workers: workers,
		pages: prometheus.NewDesc("warden_worker_kv_pages",
			"Registered workers' KV pool pages by state (free, reserved, in_use, quarantined), as of each worker's last heartbeat.",
			[]string{"worker", "role", "state"}, nil),
		violations: prometheus.NewDesc("warden_worker_kv_owner_violations",
			"KV owner violations (I3) each registered worker has counted since it started, as of its last heartbeat.",
			[]string{"worker", "role"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pages
	ch <- c.violations
}

// Collect implements prometheus.Collector.
func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, w := range c.workers() {
		p := w.Pool
		for _, s := range []struct {
			state string
			n     int64
		}{{"free", p.FreePages}, {"reserved", p.ReservedPages}, {"in_use", p.InUsePages}, {"quarantined", p.QuarantinedPages}} {
			ch <- prometheus.MustNewConstMetric(c.pages, prometheus.GaugeValue, float64(s.n), w.ID, w.Role, s.state)
		}
		ch <- prometheus.MustNewConstMetric(c.violations, prometheus.GaugeValue, float64(p.OwnerViolations), w.ID, w.Role)
	}
}

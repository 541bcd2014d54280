package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/kvtransfer"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/kvpool"
)

// metrics are the worker's Prometheus metrics. Counters the pool, engine
// and transfer ends already keep are read from their snapshots at scrape
// time (snapshotCollector); the rest are observed here.
type metrics struct {
	requests        *prometheus.CounterVec
	inFlight        *prometheus.GaugeVec     // rpc
	transferSeconds *prometheus.HistogramVec // side
	deferredRelease *prometheus.CounterVec
	deferredSeconds prometheus.Histogram
	aborts          *prometheus.CounterVec // stage, cause
	drainRelays     *prometheus.CounterVec // result
	domainEvictions *prometheus.CounterVec // reason, outcome
	leases          *prometheus.CounterVec // event
}

// sources are the components whose counters are exported from snapshots;
// receiver and sender are nil on roles that lack them.
type sources struct {
	pool     *kvpool.Pool
	engine   *engine.Engine
	receiver *kvtransfer.Receiver
	sender   *kvtransfer.Sender
}

func newMetrics() *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warden_worker_requests_total",
			Help: "Control-plane RPCs served, by method and gRPC status code.",
		}, []string{"rpc", "code"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "warden_worker_requests_in_flight",
			Help: "Control-plane RPCs being served now, by method (a Generate stream until its handler returns).",
		}, []string{"rpc"}),
		transferSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "warden_transfer_duration_seconds",
			Help: "Verified KV transfers by side: send (prefill: connection open to decode's verdict) " +
				"and receive (decode: handshake accepted to verdict).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"side"}),
		deferredRelease: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warden_decode_deferred_kv_release_total",
			Help: "Releases of aborted transfers' pages, by outcome (immediate, drained, timeout, late_drain).",
		}, []string{"outcome"}),
		deferredSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "warden_decode_deferred_kv_release_seconds",
			Help:    "How long aborted transfers' pages waited for the writer's drain before release or quarantine.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		aborts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warden_worker_aborts_total",
			Help: "Abort calls from the gateway, by the stage the request was in here (none: it held nothing, e.g. its call had already ended) and the gateway's cause.",
		}, []string{"stage", "cause"}),
		drainRelays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warden_decode_writer_drain_relays_total",
			Help: "Writer drains the gateway relayed from prefill's Abort answer (WriterDrained), by result: applied " +
				"(the transfer's held or quarantined pages were released, or its record marked drained), unknown " +
				"(nothing of it here any more), mismatched (another epoch or request).",
		}, []string{"result"}),
		domainEvictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warden_kv_prefix_domain_evicted_pages_total",
			Help: "Sealed prefix pages evicted because the gateway evicted their cache domain (EvictCacheDomains: tenant " +
				"deleted or disabled, key revoked, prefix_cache changed), by reason and outcome: freed (cached, freed at " +
				"once) or retired (read by a running request, out of the cache and freed when it ends).",
		}, []string{"reason", "outcome"}),
		leases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warden_decode_reservation_leases_total",
			Help: "Reservation lease events, by event: renewed (the gateway renewed a reservation whose transfer was " +
				"not yet complete and claimed) and expired (a reservation nobody renewed was abandoned: its gateway " +
				"is gone or cannot reach this worker).",
		}, []string{"event"}),
	}
	for _, side := range []string{sideSend, sideReceive} {
		m.transferSeconds.WithLabelValues(side)
	}
	for _, o := range []kvtransfer.Outcome{kvtransfer.OutcomeImmediate, kvtransfer.OutcomeDrained,
		kvtransfer.OutcomeTimeout, kvtransfer.OutcomeLateDrain, kvtransfer.OutcomeReclaimed} {
		m.deferredRelease.WithLabelValues(string(o))
	}
	for _, r := range []string{relayApplied, relayUnknown, relayMismatched} {
		m.drainRelays.WithLabelValues(r)
	}
	for _, r := range controlpb.EvictReasons {
		for _, o := range []string{evictFreed, evictRetired} {
			m.domainEvictions.WithLabelValues(r, o)
		}
	}
	for _, ev := range []string{leaseRenewed, leaseExpired} {
		m.leases.WithLabelValues(ev)
	}
	return m
}

// Events of warden_decode_reservation_leases_total.
const (
	leaseRenewed = "renewed"
	leaseExpired = "expired"
)

// Sides of warden_transfer_duration_seconds.
const (
	sideSend    = "send"
	sideReceive = "receive"
)

// register registers the metrics, the collector of src's snapshots, the
// GPU collector and the worker's info gauge (labels info) on reg.
func (m *metrics) register(reg prometheus.Registerer, src sources, gpus prometheus.Collector, info prometheus.Labels) error {
	infoGauge := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "warden_worker_info",
		Help:        "The worker's identity (always 1): worker ID, role, model, compute backend and transfer backend.",
		ConstLabels: info,
	})
	infoGauge.Set(1)
	for _, c := range []prometheus.Collector{m.requests, m.inFlight, m.transferSeconds, m.deferredRelease, m.deferredSeconds, m.aborts, m.drainRelays, m.leases,
		m.domainEvictions, newSnapshotCollector(src), gpus, infoGauge} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("worker: registering metrics: %w", err)
		}
	}
	return nil
}

// observeRelease is the receiver's OnRelease hook.
func (m *metrics) observeRelease(o kvtransfer.Outcome, waited time.Duration) {
	m.deferredRelease.WithLabelValues(string(o)).Inc()
	if o != kvtransfer.OutcomeImmediate {
		m.deferredSeconds.Observe(waited.Seconds())
	}
}

// abortCauses are the causes the gateway sends (lifecycle.Cause*); any
// other is counted as "other", keeping the label bounded.
var abortCauses = map[string]bool{
	"client_disconnect": true, "deadline": true, "worker_lost": true, "admin": true, "quota": true,
	"shutdown": true, "stop": true, "error": true, "internal": true,
	"data_loss": true, "owner_violation": true, "count_mismatch": true, "worker_unavailable": true,
	"worker_error": true, "protocol": true,
}

// stageNone labels an Abort for a request that held nothing here.
const stageNone = "none"

// aborted counts an Abort for a request in stage.
func (m *metrics) aborted(stage, cause string) {
	if !abortCauses[cause] {
		cause = "other"
	}
	m.aborts.WithLabelValues(stage, cause).Inc()
}

// interceptors count every RPC by method and status code, and the RPCs
// being served by method.
func (m *metrics) interceptors() (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		done := m.serving(info.FullMethod)
		resp, err := h(ctx, req)
		done(err)
		return resp, err
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		done := m.serving(info.FullMethod)
		err := h(srv, ss)
		done(err)
		return err
	}
	return unary, stream
}

// serving counts an RPC of fullMethod in flight; the function it returns
// ends it with its handler's error.
func (m *metrics) serving(fullMethod string) func(error) {
	rpc := methodName(fullMethod)
	g := m.inFlight.WithLabelValues(rpc)
	g.Inc()
	return func(err error) {
		m.requests.WithLabelValues(rpc, status.Code(err).String()).Inc()
		g.Dec()
	}
}

// methodName returns the last element of a gRPC full method name.
func methodName(full string) string {
	for i := len(full) - 1; i >= 0; i-- {
		if full[i] == '/' {
			return full[i+1:]
		}
	}
	return full
}

// snapshotCollector exports the pool's, engine's and transfer ends'
// counters from consistent snapshots taken at scrape time.
type snapshotCollector struct {
	src sources

	kvPages, kvCapacity, violations, fenceRejections *prometheus.Desc
	steps, tokens, sequences, prefills               *prometheus.Desc
	transferBytes, transferFrames                    *prometheus.Desc
	checksumFailures, staleFrames, authFailures      *prometheus.Desc
	prefixShared, prefixSeals, prefixEvictions       *prometheus.Desc
	prefixHits                                       *prometheus.Desc
	specProposed, specAccepted                       *prometheus.Desc
}

var _ prometheus.Collector = (*snapshotCollector)(nil)

func newSnapshotCollector(src sources) *snapshotCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &snapshotCollector{
		src:             src,
		kvPages:         d("warden_kv_pages", "KV pool pages by state; free+reserved+in_use+cached+quarantined is the pool size (cached: sealed prefix pages no request holds, evicted on demand).", "state"),
		kvCapacity:      d("warden_kv_capacity_tokens", "KV pool capacity in tokens: the most one request can ever hold."),
		violations:      d("warden_kv_owner_violations_total", "KV reads refused by the owner check (I3); each aborted its request without output."),
		fenceRejections: d("warden_kv_fence_rejections_total", "KV writes refused by the owner/epoch fence."),
		steps:           d("warden_engine_steps_total", "Forward steps the engine ran."),
		prefills:        d("warden_engine_prefills_total", "Prompts the engine prefilled (one per request, whatever its number of choices n)."),
		tokens:          d("warden_engine_tokens_total", "Tokens the engine processed, by kind (prefill, decode, cached: prompt positions reused from the prefix cache, fork: the prompt's partial last page recomputed by the other choices of an n > 1 request).", "kind"),
		prefixShared:    d("warden_kv_prefix_shared_pages", "Sealed prefix pages referenced by running requests (counted in warden_kv_pages{state=\"in_use\"})."),
		prefixSeals:     d("warden_kv_prefix_sealed_pages_total", "Prompt pages sealed into the prefix cache."),
		prefixEvictions: d("warden_kv_prefix_evictions_total", "Cached prefix pages evicted to make room for a reservation."),
		prefixHits:      d("warden_kv_prefix_hit_pages_total", "Sealed prefix pages reused by a reservation instead of being computed."),
		specProposed: d("warden_spec_proposed_tokens_total",
			"Tokens proposed by n-gram speculative decoding (worker.speculative) for verification."),
		specAccepted: d("warden_spec_accepted_tokens_total",
			"Proposed tokens the model sampled too, emitted without a forward step of their own; accepted/proposed is the acceptance rate."),
		sequences:      d("warden_engine_sequences", "Sequences in the engine, by state (running, waiting).", "state"),
		transferBytes:  d("warden_transfer_bytes_total", "KV page bytes transferred, by direction (sent, received).", "direction"),
		transferFrames: d("warden_transfer_frames_total", "KV transfer DATA frames, by direction (sent, received).", "direction"),
		checksumFailures: d("warden_transfer_checksum_failures_total",
			"Received transfer frames or pages whose checksum did not match."),
		staleFrames: d("warden_transfer_stale_frames_total",
			"Received transfer frames dropped because their epoch was fenced."),
		authFailures: d("warden_transfer_auth_failures_total",
			"Transfer connections refused because the peer did not authenticate."),
	}
}

// Describe implements prometheus.Collector.
func (c *snapshotCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.kvPages, c.kvCapacity, c.violations, c.fenceRejections,
		c.prefixShared, c.prefixSeals, c.prefixEvictions, c.prefixHits,
		c.steps, c.tokens, c.sequences, c.prefills, c.transferBytes, c.transferFrames,
		c.checksumFailures, c.staleFrames, c.authFailures, c.specProposed, c.specAccepted} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	ps := c.src.pool.Stats()
	for _, s := range []struct {
		state kvpool.State
		n     int
	}{{kvpool.Free, ps.Free}, {kvpool.Reserved, ps.Reserved}, {kvpool.InUse, ps.InUse}, {kvpool.Quarantined, ps.Quarantined}} {
		gauge(c.kvPages, float64(s.n), s.state.String())
	}
	gauge(c.kvPages, float64(ps.Cached), "cached")
	gauge(c.prefixShared, float64(ps.Shared))
	counter(c.prefixSeals, ps.Seals)
	counter(c.prefixEvictions, ps.Evictions)
	counter(c.prefixHits, ps.Hits)
	gauge(c.kvCapacity, float64(c.src.pool.Capacity().Tokens))
	counter(c.violations, ps.Violations)
	counter(c.fenceRejections, ps.FenceRejections)

	es := c.src.engine.Stats()
	counter(c.steps, es.Steps)
	counter(c.tokens, es.PrefillTokens, "prefill")
	counter(c.tokens, es.DecodeTokens, "decode")
	counter(c.tokens, es.CachedTokens, "cached")
	counter(c.tokens, es.ForkTokens, "fork")
	counter(c.prefills, es.Prefills)
	counter(c.specProposed, es.SpecProposed)
	counter(c.specAccepted, es.SpecAccepted)
	gauge(c.sequences, float64(es.Running), "running")
	gauge(c.sequences, float64(es.Waiting), "waiting")

	var sent, sentFrames uint64
	if c.src.sender != nil {
		ss := c.src.sender.Stats()
		sent, sentFrames = ss.Bytes, ss.Frames
	}
	var rs kvtransfer.ReceiverStats
	if c.src.receiver != nil {
		rs = c.src.receiver.Stats()
	}
	counter(c.transferBytes, sent, "sent")
	counter(c.transferBytes, rs.Bytes, "received")
	counter(c.transferFrames, sentFrames, "sent")
	counter(c.transferFrames, rs.Frames, "received")
	counter(c.checksumFailures, rs.ChecksumFailures)
	counter(c.staleFrames, rs.StaleFrames)
	counter(c.authFailures, rs.AuthFailures)
}

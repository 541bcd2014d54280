package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warden-ai/warden/gateway/internal/admission"
)

// degradedMetrics tell how the cluster copes with failure: quarantine
// lowering a model's context (I12), failovers, and workers refused at
// registration because they disagree with their model's workers (I11).
type degradedMetrics struct {
	degraded  *prometheus.GaugeVec // model
	usable    *prometheus.GaugeVec // model
	failovers prometheus.Counter
}

func newDegradedMetrics(reg prometheus.Registerer) (degradedMetrics, error) {
	d := degradedMetrics{
		degraded: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "warden_model_context_degraded",
			Help: "1 while quarantined KV pages lower the model's effective context below what its workers' pools hold when nothing is quarantined (I12), else 0.",
		}, []string{"model"}),
		usable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "warden_model_usable_context_tokens",
			Help: "The largest request (prompt + output tokens) the model's workers can hold now, net of quarantined pages; the effective context is at most this.",
		}, []string{"model"}),
		failovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warden_failovers_total",
			Help: "Requests placed again on another worker because the worker chosen for them refused the connection before anything was sent to it, or refused the call untouched because it is draining.",
		}),
	}
	for _, c := range []prometheus.Collector{d.degraded, d.usable, d.failovers} {
		if err := reg.Register(c); err != nil {
			return d, err
		}
	}
	return d, nil
}

// modelDegraded exports whether quarantine lowers the model's context.
func (d degradedMetrics) modelDegraded(s admission.State, usable int64) {
	v := 0.0
	if s.Degraded {
		v = 1
	}
	d.degraded.WithLabelValues(s.Model).Set(v)
	d.usable.WithLabelValues(s.Model).Set(float64(usable))
}

// failover counts a request placed again after an unreachable worker.
func (m *metrics) failover() { m.deg.failovers.Inc() }

// layoutRefused counts a registration refused for disagreeing on field
// (I11) in warden_worker_registrations_refused_total, with reason
// "<field>_mismatch".
func (m *metrics) layoutRefused(field string) { m.refused.WithLabelValues(field + "_mismatch").Inc() }

package gateway

import (
	"sync"
	"time"
)

// reserveMargin multiplies a prompt's expected prefill time into the
// reservation timeout the gateway asks decode for: room for a slower
// moment than the average measured.
const reserveMargin = 4

// ewmaWeight is the weight of the newest measurement.
const ewmaWeight = 0.2

// prefillRates measures, per model, how long prefill takes per prompt
// token as the gateway sees it (from sending the prompt until decode is
// ready: queueing on the prefill worker, compute and the KV transfer), as
// an exponentially weighted moving average. The first lease of a
// request's decode reservation is derived from it (reserveTimeout);
// decode clamps what is asked to [worker.transfer.reserve_timeout,
// worker.transfer.reserve_timeout_max], and the gateway renews the lease
// while the request lives (keepReservation), so no prefill is abandoned
// for being slower than this estimate.
type prefillRates struct {
	mu       sync.Mutex
	perToken map[string]float64 // model → seconds per prompt token
}

// observe records that a prompt of tokens took d from the prefill's start
// until decode was ready.
func (p *prefillRates) observe(model string, tokens int, d time.Duration) {
	if tokens <= 0 || d <= 0 {
		return
	}
	v := d.Seconds() / float64(tokens)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.perToken == nil {
		p.perToken = make(map[string]float64)
	}
	if old, ok := p.perToken[model]; ok {
		v = old + ewmaWeight*(v-old)
	}
	p.perToken[model] = v
}

// reserveTimeout is the first reservation lease to ask for a prompt of
// tokens: the measured time per token × tokens × reserveMargin; 0 before
// any measurement (decode then uses its reserve_timeout).
func (p *prefillRates) reserveTimeout(model string, tokens int) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Duration(p.perToken[model] * float64(tokens) * reserveMargin * float64(time.Second))
}

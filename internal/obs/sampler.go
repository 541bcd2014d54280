package obs

import (
	"fmt"
	"sync/atomic"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// LiveRatio is a trace sampler whose ratio of new traces changes while the
// process runs (a configuration reload). SetupTracing uses it when given
// WithLiveRatio; child spans follow their parent's decision either way.
type LiveRatio struct {
	cur atomic.Pointer[sdktrace.Sampler]
}

var _ sdktrace.Sampler = (*LiveRatio)(nil)

// NewLiveRatio returns a sampler recording ratio of new traces.
func NewLiveRatio(ratio float64) *LiveRatio {
	l := &LiveRatio{}
	l.Set(ratio)
	return l
}

// Set changes the ratio of new traces recorded from now on; ratio is
// clamped to [0, 1] (SetupTracing and config validation refuse others).
func (l *LiveRatio) Set(ratio float64) {
	s := sdktrace.TraceIDRatioBased(min(max(ratio, 0), 1))
	l.cur.Store(&s)
}

// ShouldSample implements sdktrace.Sampler.
func (l *LiveRatio) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	return (*l.cur.Load()).ShouldSample(p)
}

// Description implements sdktrace.Sampler.
func (l *LiveRatio) Description() string {
	return fmt.Sprintf("LiveRatio{%s}", (*l.cur.Load()).Description())
}

// WithLiveRatio samples new traces with l instead of a fixed ratio, so
// that l.Set changes the ratio of the running provider; l should start at
// the configuration's sample_ratio.
func WithLiveRatio(l *LiveRatio) TracingOption {
	return func(o *tracingOptions) { o.ratio = l }
}

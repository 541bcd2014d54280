package gateway

import (
	"testing"
	"time"
)

// TestReserveTimeoutScalesWithTheWork: the reservation timeout the
// gateway asks for is the measured prefill time per token × the prompt ×
// the margin, per model, following the measurements; nothing before the
// first one (decode's floor applies).
func TestReserveTimeoutScalesWithTheWork(t *testing.T) {
	var p prefillRates
	if d := p.reserveTimeout("m", 8000); d != 0 {
		t.Fatalf("before any measurement: %s", d)
	}
	p.observe("m", 1000, 10*time.Second) // 10 ms per token: a loaded machine
	if d := p.reserveTimeout("m", 8000); d != 8000*10*time.Millisecond*reserveMargin {
		t.Errorf("8000 tokens at 10 ms: %s", d)
	}
	if d := p.reserveTimeout("other", 8000); d != 0 {
		t.Errorf("another model: %s", d)
	}
	p.observe("m", 1000, 20*time.Second)
	if d, want := p.reserveTimeout("m", 1000), time.Duration((0.01+ewmaWeight*0.01)*1000*reserveMargin*float64(time.Second)); d != want {
		t.Errorf("after a slower prefill: %s, want %s", d, want)
	}
}

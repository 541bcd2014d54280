package worker

import (
	"context"
	"testing"
	"time"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
)

// TestDrainOnStop: a stopping worker with worker.drain_timeout drains: it
// refuses new work untouched (controlpb.IsDraining) while a reservation
// in flight keeps it running; it stops once that request ends (nil from
// Run); and AbortNow (the second signal) cuts a drain short.
func TestDrainOnStop(t *testing.T) {
	for _, abort := range []bool{false, true} {
		name := "finishes"
		if abort {
			name = "second signal"
		}
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(t, config.RoleDecode, config.TransferTCP, testPages)
			cfg.Worker.DrainTimeout = time.Hour // only the test ends it
			w := newTestWorker(t, cfg)
			stop := w.start()
			held := owner("acme", "held", 1)
			if _, err := w.client.Reserve(context.Background(), &controlpb.ReserveRequest{Owner: held, PromptTokens: 17, TotalTokens: 20}); err != nil {
				t.Fatal(err)
			}
			stopped := make(chan error, 1)
			go func() { stopped <- stop() }()
			wait(t, w.drain.started, "the drain to begin")
			_, err := w.client.Reserve(context.Background(), &controlpb.ReserveRequest{Owner: owner("acme", "new", 1), PromptTokens: 17, TotalTokens: 20})
			if !controlpb.IsDraining(err) {
				t.Fatalf("Reserve while draining: %v, want the draining refusal", err)
			}
			if abort {
				w.AbortNow()
			} else if _, err := w.client.Abort(context.Background(), &controlpb.AbortRequest{Owner: held, Cause: "client"}); err != nil {
				t.Fatal(err)
			}
			if err := <-stopped; err != nil {
				t.Fatalf("Run: %v", err)
			}
		})
	}
}

// TestClosingRefusesUntouched: once the drain is over and the worker is
// closing (aborting what is left, stopping its server), a call that raced
// with it still gets the draining refusal, which the gateway places on
// another worker, not an error that fails the request.
func TestClosingRefusesUntouched(t *testing.T) {
	w := newTestWorker(t, testConfig(t, config.RoleDecode, config.TransferTCP, testPages))
	stop := w.start()
	defer stop()
	w.mu.Lock()
	w.closing = true
	w.mu.Unlock()
	_, err := w.client.Reserve(context.Background(), &controlpb.ReserveRequest{Owner: owner("acme", "late", 1), PromptTokens: 17, TotalTokens: 20})
	if !controlpb.IsDraining(err) {
		t.Fatalf("Reserve while closing: %v, want the draining refusal", err)
	}
	if st := w.rt.Pool.Stats(); st.Free != st.Total {
		t.Fatalf("a refused call holds pages: %+v", st)
	}
}

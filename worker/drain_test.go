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

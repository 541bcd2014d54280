package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/internal/controlpb"
)

// TestShutdownDrainsInFlight: a stopping gateway turns unready at once,
// answers new requests 503 shutting_down with retry-after, and lets the
// request in flight finish with its whole content; Run returns once it
// has. With a second signal (AbortNow) the request still in flight is
// aborted at once with cause shutdown, and its worker is told.
func TestShutdownDrainsInFlight(t *testing.T) {
	for _, abort := range []bool{false, true} {
		name := map[bool]string{false: "drained", true: "second signal"}[abort]
		t.Run(name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Gateway.DrainTimeout = 10 * time.Minute // only the request's end (or AbortNow) stops the drain
			tg := startGateway(t, cfg)
			w := newFake(tg, controlpb.Role_ROLE_BOTH, 64, nil)
			w.holdTokens = make(chan struct{})
			w.start()
			waitFor(t, "the gateway to be ready", func() bool { code, _ := tg.get("/readyz"); return code == http.StatusOK })
			stream := tg.api().chatStream(context.Background(), chatParams(50))
			if !stream.Next() {
				t.Fatalf("no first chunk: %v", stream.Err())
			}
			s := tg.only()
			tg.stop() // what SIGTERM does

			waitFor(t, "readiness to turn false", func() bool { code, _ := tg.get("/readyz"); return code == http.StatusServiceUnavailable })
			code, h, body := tg.post("/v1/completions", map[string]any{"model": "tiny", "prompt": "hi", "max_tokens": 5})
			if e := decodeEnvelope(t, body); code != http.StatusServiceUnavailable || str(e.Error.Code) != "shutting_down" || h.Get("Retry-After") == "" {
				t.Errorf("a request during the drain: %d retry-after %q %s, want 503 shutting_down with retry-after", code, h.Get("Retry-After"), body)
			}
			select {
			case err := <-tg.result:
				t.Fatalf("Run returned %v while a request was in flight", err)
			default:
			}
			if st, ok := tg.table.Get(s.ID); !ok || st.State.Terminal() {
				t.Fatalf("the request in flight ended during the drain: %+v", st)
			}

			var text strings.Builder
			if abort {
				tg.AbortNow()
			} else {
				close(w.holdTokens)
			}
			for stream.Next() {
				if c := stream.Current(); len(c.Choices) > 0 {
					text.WriteString(c.Choices[0].Delta.Content)
				}
			}
			s = tg.finished(s.ID)
			if abort {
				if stream.Err() == nil || s.State != lifecycle.Aborted || s.Cause != lifecycle.CauseShutdown {
					t.Fatalf("after AbortNow: stream error %v, request %+v; want aborted with cause shutdown", stream.Err(), s)
				}
				waitFor(t, "the shutdown abort to reach the worker", func() bool { return len(w.aborts(s.ID)) == 1 })
			} else if err := stream.Err(); err != nil || text.String() != w.reply || s.State != lifecycle.Completed {
				t.Fatalf("drained request: %q, %v, %+v; want %q completed", text.String(), err, s, w.reply)
			}
			if err := <-tg.result; err != nil {
				t.Fatalf("Run: %v", err)
			}
			close(tg.result) // shutdown (cleanup) reads no second result
		})
	}
}

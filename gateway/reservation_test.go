package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/internal/faults"
	"github.com/warden-ai/warden/worker"
)

// testLease is decode's reservation lease in these tests
// (worker.transfer.reserve_timeout): the gateway renews every third of it.
// Short, so that a prefill stalled for many leases takes little time; long
// enough that a renewal delayed by a loaded machine (each may take up to
// a third of it) still arrives before the lease ends.
const testLease = 600 * time.Millisecond

// startSlowPrefill starts a gateway with cfg and a P/D pair over backend
// whose decode leases reservations for testLease and whose prefill stalls
// every transfer right after decode accepted its handshake (faults.Opened,
// before a byte is written) until the returned injector is released: a
// prefill queued or computing for as long as the test likes.
func startSlowPrefill(t *testing.T, cfg *config.Config, backend config.TransferBackend) (*testGateway, *pdWorker, *pdWorker, *faults.Injector) {
	t.Helper()
	inj := faults.New(faults.Rule{Point: faults.Opened, Action: faults.Stall, Times: -1})
	tg, decode, prefill := startPDWith(t, cfg, backend, workerPages, workerPages,
		func(d *config.Config) { d.Worker.Transfer.ReserveTimeout = testLease }, worker.WithTransferFaults(inj))
	t.Cleanup(inj.Release) // before the workers stop: a stalled Open holds them
	return tg, decode, prefill, inj
}

// renewals is how often decode's reservation leases were renewed, and
// how many expired.
func renewals(d *pdWorker) (renewed, expired float64) {
	return d.metric("warden_decode_reservation_leases_total", map[string]string{"event": "renewed"}),
		d.metric("warden_decode_reservation_leases_total", map[string]string{"event": "expired"})
}

// TestPDSlowPrefillKeepsReservation (issue 26): a prefill that takes many
// times decode's reservation lease — stalled after the transfer opened,
// while the gateway renews the reservation ten times, more than three
// leases — is not abandoned: the request answers exactly what a single
// worker does (the old fixed timeout answered 503 worker_unavailable
// "the worker failed or went away" although none did), no lease expired
// and both pools balance afterwards. With n = 1 decode's Generate has
// claimed the reservation and waits for the transfer; with n = 2 it is
// sent only once Prefill returned, so the reservation waits unclaimed.
func TestPDSlowPrefillKeepsReservation(t *testing.T) {
	t.Parallel() // waits on timers, failovers and heartbeats: it overlaps with the others
	pt := newPromptText(t)
	ref := newRefWorker(t, workerPages)
	text, ids := pt.text(t, 40, 11)
	want := ref.run(ids, 8)
	for _, backend := range backends {
		for _, n := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/n=%d", backend, n), func(t *testing.T) {
				tg, decode, prefill, inj := startSlowPrefill(t, testConfig(), backend)
				done := make(chan string, 1) // "" when the answer is the reference's
				go func() { done <- askSlow(tg, text, n, want) }()
				select {
				case <-inj.Stalled():
				case diff := <-done:
					t.Fatalf("the request ended before its prefill stalled: %s", diff)
				}
				for {
					renewed, expired := renewals(decode)
					if expired != 0 {
						inj.Release()
						t.Fatalf("a reservation lease expired while its prefill was stalled (renewed %v times); the client got %s", renewed, <-done)
					}
					if renewed >= 10 {
						break
					}
					select {
					case diff := <-done:
						t.Fatalf("the request ended while its prefill was stalled (renewed %v times): %s", renewed, diff)
					case <-time.After(5 * time.Millisecond):
					}
				}
				inj.Release()
				if diff := <-done; diff != "" {
					t.Fatalf("slow prefill: %s", diff)
				}
				if s := tg.only(); s.State != lifecycle.Completed {
					t.Errorf("request %+v", s)
				}
				if _, expired := renewals(decode); expired != 0 {
					t.Errorf("%v reservation leases expired", expired)
				}
				wentThroughPD(t, tg, decode, prefill)
				decode.settled()
				prefill.settled()
			})
		}
	}
}

// askSlow sends a completion of n greedy choices of prompt, streamed for
// n = 1, and returns "" when every choice is want, else what differed.
func askSlow(tg *testGateway, prompt string, n int, want reference) string {
	if n == 1 {
		res := completion{tg: tg, key: tg.key, prompt: prompt, max: 8, stream: true}.do(context.Background())
		if diff := res.matchesRef(want); !res.complete(true) || diff != "" {
			return fmt.Sprintf("%v: %s", res, diff)
		}
		return ""
	}
	b, _ := json.Marshal(map[string]any{"model": "tiny", "prompt": prompt, "max_tokens": 8, "temperature": 0, "n": n})
	req, _ := http.NewRequest(http.MethodPost, tg.base+"/v1/completions", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+tg.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := tg.http.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var got struct {
		Choices []struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &got); resp.StatusCode != http.StatusOK || err != nil || len(got.Choices) != n {
		return fmt.Sprintf("status %d: %s", resp.StatusCode, body)
	}
	for k, c := range got.Choices {
		if c.Text != want.text || c.FinishReason != want.finish {
			return fmt.Sprintf("choice %d is %q (%s), the reference %q (%s)", k, c.Text, c.FinishReason, want.text, want.finish)
		}
	}
	return ""
}

// TestPDSlowPrefillMeetsRequestDeadline (issue 26): a prefill that stalls
// past the request's own deadline (gateway.request_timeout, many leases
// long) gets the honest 504 timeout at that deadline, never
// worker_unavailable while both workers are alive; the abort fan-out
// frees the reservation (no lease expired) and both pools balance.
func TestPDSlowPrefillMeetsRequestDeadline(t *testing.T) {
	t.Parallel() // waits on timers, failovers and heartbeats: it overlaps with the others
	pt := newPromptText(t)
	text, _ := pt.text(t, 40, 12)
	cfg := testConfig()
	cfg.Gateway.RequestTimeout = 8 * testLease
	tg, decode, prefill, inj := startSlowPrefill(t, cfg, config.TransferTCP)
	res := completion{tg: tg, key: tg.key, prompt: text, max: 8}.do(context.Background())
	if res.status != http.StatusGatewayTimeout || res.errCode != "timeout" || res.text != "" {
		t.Fatalf("request whose prefill outlived its deadline: %v, want 504 timeout", res)
	}
	if s := tg.finished(res.requestID); s.State != lifecycle.Aborted || s.Cause != lifecycle.CauseDeadline {
		t.Errorf("request %+v, want aborted at its deadline", s)
	}
	select {
	case <-inj.Stalled():
	default:
		t.Error("the prefill never stalled")
	}
	inj.Release()
	if renewed, expired := renewals(decode); renewed == 0 || expired != 0 {
		t.Errorf("decode renewed %v and expired %v reservation leases, want renewals and no expiry", renewed, expired)
	}
	decode.settled()
	prefill.settled()
}

package worker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/kvtransfer"
)

// abortBoth tells both workers to abort, as the gateway does, and checks
// that a repeated Abort is harmless. It may run on any goroutine.
func (s pd) abortBoth(t *testing.T, o *controlpb.Owner) {
	t.Helper()
	ctx := context.Background()
	for _, w := range []*started{s.decode, s.prefill} {
		r, err := w.client.Abort(ctx, &controlpb.AbortRequest{Owner: o, Cause: "test"})
		if err != nil {
			t.Errorf("Abort on %s: %v", w.id, err)
			continue
		}
		if w.role == config.RolePrefill && !r.GetDrained() {
			t.Errorf("prefill Abort: drained = false")
		}
		again, err := w.client.Abort(ctx, &controlpb.AbortRequest{Owner: o, Cause: "again"})
		if err != nil || again.GetFound() {
			t.Errorf("repeated Abort on %s: %v, %v; want found=false", w.id, again, err)
		}
	}
}

// async runs Reserve, then Prefill and Generate concurrently, in the
// background and returns their results on a channel.
func (s pd) async(t *testing.T, ctxP, ctxG context.Context, o *controlpb.Owner, p []int32, sp *controlpb.SamplingParams) <-chan pdRun {
	out := make(chan pdRun, 1)
	go func() {
		var r pdRun
		defer func() { out <- r }()
		res, err := s.decode.client.Reserve(context.Background(), &controlpb.ReserveRequest{Owner: o, PromptTokens: int64(len(p)), TotalTokens: int64(len(p)) + int64(sp.GetMaxTokens())})
		if err != nil {
			r.reserveErr = err
			return
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			r.prefill, r.prefillErr = s.prefill.client.Prefill(ctxP, &controlpb.PrefillRequest{Owner: o, Prompt: p, Sampling: sp, Ticket: res.GetTicket()})
		})
		stream, err := s.decode.client.Generate(ctxG, &controlpb.GenerateRequest{Owner: o, Prompt: p, Sampling: sp, Ticket: res.GetTicket()})
		r.gen = collect(t, stream, err)
		wg.Wait()
	}()
	return out
}

func receive(t *testing.T, ch <-chan pdRun) pdRun {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(time.Minute):
		t.Fatal("request did not end")
		return pdRun{}
	}
}

// TestAbortStages aborts requests at every stage, by Abort RPC and by
// cancelling the gateway's calls, over tcp and shm: afterwards nothing is
// held anywhere, repeated aborts are harmless, and the next request still
// gets its reference tokens.
func TestAbortStages(t *testing.T) {
	p := prompt(40, 9) // three pages
	sp := greedy(30)
	want := runReference(t, [][]int32{p}, sp)[0]
	for _, backend := range []config.TransferBackend{config.TransferTCP, config.TransferSHM} {
		t.Run(string(backend), func(t *testing.T) {
			s := startPD(t, backend)
			bg := context.Background()
			n := 0
			next := func() *controlpb.Owner { n++; return owner("acme", fmt.Sprint("a", n), 1) }

			t.Run("before prefill", func(t *testing.T) {
				o := next()
				res, err := s.decode.client.Reserve(bg, &controlpb.ReserveRequest{Owner: o, PromptTokens: 40, TotalTokens: 70})
				if err != nil {
					t.Fatal(err)
				}
				s.abortBoth(t, o)
				_, err = s.prefill.client.Prefill(bg, &controlpb.PrefillRequest{Owner: o, Prompt: p, Sampling: sp, Ticket: res.GetTicket()})
				if code(err) != codes.Aborted {
					t.Errorf("Prefill after Abort: %v, want Aborted", err)
				}
				got := generate(t, s.decode.client, &controlpb.GenerateRequest{Owner: o, Prompt: p, Sampling: sp, Ticket: res.GetTicket()})
				if code(got.err) != codes.Aborted {
					t.Errorf("Generate after Abort: %v, want Aborted", got.err)
				}
				waitQuiet(t, s.prefill, s.decode)
			})

			t.Run("during prefill by Abort", func(t *testing.T) {
				o := next()
				st := s.prefill.stallPush(t, 0)
				ch := s.async(t, bg, bg, o, p, sp)
				wait(t, st.reached, "the first push")
				s.abortBoth(t, o)
				r := receive(t, ch)
				if code(r.prefillErr) != codes.Aborted {
					t.Errorf("Prefill: %v, want Aborted", r.prefillErr)
				}
				if r.gen.err == nil || len(r.gen.tokens) > 0 {
					t.Errorf("Generate: %d tokens, err %v; want an error and no token", len(r.gen.tokens), r.gen.err)
				}
				waitQuiet(t, s.prefill, s.decode)
			})

			t.Run("mid-transfer by Abort on decode", func(t *testing.T) {
				o := next()
				st := s.prefill.stallPush(t, 1) // page 0 is in decode's pool
				ch := s.async(t, bg, bg, o, p, sp)
				wait(t, st.reached, "the second push")
				r, err := s.decode.client.Abort(bg, &controlpb.AbortRequest{Owner: o, Cause: "client_disconnect"})
				if err != nil || !r.GetFound() {
					t.Fatalf("decode Abort: %v, %v", r, err)
				}
				st.unblock() // the stalled push now meets the fence
				run := receive(t, ch)
				if run.prefillErr == nil || code(run.gen.err) != codes.Aborted {
					t.Errorf("Prefill: %v; Generate: %v; want both to fail (Generate Aborted)", run.prefillErr, run.gen.err)
				}
				s.abortBoth(t, o)
				waitQuiet(t, s.prefill, s.decode)
			})

			t.Run("during decode by Abort", func(t *testing.T) {
				o := next()
				st := s.decode.stallTokens(t)
				ch := s.async(t, bg, bg, o, p, sp)
				wait(t, st.reached, "the first tokens")
				s.abortBoth(t, o)
				r := receive(t, ch)
				// Prefill may still be waiting for decode's verdict.
				if r.prefillErr != nil && code(r.prefillErr) != codes.Aborted {
					t.Errorf("Prefill: %v", r.prefillErr)
				}
				if code(r.gen.err) != codes.Aborted || !strings.Contains(r.gen.err.Error(), "test") {
					t.Errorf("Generate: %v, want Aborted naming the cause", r.gen.err)
				}
				waitQuiet(t, s.prefill, s.decode)
			})

			t.Run("during prefill by cancelling Prefill", func(t *testing.T) {
				o := next()
				st := s.prefill.stallPush(t, 1)
				ctx, cancel := context.WithCancel(bg)
				ch := s.async(t, ctx, bg, o, p, sp)
				wait(t, st.reached, "the second push")
				cancel()
				r := receive(t, ch)
				if code(r.prefillErr) != codes.Canceled || r.gen.err == nil {
					t.Errorf("Prefill: %v; Generate: %v; want Canceled and an error", r.prefillErr, r.gen.err)
				}
				s.abortBoth(t, o)
				waitQuiet(t, s.prefill, s.decode)
			})

			t.Run("during decode by cancelling Generate", func(t *testing.T) {
				o := next()
				st := s.decode.stallTokens(t)
				ctx, cancel := context.WithCancel(bg)
				ch := s.async(t, bg, ctx, o, p, sp)
				wait(t, st.reached, "the first tokens")
				cancel()
				r := receive(t, ch)
				if code(r.gen.err) != codes.Canceled {
					t.Errorf("Generate: %v, want Canceled", r.gen.err)
				}
				waitQuiet(t, s.prefill, s.decode)
				s.abortBoth(t, o)
			})

			// Nothing the aborts left behind changes the next request.
			r := s.run(t, nil, next(), p, sp)
			if r.prefillErr != nil {
				t.Fatal(r.prefillErr)
			}
			checkAgainst(t, "request after the aborts", r.gen, want)
			waitQuiet(t, s.prefill, s.decode)

			outcome := kvtransfer.OutcomeImmediate
			if backend == config.TransferSHM {
				outcome = kvtransfer.OutcomeDrained // the aborted shm transfers waited for their drain acks
			}
			if v := metricValue(t, s.decode.Worker, "warden_decode_deferred_kv_release_total", "outcome", string(outcome)); v < 1 {
				t.Errorf("deferred releases with outcome %s: %v, want some", outcome, v)
			}
		})
	}
}

// TestAbortBoth aborts a both worker's local request during decode, by
// Abort and by cancelling the stream.
func TestAbortBoth(t *testing.T) {
	w := startWorker(t, testConfig(t, config.RoleBoth, config.TransferTCP, testPages))
	bg := context.Background()
	for _, byAbort := range []bool{true, false} {
		o := owner("acme", fmt.Sprint("both-", byAbort), 1)
		st := w.stallTokens(t)
		ctx, cancel := context.WithCancel(bg)
		out := make(chan outcome, 1)
		go func() {
			stream, err := w.client.Generate(ctx, &controlpb.GenerateRequest{Owner: o, Prompt: prompt(20, 1), Sampling: greedy(40)})
			out <- collect(t, stream, err)
		}()
		wait(t, st.reached, "the first tokens")
		want := codes.Canceled
		if byAbort {
			r, err := w.client.Abort(bg, &controlpb.AbortRequest{Owner: o, Cause: "admin"})
			if err != nil || !r.GetFound() || !r.GetDrained() {
				t.Fatalf("Abort: %v, %v", r, err)
			}
			want = codes.Aborted
		} else {
			cancel()
		}
		if got := <-out; code(got.err) != want || len(got.tokens) > 0 {
			t.Errorf("Generate: %d tokens, %v; want %v before any token", len(got.tokens), got.err, want)
		}
		cancel()
		waitQuiet(t, w)
	}
}

// TestAbortStress runs P/D requests with aborts at random moments from
// both sides, and checks that nothing stays reserved.
func TestAbortStress(t *testing.T) {
	s := startPD(t, config.TransferSHM)
	rng := rand.New(rand.NewPCG(1, 2))
	var wg sync.WaitGroup
	for i := range 12 {
		o := owner(fmt.Sprint("t", i%3), fmt.Sprint("s", i), 1)
		p := prompt(1+rng.IntN(40), i) // at most 4 pages with the output: all fit at once
		delay := time.Duration(rng.IntN(40000)) * time.Microsecond
		cancelInstead := rng.IntN(3) == 0
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ch := s.async(t, ctx, ctx, o, p, greedy(20))
			time.Sleep(delay)
			if cancelInstead {
				cancel()
			}
			s.abortBoth(t, o)
			r := <-ch
			if r.reserveErr != nil && code(r.reserveErr) != codes.Aborted {
				t.Errorf("Reserve: %v", r.reserveErr)
			}
		})
	}
	wg.Wait()
	waitQuiet(t, s.prefill, s.decode)
}

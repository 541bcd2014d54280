package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeWorker records the aborts it receives; it fails the first failN.
// Its Abort answers drain (a prefill worker whose stream stopped).
type fakeWorker struct {
	id    string
	failN int
	drain Drain

	mu     sync.Mutex
	calls  int
	aborts []abortCall
}

type abortCall struct {
	owner Owner
	cause string
}

func (w *fakeWorker) ID() string { return w.id }

func (w *fakeWorker) Abort(_ context.Context, owner Owner, cause string) (Drain, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls++
	if w.calls <= w.failN {
		return Drain{}, errors.New("worker unreachable")
	}
	w.aborts = append(w.aborts, abortCall{owner, cause})
	return w.drain, nil
}

// fakeDecode is a fakeWorker that receives KV: it records the drains
// relayed to it, failing the first relayFailN relays.
type fakeDecode struct {
	fakeWorker
	relayFailN int

	relayCalls int
	relays     []relayCall
}

type relayCall struct {
	owner Owner
	drain Drain
}

func (w *fakeDecode) WriterDrained(_ context.Context, owner Owner, d Drain) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.relayCalls++
	if w.relayCalls <= w.relayFailN {
		return errors.New("worker unreachable")
	}
	w.relays = append(w.relays, relayCall{owner, d})
	return nil
}

func (w *fakeDecode) gotRelays() []relayCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]relayCall(nil), w.relays...)
}

func (w *fakeWorker) got() []abortCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]abortCall(nil), w.aborts...)
}

func newTable(t *testing.T, cfg Config) *Table {
	t.Helper()
	tb := NewTable(cfg)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		tb.AbortAll(CauseShutdown)
		_ = tb.Wait(ctx)
	})
	return tb
}

func start(t *testing.T, tb *Table, id string) *Request {
	t.Helper()
	r, err := tb.Start(context.Background(), Info{ID: id, Tenant: "acme", Model: "tiny"})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func wait(t *testing.T, tb *Table) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tb.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// paths are the ways through the state machine to each terminal state.
var paths = map[string][]State{
	"single node completes":   {Admitted, Prefilling, Decoding, Completed},
	"P/D completes":           {Admitted, Reserved, Prefilling, Transferring, Decoding, Completed},
	"P/D ready before ack":    {Admitted, Reserved, Prefilling, Decoding, Completed},
	"both worker full, retry": {Admitted, Prefilling, Admitted, Prefilling, Decoding, Completed},
	"rejected at admission":   {Rejected},
	"rejected after queue":    {Admitted, Rejected},
	"aborted while received":  {Aborted},
	"aborted in queue":        {Admitted, Aborted},
	"aborted reserved":        {Admitted, Reserved, Aborted},
	"aborted prefilling":      {Admitted, Reserved, Prefilling, Aborted},
	"aborted transferring":    {Admitted, Reserved, Prefilling, Transferring, Aborted},
	"aborted decoding":        {Admitted, Prefilling, Decoding, Aborted},
	"failed prefilling":       {Admitted, Reserved, Prefilling, Failed},
	"failed transferring":     {Admitted, Reserved, Prefilling, Transferring, Failed},
	"failed decoding":         {Admitted, Reserved, Prefilling, Transferring, Decoding, Failed},
	"failed at once":          {Failed},
}

func TestEveryPathReachesExactlyOneTerminalState(t *testing.T) {
	for name, path := range paths {
		t.Run(name, func(t *testing.T) {
			var finishes atomic.Int32
			var last Snapshot
			tb := newTable(t, Config{OnFinish: func(s Snapshot) { finishes.Add(1); last = s }})
			r := start(t, tb, "req_1")
			end := path[len(path)-1]
			for _, s := range path[:len(path)-1] {
				if err := r.Advance(s); err != nil {
					t.Fatalf("Advance(%s): %v", s, err)
				}
			}
			if err := r.Finish(end, "why"); err != nil {
				t.Fatalf("Finish(%s): %v", end, err)
			}
			// Every later attempt to end it again is refused.
			for _, again := range []State{Completed, Rejected, Aborted, Failed} {
				if err := r.Finish(again, "again"); !errors.Is(err, ErrFinished) {
					t.Errorf("second Finish(%s) = %v, want ErrFinished", again, err)
				}
			}
			if err := r.Advance(Decoding); !errors.Is(err, ErrFinished) {
				t.Errorf("Advance after the end = %v, want ErrFinished", err)
			}
			wait(t, tb)
			if n := finishes.Load(); n != 1 {
				t.Fatalf("OnFinish called %d times, want 1", n)
			}
			s, ok := tb.Get("req_1")
			if !ok || s.State != end || s.Cause != "why" || last.State != end {
				t.Fatalf("snapshot = %+v (found %v), want state %s cause why", s, ok, end)
			}
			if want := path[max(len(path)-2, 0)]; len(path) > 1 && s.Stage != want {
				t.Errorf("stage = %s, want %s", s.Stage, want)
			}
			if s.Finished.IsZero() || tb.InFlight() != 0 {
				t.Errorf("finished %v, in flight %d", s.Finished, tb.InFlight())
			}
		})
	}
}

func TestConcurrentFinishHasOneWinner(t *testing.T) {
	var finishes atomic.Int32
	tb := newTable(t, Config{OnFinish: func(Snapshot) { finishes.Add(1) }})
	for i := range 50 {
		r := start(t, tb, fmt.Sprintf("req_%d", i))
		if err := r.Advance(Admitted); err != nil {
			t.Fatal(err)
		}
		var wins atomic.Int32
		var wg sync.WaitGroup
		for _, s := range []State{Rejected, Aborted, Failed, Aborted} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if r.Finish(s, "race") == nil {
					wins.Add(1)
				}
			}()
		}
		wg.Wait()
		if wins.Load() != 1 || !r.State().Terminal() {
			t.Fatalf("%d winners, state %s", wins.Load(), r.State())
		}
	}
	wait(t, tb)
	if finishes.Load() != 50 {
		t.Fatalf("OnFinish called %d times, want 50", finishes.Load())
	}
}

// driver plays the gateway's orchestration: it waits for the context and
// finishes the request with the abort cause.
func driver(r *Request) {
	go func() {
		<-r.Context().Done()
		_ = r.Finish(Aborted, r.AbortCause())
	}()
}

func TestAbortReachesEveryWorkerForEachCause(t *testing.T) {
	causes := map[string]func(tb *Table, r *Request, decode *fakeWorker){
		CauseClientDisconnect: func(_ *Table, r *Request, _ *fakeWorker) { r.Abort(CauseClientDisconnect) },
		CauseDeadline:         nil, // the deadline fires by itself
		CauseWorkerLost: func(tb *Table, _ *Request, decode *fakeWorker) {
			if n := tb.AbortWorker(decode.id, CauseWorkerLost); n != 1 {
				panic(fmt.Sprintf("AbortWorker aborted %d requests", n))
			}
		},
		CauseAdmin: func(tb *Table, r *Request, _ *fakeWorker) {
			if err := tb.Abort(r.ID(), CauseAdmin); err != nil {
				panic(err)
			}
		},
		CauseQuota:    func(_ *Table, r *Request, _ *fakeWorker) { r.Abort(CauseQuota) },
		CauseShutdown: func(tb *Table, _ *Request, _ *fakeWorker) { tb.AbortAll(CauseShutdown) },
	}
	for cause, trigger := range causes {
		for _, stage := range []State{Reserved, Prefilling, Transferring, Decoding} {
			t.Run(cause+"/"+stage.String(), func(t *testing.T) {
				tb := newTable(t, Config{})
				info := Info{ID: "req_abc", Tenant: "acme", Model: "tiny"}
				if trigger == nil {
					info.Deadline = time.Now().Add(20 * time.Millisecond)
				}
				r, err := tb.Start(context.Background(), info)
				if err != nil {
					t.Fatal(err)
				}
				prefill, decode := &fakeWorker{id: "p1"}, &fakeWorker{id: "d1", failN: 2}
				bystander := &fakeWorker{id: "d2"}
				other := start(t, tb, "req_other")
				other.Involve(bystander, "decode")
				driver(other)

				_ = r.Advance(Admitted)
				r.Involve(decode, "decode")
				r.Involve(decode, "decode") // once only
				for _, s := range []State{Reserved, Prefilling, Transferring, Decoding} {
					if s == Prefilling {
						r.Involve(prefill, "prefill")
					}
					if err := r.Advance(s); err != nil {
						t.Fatal(err)
					}
					if s == stage {
						break
					}
				}
				driver(r)
				if trigger != nil {
					trigger(tb, r, decode)
				}
				<-r.Done()
				if cause != CauseShutdown {
					_ = other.Finish(Failed, "cleanup")
				}
				wait(t, tb)

				s, _ := tb.Get(r.ID())
				if s.State != Aborted || s.Cause != cause || s.Stage != stage {
					t.Fatalf("request ended %s/%s at %s, want aborted/%s at %s", s.State, s.Cause, s.Stage, cause, stage)
				}
				want := []*fakeWorker{decode}
				if stage >= Prefilling {
					want = append(want, prefill)
				}
				for _, w := range want {
					got := w.got()
					if len(got) != 1 || got[0].cause != cause || got[0].owner != (Owner{Tenant: "acme", RequestID: "req_abc", Epoch: Epoch}) {
						t.Errorf("worker %s got aborts %+v, want one for req_abc with cause %s", w.id, got, cause)
					}
				}
				if stage < Prefilling && len(prefill.got()) != 0 {
					t.Errorf("uninvolved prefill got %+v", prefill.got())
				}
				for _, a := range bystander.got() {
					if a.owner.RequestID == "req_abc" {
						t.Errorf("bystander got an abort for req_abc")
					}
				}
				for _, w := range s.Workers {
					if !w.AbortSent {
						t.Errorf("snapshot says abort not sent to %s: %+v", w.ID, w)
					}
				}
			})
		}
	}
}

// TestDrainRelay: when prefill's Abort answers with a drained transfer,
// the fan-out relays it to the request's decode worker (retried), and
// only there; an Abort without a drain relays nothing, and a decode-only
// request (no writer) neither.
func TestDrainRelay(t *testing.T) {
	drain := Drain{TransferID: "00112233445566778899aabbccddeeff", Epoch: Epoch}
	for _, c := range []struct {
		name      string
		drain     Drain
		prefill   bool
		want      int
		wantState State
	}{
		{"prefill drained a transfer", drain, true, 1, Failed},
		{"prefill had no transfer", Drain{}, true, 0, Aborted},
		{"no prefill involved", drain, false, 0, Aborted},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := newTable(t, Config{})
			r := start(t, tb, "req_d")
			decode := &fakeDecode{fakeWorker: fakeWorker{id: "d1", failN: 1}, relayFailN: 2}
			prefill := &fakeWorker{id: "p1", drain: c.drain}
			_ = r.Advance(Admitted)
			r.Involve(decode, "decode")
			_ = r.Advance(Reserved)
			if c.prefill {
				r.Involve(prefill, "prefill")
				_ = r.Advance(Prefilling)
			}
			if err := r.Finish(c.wantState, "x"); err != nil {
				t.Fatal(err)
			}
			wait(t, tb) // the relay is part of the fan-out
			got := decode.gotRelays()
			if len(got) != c.want {
				t.Fatalf("decode got relays %+v, want %d", got, c.want)
			}
			for _, g := range got {
				if g.drain != c.drain || g.owner != r.Owner() {
					t.Errorf("relay %+v, want %+v for %+v", g, c.drain, r.Owner())
				}
			}
			for _, w := range r.Snapshot().Workers {
				if want := w.ID == decode.id && c.want > 0; w.DrainRelayed != want {
					t.Errorf("snapshot of %s: drain relayed %v, want %v", w.ID, w.DrainRelayed, want)
				}
			}
		})
	}
}

func TestCompletionAbortsOnlyAfterStop(t *testing.T) {
	for _, cause := range []string{"", CauseStop} {
		tb := newTable(t, Config{})
		r := start(t, tb, "req_"+cause)
		w := &fakeWorker{id: "w1"}
		_ = r.Advance(Admitted)
		r.Involve(w, "both")
		_ = r.Advance(Prefilling)
		_ = r.Advance(Decoding)
		r.SetUsage(7, 3)
		if err := r.Finish(Completed, cause); err != nil {
			t.Fatal(err)
		}
		wait(t, tb)
		got := w.got()
		if cause == "" && len(got) != 0 {
			t.Errorf("plain completion sent aborts %+v", got)
		}
		if cause == CauseStop && (len(got) != 1 || got[0].cause != CauseStop) {
			t.Errorf("stop completion sent aborts %+v, want one with cause stop", got)
		}
		if s := r.Snapshot(); s.PromptTokens != 7 || s.CompletionTokens != 3 {
			t.Errorf("usage %d/%d, want 7/3", s.PromptTokens, s.CompletionTokens)
		}
	}
}

func TestIllegalTransitionsAreRefusedAndFail(t *testing.T) {
	cases := []struct {
		name string
		path []State
		bad  State
	}{
		{"skip admission", nil, Decoding},
		{"back to admitted", []State{Admitted, Reserved}, Admitted},
		{"back to admitted from transferring", []State{Admitted, Reserved, Prefilling, Transferring}, Admitted},
		{"back to admitted from decoding", []State{Admitted, Prefilling, Decoding}, Admitted},
		{"complete before decoding", []State{Admitted, Reserved, Prefilling}, Completed},
		{"reject after reserving", []State{Admitted, Reserved}, Rejected},
		{"received again", []State{Admitted}, Received},
		{"undefined state", []State{Admitted}, State(42)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tb := newTable(t, Config{})
			r := start(t, tb, "req_x")
			w := &fakeWorker{id: "w1"}
			r.Involve(w, "both")
			for _, s := range c.path {
				if err := r.Advance(s); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			if c.bad.Terminal() {
				err = r.Finish(c.bad, "x")
			} else {
				err = r.Advance(c.bad)
			}
			if !errors.Is(err, ErrIllegalTransition) {
				t.Fatalf("got %v, want ErrIllegalTransition", err)
			}
			wait(t, tb)
			s := r.Snapshot()
			if s.State != Failed || s.Cause != CauseInternal {
				t.Fatalf("after an illegal transition: %s/%s, want failed/internal", s.State, s.Cause)
			}
			if got := w.got(); len(got) != 1 || got[0].cause != CauseInternal {
				t.Errorf("worker got %+v, want one abort with cause internal", got)
			}
		})
	}
}

func TestTableAbortAndHistory(t *testing.T) {
	tb := newTable(t, Config{History: 3})
	if err := tb.Abort("req_none", CauseAdmin); !errors.Is(err, ErrNotFound) {
		t.Errorf("Abort(unknown) = %v, want ErrNotFound", err)
	}
	for i := range 5 {
		r := start(t, tb, fmt.Sprintf("req_%d", i))
		if err := r.Finish(Rejected, "rate_limit_exceeded"); err != nil {
			t.Fatal(err)
		}
	}
	if err := tb.Abort("req_4", CauseAdmin); !errors.Is(err, ErrFinished) {
		t.Errorf("Abort(finished) = %v, want ErrFinished", err)
	}
	live, err := tb.Start(context.Background(), Info{ID: "req_live"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = live.Finish(Aborted, CauseShutdown) }()
	if _, err := tb.Start(context.Background(), Info{ID: "req_live"}); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate Start = %v, want ErrExists", err)
	}
	list := tb.List()
	if len(list) != 4 {
		t.Fatalf("List has %d entries, want 1 in flight + 3 history", len(list))
	}
	for _, id := range []string{"req_0", "req_1"} {
		if _, ok := tb.Get(id); ok {
			t.Errorf("%s still in the history beyond its bound", id)
		}
	}
	for _, id := range []string{"req_2", "req_3", "req_4", "req_live"} {
		if _, ok := tb.Get(id); !ok {
			t.Errorf("%s missing", id)
		}
	}
}

func TestStateNames(t *testing.T) {
	want := "received admitted reserved prefilling transferring decoding completed rejected aborted failed"
	got := ""
	for s := Received; s <= Failed; s++ {
		if got != "" {
			got += " "
		}
		got += s.String()
	}
	if got != want || State(0).String() != "state(0)" {
		t.Fatalf("names %q", got)
	}
}

// TestPlacedWorkers: an involved worker is listed unplaced until Placed
// marks it, Placed(false) (a refused Generate) unmarks it, a worker not
// involved is ignored, and an unplaced worker still receives the abort.
func TestPlacedWorkers(t *testing.T) {
	tb := newTable(t, Config{})
	r := start(t, tb, "req_placed")
	driver(r)
	decode, other := &fakeWorker{id: "d1"}, &fakeWorker{id: "d2"}
	placed := func() map[string]bool {
		out := map[string]bool{}
		for _, w := range r.Snapshot().Workers {
			out[w.ID] = w.Placed
		}
		return out
	}
	r.Involve(decode, "decode")
	r.Involve(other, "decode")
	r.Placed("nobody", true)
	if got := placed(); len(got) != 2 || got["d1"] || got["d2"] {
		t.Fatalf("involved only: %v", got)
	}
	r.Placed("d1", true)
	if got := placed(); !got["d1"] || got["d2"] {
		t.Fatalf("d1 placed: %v", got)
	}
	r.Placed("d1", false)
	if got := placed(); got["d1"] {
		t.Fatalf("d1 unplaced: %v", got)
	}
	if err := tb.Abort(r.ID(), CauseAdmin); err != nil {
		t.Fatal(err)
	}
	wait(t, tb)
	if len(decode.got()) != 1 || len(other.got()) != 1 {
		t.Fatalf("aborts: d1 %v, d2 %v; want one each", decode.got(), other.got())
	}
}

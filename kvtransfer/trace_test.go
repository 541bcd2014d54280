package kvtransfer

import (
	"context"
	"errors"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/warden-ai/warden/internal/faults"
)

// observed is one OnTransfer call and its end.
type observed struct {
	ticket *Ticket
	sender trace.SpanContext
	ends   int
	done   Completion
	err    error
}

// observer records OnTransfer calls.
type observer struct {
	mu  sync.Mutex
	got []*observed
}

func (o *observer) hook(t *Ticket, sender trace.SpanContext) func(Completion, error) {
	rec := &observed{ticket: t, sender: sender}
	o.mu.Lock()
	o.got = append(o.got, rec)
	o.mu.Unlock()
	return func(c Completion, err error) {
		o.mu.Lock()
		defer o.mu.Unlock()
		rec.ends++
		rec.done, rec.err = c, err
	}
}

func (o *observer) all() []observed {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]observed, len(o.got))
	for i, r := range o.got {
		out[i] = *r
	}
	return out
}

// spanCtx returns a context carrying a sampled span context with the
// given trace and span ID bytes.
func spanCtx(traceByte, spanByte byte) (context.Context, trace.SpanContext) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{traceByte, 1}, SpanID: trace.SpanID{spanByte, 2}, TraceFlags: trace.FlagsSampled,
	})
	return trace.ContextWithSpanContext(context.Background(), sc), sc
}

// TestTraceContextReachesReceiver: the span context in Open's context
// arrives, as a remote parent, at the receiver's OnTransfer hook of that
// very transfer — on a new and on a reused connection, on both backends —
// and the hook's end reports the verdict once.
func TestTraceContextReachesReceiver(t *testing.T) {
	for _, backend := range []Backend{TCP, SHM} {
		t.Run(string(backend), func(t *testing.T) {
			var obs observer
			h := newHarness(t, backend, 16, 1024, harnessOpts{onTransfer: obs.hook})
			var want []trace.SpanContext
			for i := range 3 {
				tk := h.ticket(8, 4, 0)
				ctx, sc := spanCtx(byte(10+i), byte(20+i))
				if i == 2 {
					ctx, sc = context.Background(), trace.SpanContext{} // no trace
				}
				want = append(want, sc)
				if _, err := h.send.Send(ctx, tk, slicePages(h.randomPages(2)), 8, 5); err != nil {
					t.Fatalf("transfer %d: %v", i, err)
				}
				if o := h.outcome(); o.err != nil {
					t.Fatalf("transfer %d: %v", i, o.err)
				}
			}
			if s := h.send.Stats(); s.Dials != 1 {
				t.Fatalf("%d dials: the later transfers did not reuse the connection", s.Dials)
			}
			got := obs.all()
			if len(got) != len(want) {
				t.Fatalf("%d OnTransfer calls, want %d", len(got), len(want))
			}
			for i, g := range got {
				w := want[i]
				switch {
				case w.IsValid() && (g.sender.TraceID() != w.TraceID() || g.sender.SpanID() != w.SpanID() || !g.sender.IsSampled() || !g.sender.IsRemote()):
					t.Errorf("transfer %d: receiver saw %v, sender had %v", i, g.sender, w)
				case !w.IsValid() && g.sender.IsValid():
					t.Errorf("transfer %d: receiver saw %v without a sender trace", i, g.sender)
				}
				if g.ends != 1 || g.err != nil || g.done.Pages != 2 || g.done.Tokens != 8 || g.done.FirstToken != 5 {
					t.Errorf("transfer %d: end called %d times with %+v, %v", i, g.ends, g.done, g.err)
				}
			}
		})
	}
}

// TestTraceHookSeesFailure: a transfer that fails verification ends its
// observation with the error.
func TestTraceHookSeesFailure(t *testing.T) {
	var obs observer
	inj := faults.New(faults.Rule{Point: faults.SendFrame, Action: faults.Corrupt,
		Match: func(e *faults.Event) bool { return e.Frame.Type == "DATA" && e.Page == 1 }})
	h := newHarness(t, TCP, 8, 1024, harnessOpts{onTransfer: obs.hook, faults: inj})
	tk := h.ticket(8, 4, 0)
	ctx, sc := spanCtx(1, 2)
	if _, err := h.send.Send(ctx, tk, slicePages(h.randomPages(2)), 8, 0); !errors.Is(err, ErrChecksum) {
		t.Fatalf("Send: %v, want ErrChecksum", err)
	}
	h.outcome()
	got := obs.all()
	if len(got) != 1 || got[0].ends != 1 || !errors.Is(got[0].err, ErrChecksum) || got[0].sender.TraceID() != sc.TraceID() {
		t.Fatalf("observations %+v", got)
	}
	if got[0].ticket.TransferID != tk.TransferID {
		t.Errorf("hook saw transfer %v, want %v", got[0].ticket.TransferID, tk.TransferID)
	}
}

package worker

import (
	"context"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
)

// refOf is the AdapterRef of a (nil: the base model).
func refOf(a *testAdapter) *controlpb.AdapterRef {
	if a == nil {
		return nil
	}
	return a.ref
}

// ownerUnder is the owner of tenant's request req under a (nil: the base
// model).
func ownerUnder(tenant, req string, a *testAdapter) *controlpb.Owner {
	if a == nil {
		return owner(tenant, req, 1)
	}
	return a.owner(tenant, req)
}

// TestAdapterIsPartOfTheOwner (DESIGN I8a) over tcp and shm: decode
// reserves for a request under adapter A. The same tenant and request
// under adapter B or the base model is another owner everywhere: prefill
// refuses the ticket, decode refuses the Generate (the reservation
// survives both), and a prefill that computed under B with a ticket
// doctored to say B (transfer ID and token intact) is refused by decode's
// transfer handshake: the request fails with no token and no page is
// written.
func TestAdapterIsPartOfTheOwner(t *testing.T) {
	for _, backend := range []config.TransferBackend{config.TransferTCP, config.TransferSHM} {
		t.Run(string(backend), func(t *testing.T) {
			s := startPD(t, backend)
			bg := context.Background()
			dec, pre := s.decode.client, s.prefill.client
			a, b := newTestAdapter(t, 1), newTestAdapter(t, 2)
			for _, ad := range []*testAdapter{a, b} {
				for _, c := range []controlpb.WorkerClient{dec, pre} {
					if _, err := ad.load(c, false); err != nil {
						t.Fatal(err)
					}
				}
			}
			p := prompt(2*pageTokens+3, 5)
			underA := a.owner("acme", "r1")
			res, err := dec.Reserve(bg, &controlpb.ReserveRequest{Owner: underA, PromptTokens: int64(len(p)), TotalTokens: int64(len(p)) + 4, Adapter: a.ref})
			if err != nil {
				t.Fatal(err)
			}
			if res.GetTicket().GetOwner().GetAdapter() != a.ref.Hash {
				t.Fatalf("ticket owner %v, want adapter A", res.GetTicket().GetOwner())
			}
			for _, other := range []*testAdapter{b, nil} {
				o := ownerUnder("acme", "r1", other)
				_, err := pre.Prefill(bg, &controlpb.PrefillRequest{Owner: o, Prompt: p, Sampling: greedy(4), Ticket: res.GetTicket(), Adapter: refOf(other)})
				if code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "ticket is for") {
					t.Errorf("Prefill under adapter %v with adapter A's ticket: %v", other != nil, err)
				}
				got := generate(t, dec, &controlpb.GenerateRequest{Owner: o, Prompt: p, Sampling: greedy(4), Ticket: res.GetTicket(), Adapter: refOf(other)})
				if code(got.err) != codes.InvalidArgument || !strings.Contains(got.err.Error(), "reserved under adapter") || len(got.tokens) > 0 {
					t.Errorf("Generate under adapter %v of adapter A's reservation: %d tokens, %v", other != nil, len(got.tokens), got.err)
				}
			}
			if st := s.prefill.rt.Pool.Stats(); st.Free != st.Total {
				t.Errorf("prefill after refused Prefills: %+v", st)
			}

			// Prefill computes under B for a ticket doctored to say B.
			underB := b.owner("acme", "r1")
			doctored := proto.Clone(res.GetTicket()).(*controlpb.Ticket)
			doctored.Owner = underB
			var prefillErr error
			var wg sync.WaitGroup
			wg.Go(func() {
				_, prefillErr = pre.Prefill(bg, &controlpb.PrefillRequest{Owner: underB, Prompt: p, Sampling: greedy(4), Ticket: doctored, Adapter: b.ref})
			})
			got := generate(t, dec, &controlpb.GenerateRequest{Owner: underA, Prompt: p, Sampling: greedy(4), Ticket: res.GetTicket(), Adapter: a.ref})
			wg.Wait()
			if code(got.err) != codes.DataLoss || !strings.Contains(got.err.Error(), "owner mismatch") || len(got.tokens) > 0 || got.ready >= 0 {
				t.Errorf("decode after a prefill under another adapter: ready %d, %d tokens, %v; want DataLoss (owner mismatch) and nothing",
					got.ready, len(got.tokens), got.err)
			}
			if prefillErr == nil || !strings.Contains(prefillErr.Error(), "owner mismatch") {
				t.Errorf("Prefill under adapter B into adapter A's reservation: %v, want an owner mismatch", prefillErr)
			}
			s.abortBoth(t, underA)
			waitQuiet(t, s.prefill, s.decode)
		})
	}
}

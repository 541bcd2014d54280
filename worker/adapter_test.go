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

// Two LoRA adapters' content hashes (the form of lora.Hash).
var (
	adapterA = strings.Repeat("a", 64)
	adapterB = strings.Repeat("b", 64)
)

func adapterOwner(tenant, req, adapter string) *controlpb.Owner {
	o := owner(tenant, req, 1)
	o.Adapter = adapter
	return o
}

// TestAdapterIsPartOfTheOwner (DESIGN I8a) over tcp and shm: decode
// reserves for a request under adapter A. The same tenant and request
// under adapter B or the base model is another owner everywhere: prefill
// refuses the ticket, decode refuses the Generate (the reservation
// survives both), and a prefill that computed on the base model with a
// ticket doctored to say so (transfer ID and token intact) is refused by
// decode's transfer handshake: the request fails with no token and no
// page is written.
func TestAdapterIsPartOfTheOwner(t *testing.T) {
	for _, backend := range []config.TransferBackend{config.TransferTCP, config.TransferSHM} {
		t.Run(string(backend), func(t *testing.T) {
			s := startPD(t, backend)
			bg := context.Background()
			dec, pre := s.decode.client, s.prefill.client
			p := prompt(2*pageTokens+3, 5)
			underA := adapterOwner("acme", "r1", adapterA)
			res, err := dec.Reserve(bg, &controlpb.ReserveRequest{Owner: underA, PromptTokens: int64(len(p)), TotalTokens: int64(len(p)) + 4})
			if err != nil {
				t.Fatal(err)
			}
			if res.GetTicket().GetOwner().GetAdapter() != adapterA {
				t.Fatalf("ticket owner %v, want adapter A", res.GetTicket().GetOwner())
			}
			for _, other := range []string{adapterB, ""} {
				o := adapterOwner("acme", "r1", other)
				_, err := pre.Prefill(bg, &controlpb.PrefillRequest{Owner: o, Prompt: p, Sampling: greedy(4), Ticket: res.GetTicket()})
				if code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "ticket is for") {
					t.Errorf("Prefill under adapter %q with adapter A's ticket: %v", other, err)
				}
				got := generate(t, dec, &controlpb.GenerateRequest{Owner: o, Prompt: p, Sampling: greedy(4), Ticket: res.GetTicket()})
				if code(got.err) != codes.InvalidArgument || !strings.Contains(got.err.Error(), "reserved under adapter") || len(got.tokens) > 0 {
					t.Errorf("Generate under adapter %q of adapter A's reservation: %d tokens, %v", other, len(got.tokens), got.err)
				}
			}
			if st := s.prefill.rt.Pool.Stats(); st.Free != st.Total {
				t.Errorf("prefill after refused Prefills: %+v", st)
			}

			// Prefill computes on the base model for a ticket doctored to
			// say so.
			base := adapterOwner("acme", "r1", "")
			doctored := proto.Clone(res.GetTicket()).(*controlpb.Ticket)
			doctored.Owner = base
			var prefillErr error
			var wg sync.WaitGroup
			wg.Go(func() {
				_, prefillErr = pre.Prefill(bg, &controlpb.PrefillRequest{Owner: base, Prompt: p, Sampling: greedy(4), Ticket: doctored})
			})
			got := generate(t, dec, &controlpb.GenerateRequest{Owner: underA, Prompt: p, Sampling: greedy(4), Ticket: res.GetTicket()})
			wg.Wait()
			if code(got.err) != codes.DataLoss || !strings.Contains(got.err.Error(), "owner mismatch") || len(got.tokens) > 0 || got.ready >= 0 {
				t.Errorf("decode after a prefill under another adapter: ready %d, %d tokens, %v; want DataLoss (owner mismatch) and nothing",
					got.ready, len(got.tokens), got.err)
			}
			if prefillErr == nil || !strings.Contains(prefillErr.Error(), "owner mismatch") {
				t.Errorf("Prefill on the base model into adapter A's reservation: %v, want an owner mismatch", prefillErr)
			}
			s.abortBoth(t, underA)
			waitQuiet(t, s.prefill, s.decode)
		})
	}
}

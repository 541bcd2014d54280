package worker

import (
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/kvtransfer"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/kvpool"
)

// maxIDLen bounds tenant and request IDs (they tag pages and appear in
// logs and frames).
const maxIDLen = 256

// ownerFrom checks and converts a request's owner.
func ownerFrom(o *controlpb.Owner) (kvpool.Owner, error) {
	switch {
	case o == nil:
		return kvpool.Owner{}, invalid("owner is required")
	case o.GetTenant() == "" || o.GetRequestId() == "":
		return kvpool.Owner{}, invalid("owner needs a tenant and a request_id")
	case len(o.GetTenant()) > maxIDLen || len(o.GetRequestId()) > maxIDLen:
		return kvpool.Owner{}, invalid("owner tenant and request_id are limited to %d bytes", maxIDLen)
	case o.GetAdapter() != "" && !lora.ValidHash(o.GetAdapter()):
		return kvpool.Owner{}, invalid("owner adapter must be an adapter's content hash (64 lowercase hex digits)")
	}
	return kvpool.Owner{Tenant: o.GetTenant(), Request: o.GetRequestId(), Epoch: o.GetEpoch(), Adapter: o.GetAdapter()}, nil
}

// samplingFrom checks and converts sampling parameters.
func samplingFrom(p *controlpb.SamplingParams) (engine.Sampling, error) {
	s := engine.Sampling{
		Temperature: p.GetTemperature(),
		TopP:        p.GetTopP(),
		TopK:        int(p.GetTopK()),
		Seed:        p.GetSeed(),
		MaxTokens:   int(p.GetMaxTokens()),
		StopTokens:  p.GetStopTokenIds(),
		IgnoreEOS:   p.GetIgnoreEos(),
		Logprobs:    p.GetLogprobs(),
		TopLogprobs: int(p.GetTopLogprobs()),

		PresencePenalty:   p.GetPresencePenalty(),
		FrequencyPenalty:  p.GetFrequencyPenalty(),
		RepetitionPenalty: p.GetRepetitionPenalty(),
		MinP:              p.GetMinP(),
	}
	if lb := p.GetLogitBias(); len(lb) > 0 {
		if len(lb) > engine.MaxLogitBias {
			return engine.Sampling{}, invalid("sampling: logit_bias has %d entries, at most %d", len(lb), engine.MaxLogitBias)
		}
		s.LogitBias = make([]engine.Bias, len(lb))
		for i, b := range lb {
			s.LogitBias[i] = engine.Bias{Token: b.GetToken(), Bias: b.GetBias()}
		}
	}
	if p != nil && p.PromptLogprobs != nil {
		s.PromptLogprobs, s.PromptTopLogprobs = true, int(p.GetPromptLogprobs())
	}
	if p != nil && p.Speculative != nil {
		on := p.GetSpeculative()
		s.Speculate = &on
	}
	if err := s.Validate(); err != nil {
		return engine.Sampling{}, invalid("sampling: %v", err)
	}
	return s, nil
}

// logprobsToProto is one token's logprobs on the control plane; nil for
// none.
func logprobsToProto(lp *engine.Logprobs) *controlpb.LogprobsToken {
	if lp == nil {
		return nil
	}
	out := &controlpb.LogprobsToken{Logprob: lp.Logprob, Rank: int32(lp.Rank),
		TopIds: make([]int32, len(lp.Top)), TopLogprobs: make([]float64, len(lp.Top))}
	for i, t := range lp.Top {
		out.TopIds[i], out.TopLogprobs[i] = t.Token, t.Logprob
	}
	return out
}

// promptLogprobsToProto is a prompt's logprobs (engine.EventPromptLogprobs)
// on the control plane.
func promptLogprobsToProto(lps []engine.Logprobs) []*controlpb.LogprobsToken {
	out := make([]*controlpb.LogprobsToken, len(lps))
	for i := range lps {
		out[i] = logprobsToProto(&lps[i])
	}
	return out
}

// checkPrompt rejects an empty prompt; the engine checks the token IDs.
func checkPrompt(prompt []int32) error {
	if len(prompt) == 0 {
		return invalid("prompt is empty")
	}
	return nil
}

// ticketToProto is the ticket as Reserve returns it.
func ticketToProto(t *kvtransfer.Ticket, workerID string) *controlpb.Ticket {
	return &controlpb.Ticket{
		TransferId:      t.TransferID.String(),
		Owner:           &controlpb.Owner{Tenant: t.Owner.Tenant, RequestId: t.Owner.Request, Epoch: t.Owner.Epoch, Adapter: t.Owner.Adapter},
		Pages:           t.Pages,
		PageTokens:      t.PageTokens,
		PromptTokens:    t.PromptTokens,
		AuthToken:       t.AuthToken,
		TransferAddr:    t.Addr,
		TransferBackend: string(t.Backend),
		ShmPath:         t.ShmPath,
		PageBytes:       t.PageBytes,
		DecodeWorkerId:  workerID,
		HeldPages:       int32(t.HeldPages),
	}
}

// ticketFrom checks and converts a ticket a Prefill carries.
func ticketFrom(p *controlpb.Ticket) (*kvtransfer.Ticket, error) {
	if p == nil {
		return nil, invalid("ticket is required")
	}
	id, err := kvtransfer.ParseTransferID(p.GetTransferId())
	if err != nil {
		return nil, invalid("ticket: %v", err)
	}
	o := p.GetOwner()
	t := &kvtransfer.Ticket{
		TransferID:   id,
		Owner:        kvtransfer.Owner{Tenant: o.GetTenant(), Request: o.GetRequestId(), Epoch: o.GetEpoch(), Adapter: o.GetAdapter()},
		Pages:        p.GetPages(),
		PageTokens:   p.GetPageTokens(),
		PromptTokens: p.GetPromptTokens(),
		PageBytes:    p.GetPageBytes(),
		AuthToken:    p.GetAuthToken(),
		Addr:         p.GetTransferAddr(),
		Backend:      kvtransfer.Backend(p.GetTransferBackend()),
		ShmPath:      p.GetShmPath(),
		HeldPages:    int(p.GetHeldPages()),
	}
	if err := t.Validate(); err != nil {
		return nil, invalid("ticket: %v", err)
	}
	if t.Addr == "" {
		return nil, invalid("ticket: transfer_addr is empty")
	}
	return t, nil
}

package gateway

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/tokenizer"
)

// tokenLogprobs turns the logprobs a worker sent for ids into the API's
// form, with each token's text. first, when set, is the P/D first
// token's entry (from the Prefill response): then lps holds one entry
// fewer than ids, ids[0]'s being first.
func tokenLogprobs(tok *tokenizer.Tokenizer, ids []int32, lps []*controlpb.LogprobsToken, first *controlpb.LogprobsToken, top int) ([]api.TokenLogprob, error) {
	if first != nil {
		lps = append([]*controlpb.LogprobsToken{first}, lps...)
	}
	if len(lps) != len(ids) {
		return nil, fmt.Errorf("%d logprobs for %d tokens", len(lps), len(ids))
	}
	out := make([]api.TokenLogprob, len(ids))
	for i, lp := range lps {
		text, b, err := tokenText(tok, ids[i])
		if err != nil {
			return nil, err
		}
		tids, tlps := lp.GetTopIds(), lp.GetTopLogprobs()
		if len(tids) != len(tlps) || len(tids) > top || !validLogprob(lp.GetLogprob()) {
			return nil, fmt.Errorf("token %d: logprob %v with %d alternatives of %d logprobs (asked for %d)",
				ids[i], lp.GetLogprob(), len(tids), len(tlps), top)
		}
		out[i] = api.TokenLogprob{Token: text, Bytes: b, Logprob: lp.GetLogprob(), Top: make([]api.TopLogprob, len(tids))}
		for j, id := range tids {
			text, b, err := tokenText(tok, id)
			if err != nil {
				return nil, err
			}
			if !validLogprob(tlps[j]) {
				return nil, fmt.Errorf("token %d: alternative %d has logprob %v", ids[i], id, tlps[j])
			}
			out[i].Top[j] = api.TopLogprob{Token: text, Bytes: b, Logprob: tlps[j]}
		}
	}
	return out, nil
}

// promptTokens turns the prompt logprobs a worker sent (entry i for
// prompt token i+1) into the API's form, with each token's text.
func promptTokens(tok *tokenizer.Tokenizer, prompt []int32, lps []*controlpb.LogprobsToken, top int) ([]api.PromptToken, error) {
	if len(lps) != len(prompt)-1 {
		return nil, fmt.Errorf("%d logprobs for a prompt of %d tokens", len(lps), len(prompt))
	}
	out := make([]api.PromptToken, len(prompt))
	for i, id := range prompt {
		text, b, err := tokenText(tok, id)
		if err != nil {
			return nil, err
		}
		out[i] = api.PromptToken{ID: id, Token: text, Bytes: b, Special: tok.IsSpecial(id)}
		if i == 0 {
			continue
		}
		lp := lps[i-1]
		tids, tlps := lp.GetTopIds(), lp.GetTopLogprobs()
		if len(tids) != len(tlps) || len(tids) > top || !validLogprob(lp.GetLogprob()) || lp.GetRank() < 1 {
			return nil, fmt.Errorf("prompt token %d: logprob %v, rank %d, %d alternatives of %d logprobs (asked for %d)",
				i, lp.GetLogprob(), lp.GetRank(), len(tids), len(tlps), top)
		}
		out[i].Logprob, out[i].Rank = lp.GetLogprob(), int(lp.GetRank())
		for j, alt := range tids {
			text, b, err := tokenText(tok, alt)
			if err != nil {
				return nil, err
			}
			if !validLogprob(tlps[j]) {
				return nil, fmt.Errorf("prompt token %d: alternative %d has logprob %v", i, alt, tlps[j])
			}
			out[i].Top = append(out[i].Top, api.PromptAlternative{ID: alt, Token: text, Bytes: b, Logprob: tlps[j]})
		}
	}
	return out, nil
}

// validLogprob: finite (the worker reports -9999 for impossible tokens)
// and at most 0.
func validLogprob(v float64) bool { return v <= 0 && v >= -1e300 }

// tokenText is a token's text for logprobs, and its bytes. A token that
// is not valid UTF-8 on its own (part of a multi-byte character) is
// written "bytes:\xNN..." as OpenAI writes it.
func tokenText(tok *tokenizer.Tokenizer, id int32) (string, []byte, error) {
	b, err := tok.TokenBytes(id)
	if err != nil {
		return "", nil, err
	}
	if utf8.Valid(b) {
		return string(b), b, nil
	}
	var s strings.Builder
	s.WriteString("bytes:")
	for _, c := range b {
		fmt.Fprintf(&s, "\\x%02x", c)
	}
	return s.String(), b, nil
}

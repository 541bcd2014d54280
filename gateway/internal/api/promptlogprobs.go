package api

import "strconv"

// PromptToken is one prompt token with its log probability given the
// tokens before it (vLLM's prompt_logprobs, OpenAI's echo with logprobs).
type PromptToken struct {
	// ID is the token, Token its text (as TokenLogprob.Token) and Bytes
	// its raw bytes.
	ID    int32
	Token string
	Bytes []byte
	// Special marks a special token (a BOS the tokenizer added): it is not
	// part of the prompt's text, so it takes no room in an echo's
	// text_offset.
	Special bool
	// Logprob and Rank (how many tokens are at least as likely, itself
	// included) are unset for the prompt's first token, which nothing
	// predicts.
	Logprob float64
	Rank    int
	// Top lists the most likely tokens at the position, most likely
	// first; the i-th has rank i+1.
	Top []PromptAlternative
}

// PromptAlternative is one of PromptToken.Top.
type PromptAlternative struct {
	ID      int32
	Token   string
	Bytes   []byte
	Logprob float64
}

// PromptScoring says whether the request needs its prompt's logprobs and
// with how many alternatives per token: prompt_logprobs, or a completion's
// echo with logprobs (the logprobs' integer), the larger of the two.
func (r *GenerateRequest) PromptScoring() (top int, ok bool) {
	if r.PromptLogprobs != nil {
		top, ok = *r.PromptLogprobs, true
	}
	if r.Echo && r.Logprobs {
		top, ok = max(top, r.TopLogprobs), true
	}
	return top, ok
}

// promptLogprobs reads vLLM's prompt_logprobs (an integer 0..MaxTopLogprobs:
// the alternatives per prompt token; vLLM's -1, the whole vocabulary, is
// refused as too large). Like vLLM it refuses prompt_logprobs above 0
// when streaming, and streams none at 0.
func (d *decoder) promptLogprobs() *Error {
	if raw := d.f.take("prompt_logprobs"); raw != nil {
		k, e := decodeIntIn(raw, "prompt_logprobs", 0, MaxTopLogprobs)
		if e != nil {
			return e
		}
		if d.r.Stream && k > 0 {
			return InvalidRequest("prompt_logprobs", CodeUnsupportedValue,
				"`prompt_logprobs` are not available when `stream=True`.")
		}
		if !d.r.Stream {
			n := int(k)
			d.r.PromptLogprobs = &n
		}
	}
	return nil
}

// --- wire shapes ---

// wirePromptEntry is one token's entry in a prompt_logprobs map, as vLLM
// writes it.
type wirePromptEntry struct {
	Logprob      float64 `json:"logprob"`
	Rank         int     `json:"rank"`
	DecodedToken string  `json:"decoded_token"`
}

// wirePromptLogprobs renders prompt_logprobs as vLLM does: null for the
// first prompt token, then for each later one a map from token id to its
// entry, holding the prompt token and the top alternatives (at most
// top); nil (absent) when not asked for. Every choice of n > 1 carries
// the same list, as in vLLM.
func wirePromptLogprobs(asked *int, pts []PromptToken) []map[string]wirePromptEntry {
	if asked == nil {
		return nil
	}
	out := make([]map[string]wirePromptEntry, len(pts))
	for i, pt := range pts {
		if i == 0 {
			continue // null
		}
		m := map[string]wirePromptEntry{strconv.Itoa(int(pt.ID)): {Logprob: pt.Logprob, Rank: pt.Rank, DecodedToken: pt.Token}}
		for j, alt := range pt.Top[:min(len(pt.Top), *asked)] {
			if key := strconv.Itoa(int(alt.ID)); alt.ID != pt.ID {
				m[key] = wirePromptEntry{Logprob: alt.Logprob, Rank: j + 1, DecodedToken: alt.Token}
			}
		}
		out[i] = m
	}
	return out
}

// echoLogprobs is an echoed prompt's part of a completion's logprobs:
// each prompt token with its logprob (none for the first) and its top
// alternatives; a special token's text is listed but, as the echoed text
// leaves it out, takes no bytes of text_offset.
func echoLogprobs(pts []PromptToken, top int) []TokenLogprob {
	out := make([]TokenLogprob, len(pts))
	for i, pt := range pts {
		out[i] = TokenLogprob{Token: pt.Token, Bytes: pt.Bytes, Logprob: pt.Logprob, Unscored: i == 0}
		if pt.Special {
			out[i].Bytes = nil
		}
		for _, alt := range pt.Top[:min(len(pt.Top), top)] {
			out[i].Top = append(out[i].Top, TopLogprob{Token: alt.Token, Bytes: alt.Bytes, Logprob: alt.Logprob})
		}
	}
	return out
}

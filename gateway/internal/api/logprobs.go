package api

// MaxTopLogprobs is the most alternatives per token a request may ask for
// (top_logprobs in chat and responses, the integer logprobs of
// completions).
const MaxTopLogprobs = 20

// TokenLogprob is the log probability of one generated token and of the
// most likely tokens at its position (the raw, untempered distribution;
// see docs/api.md).
type TokenLogprob struct {
	// Token is the token's text; a token that is not valid UTF-8 on its
	// own (part of a multi-byte character) is written "bytes:\xNN...",
	// as OpenAI does. Bytes are its raw bytes.
	Token   string
	Bytes   []byte
	Logprob float64
	// Top lists the most likely tokens, most likely first.
	Top []TopLogprob
	// Unscored marks an echoed prompt's first token, which has no
	// logprob (null, as its top_logprobs).
	Unscored bool
}

// TopLogprob is one alternative of TokenLogprob.Top.
type TopLogprob struct {
	Token   string
	Bytes   []byte
	Logprob float64
}

// logprobs reads chat's logprobs (a boolean) and top_logprobs, or the
// legacy completions' logprobs (an integer: how many alternatives; 0
// returns the sampled tokens' logprobs only).
func (d *decoder) logprobs() *Error {
	raw := d.f.get("logprobs")
	if d.r.Kind == KindCompletion {
		if raw == nil {
			return nil
		}
		n, e := decodeIntIn(raw, "logprobs", 0, MaxTopLogprobs)
		if e != nil {
			return e
		}
		d.r.Logprobs, d.r.TopLogprobs = true, int(n)
		return nil
	}
	if raw != nil {
		var e *Error
		if d.r.Logprobs, e = decodeBool(raw, "logprobs"); e != nil {
			return e
		}
	}
	return d.topLogprobs()
}

// topLogprobs reads top_logprobs, which needs logprobs.
func (d *decoder) topLogprobs() *Error {
	raw := d.f.get("top_logprobs")
	if raw == nil {
		return nil
	}
	n, e := decodeIntIn(raw, "top_logprobs", 0, MaxTopLogprobs)
	if e != nil {
		return e
	}
	if n > 0 && !d.r.Logprobs {
		return InvalidRequest("top_logprobs", CodeInvalidValue,
			"Invalid value for 'top_logprobs': 'logprobs' must be set to true when 'top_logprobs' is used.")
	}
	d.r.TopLogprobs = int(n)
	return nil
}

// --- wire shapes ---

// wireTop is one alternative in chat and responses logprobs.
type wireTop struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// wireToken is one token's entry in chat's logprobs.content and the
// Responses API's output_text logprobs.
type wireToken struct {
	Token       string    `json:"token"`
	Logprob     float64   `json:"logprob"`
	Bytes       []int     `json:"bytes"`
	TopLogprobs []wireTop `json:"top_logprobs"`
}

// byteInts renders bytes as OpenAI does: a list of integers.
func byteInts(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}

func toWireTokens(lps []TokenLogprob) []wireToken {
	out := make([]wireToken, len(lps))
	for i, lp := range lps {
		out[i] = wireToken{Token: lp.Token, Logprob: lp.Logprob, Bytes: byteInts(lp.Bytes), TopLogprobs: make([]wireTop, len(lp.Top))}
		for j, t := range lp.Top {
			out[i].TopLogprobs[j] = wireTop{Token: t.Token, Logprob: t.Logprob, Bytes: byteInts(t.Bytes)}
		}
	}
	return out
}

// chatLogprobs is a chat choice's logprobs object.
type chatLogprobs struct {
	Content []wireToken `json:"content"`
	Refusal *[]any      `json:"refusal"`
}

// chatLogprobsOf is a choice's logprobs: nil (JSON null) unless asked for.
func chatLogprobsOf(asked bool, lps []TokenLogprob) *chatLogprobs {
	if !asked {
		return nil
	}
	return &chatLogprobs{Content: toWireTokens(lps)}
}

// completionLogprobs is the legacy completions' logprobs object.
type completionLogprobs struct {
	Tokens []string `json:"tokens"`
	// TokenLogprobs and TopLogprobs hold null for an echoed prompt's
	// first token.
	TokenLogprobs []*float64           `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	// TextOffset is each token's byte offset in the choice's text.
	TextOffset []int `json:"text_offset"`
}

// completionLogprobsOf renders lps, the first at byte offset offset of
// the choice's text; nil (JSON null) unless asked for. As OpenAI
// documents, each top_logprobs entry also holds the sampled token, so it
// may have one entry more than asked for.
func completionLogprobsOf(asked bool, lps []TokenLogprob, offset int) *completionLogprobs {
	if !asked {
		return nil
	}
	c := &completionLogprobs{Tokens: []string{}, TokenLogprobs: []*float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
	for _, lp := range lps {
		c.Tokens = append(c.Tokens, lp.Token)
		c.TextOffset = append(c.TextOffset, offset)
		offset += len(lp.Bytes)
		if lp.Unscored {
			c.TokenLogprobs, c.TopLogprobs = append(c.TokenLogprobs, nil), append(c.TopLogprobs, nil)
			continue
		}
		top := make(map[string]float64, len(lp.Top)+1)
		for _, t := range lp.Top {
			if _, dup := top[t.Token]; !dup {
				top[t.Token] = t.Logprob
			}
		}
		if _, ok := top[lp.Token]; !ok {
			top[lp.Token] = lp.Logprob
		}
		c.TokenLogprobs = append(c.TokenLogprobs, &lp.Logprob)
		c.TopLogprobs = append(c.TopLogprobs, top)
	}
	return c
}

// bytesOf is the total byte length of lps' tokens.
func bytesOf(lps []TokenLogprob) int {
	n := 0
	for _, lp := range lps {
		n += len(lp.Bytes)
	}
	return n
}

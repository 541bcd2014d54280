package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/tokenizer"
)

// forcedLogprobs is the reference worker's raw logprobs (and top
// alternatives) at the position after prefix, sampled with tok forced by
// logit_bias: logprobs are those of the raw distribution, so the entry's
// logprob is tok's there, as prompt logprobs must report it.
func (r *refWorker) forcedLogprobs(prefix []int32, tok int32, top int) *controlpb.LogprobsToken {
	r.t.Helper()
	r.n++
	stream, err := r.client.Generate(context.Background(), &controlpb.GenerateRequest{
		Owner:  &controlpb.Owner{Tenant: "ref", RequestId: fmt.Sprint("ref-", r.n), Epoch: 1},
		Prompt: prefix, Sampling: &controlpb.SamplingParams{MaxTokens: 1, IgnoreEos: true, Logprobs: true, TopLogprobs: int32(top),
			LogitBias: []*controlpb.LogitBias{{Token: tok, Bias: 100}}},
	})
	if err != nil {
		r.t.Fatal(err)
	}
	var lp *controlpb.LogprobsToken
	for {
		ev, err := stream.Recv()
		if err != nil {
			r.t.Fatalf("reference of a %d-token prefix: %v", len(prefix), err)
		}
		if ids := ev.GetTokens().GetIds(); len(ids) > 0 && ids[0] != tok {
			r.t.Fatalf("reference sampled %d, forced %d", ids[0], tok)
		}
		if lps := ev.GetTokens().GetLogprobs(); len(lps) > 0 {
			lp = lps[0]
		}
		if ev.GetDone() != nil {
			return lp
		}
	}
}

// promptRef is the reference's logprobs of every prompt token after the
// first (entry i for prompt[i+1]), with 20 alternatives each.
func promptRef(ref *refWorker, prompt []int32) []*controlpb.LogprobsToken {
	out := make([]*controlpb.LogprobsToken, len(prompt)-1)
	for i := range out {
		out[i] = ref.forcedLogprobs(prompt[:i+1], prompt[i+1], 20)
	}
	return out
}

// refRank is tok's rank in a reference entry's 20 alternatives (0: below
// them).
func refRank(lp *controlpb.LogprobsToken, tok int32) int {
	for j, id := range lp.GetTopIds() {
		if id == tok {
			return j + 1
		}
	}
	return 0
}

// vllmPromptLogprobs is vLLM's prompt_logprobs shape.
type vllmPromptLogprobs []map[string]struct {
	Logprob      float64 `json:"logprob"`
	Rank         int     `json:"rank"`
	DecodedToken string  `json:"decoded_token"`
}

// checkVLLMPrompt checks prompt_logprobs of k alternatives against the
// reference: null first, then each prompt token's entry (its logprob,
// its rank and its text) and the reference's k likeliest with ranks 1..k.
func checkVLLMPrompt(t *testing.T, tok *tokenizer.Tokenizer, got vllmPromptLogprobs, prompt []int32, want []*controlpb.LogprobsToken, k int) {
	t.Helper()
	if len(got) != len(prompt) || got[0] != nil {
		t.Fatalf("%d prompt_logprobs entries (first %v) for %d prompt tokens", len(got), got[0], len(prompt))
	}
	for i := 1; i < len(prompt); i++ {
		ref, m := want[i-1], got[i]
		e, ok := m[strconv.Itoa(int(prompt[i]))]
		text, _, _ := tokenText(tok, prompt[i])
		if !ok || e.Logprob != ref.GetLogprob() || e.DecodedToken != text {
			t.Fatalf("prompt token %d (%d %q): entry %+v (present %v), reference logprob %v", i, prompt[i], text, e, ok, ref.GetLogprob())
		}
		if r := refRank(ref, prompt[i]); (r > 0 && e.Rank != r) || (r == 0 && e.Rank <= 20) {
			t.Fatalf("prompt token %d: rank %d, the reference ranks it %d of 20", i, e.Rank, r)
		}
		for j := range k {
			id := ref.GetTopIds()[j]
			a, ok := m[strconv.Itoa(int(id))]
			if !ok || a.Logprob != ref.GetTopLogprobs()[j] || (id != prompt[i] && a.Rank != j+1) {
				t.Fatalf("prompt token %d alternative %d (%d): %+v, reference %v", i, j, id, a, ref.GetTopLogprobs()[j])
			}
		}
		if n := len(m); n != k && n != k+1 {
			t.Fatalf("prompt token %d: %d entries for %d alternatives", i, n, k)
		}
	}
}

// TestRealPromptLogprobs: through the gateway with the API client, on a
// single worker and on a P/D pair (the prefill worker computes them), the
// prompt's logprobs equal the reference worker's raw logprobs of each
// prompt token given the tokens before it:
//   - completions with echo and logprobs 3: the prompt's tokens first
//     (null logprob and top_logprobs for the first), then the
//     completion's, text_offset indexing the echoed text, streaming
//     included (the prompt's logprobs in the first chunk, with its text);
//   - vLLM's prompt_logprobs 2, per choice on completions and on the
//     response on chat;
//   - with n = 2, both in every choice.
func TestRealPromptLogprobs(t *testing.T) {
	tok, err := tokenizer.Load(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	ref := newRefWorker(t, workerPages)
	const text = "Once upon a time"
	bos, _ := tok.BOS()
	plain, _ := tok.Encode(text)
	prompt := append([]int32{bos}, plain...)
	refPrompt := promptRef(ref, prompt)
	refOut := ref.runSampling(prompt, &controlpb.SamplingParams{Temperature: 0, TopP: 1, MaxTokens: 5, Logprobs: true, TopLogprobs: 3})
	chat := chatTokens(t, realPrompt)
	refChat := promptRef(ref, chat)

	check := func(t *testing.T, tg *testGateway) {
		client := tg.api()
		params := completionRequest{Model: "tiny", Prompt: text,
			MaxTokens: new(int64(5)), Temperature: new(0.0), Echo: new(true), Logprobs: new(int64(3))}
		resp, err := client.completions(context.Background(), params)
		if err != nil {
			t.Fatal(err)
		}
		c := resp.Choices[0]
		if c.Text != text+refOut.text || len(c.Logprobs.Tokens) != len(prompt)+len(refOut.ids) {
			t.Fatalf("echo: text %q with %d logprobs tokens, want %q and %d", c.Text, len(c.Logprobs.Tokens), text+refOut.text, len(prompt)+len(refOut.ids))
		}
		var raw struct {
			Choices []struct {
				Logprobs struct {
					TokenLogprobs []*float64       `json:"token_logprobs"`
					TopLogprobs   []map[string]any `json:"top_logprobs"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(resp.RawJSON()), &raw); err != nil || raw.Choices[0].Logprobs.TokenLogprobs[0] != nil || raw.Choices[0].Logprobs.TopLogprobs[0] != nil {
			t.Fatalf("echo: the first prompt token's logprob and top_logprobs are not null: %s", resp.RawJSON())
		}
		offset := 0
		for i, id := range prompt {
			want, _, _ := tokenText(tok, id)
			if c.Logprobs.Tokens[i] != want || c.Logprobs.TextOffset[i] != int64(offset) {
				t.Fatalf("echo token %d: %q at %d, want %q at %d", i, c.Logprobs.Tokens[i], c.Logprobs.TextOffset[i], want, offset)
			}
			if !tok.IsSpecial(id) {
				offset += len(want)
			}
			if i == 0 {
				continue
			}
			r := refPrompt[i-1]
			if c.Logprobs.TokenLogprobs[i] != r.GetLogprob() {
				t.Fatalf("echo token %d: logprob %v, reference %v", i, c.Logprobs.TokenLogprobs[i], r.GetLogprob())
			}
			// (top_logprobs hold a null, which the typed client leaves out: read the body.)
			top := raw.Choices[0].Logprobs.TopLogprobs[i]
			for j := range 3 {
				alt, _, _ := tokenText(tok, r.GetTopIds()[j])
				if top[alt] != r.GetTopLogprobs()[j] {
					t.Fatalf("echo token %d alternative %q: %v, reference %v (%v)", i, alt, top[alt], r.GetTopLogprobs()[j], top)
				}
			}
		}
		if c.Logprobs.TextOffset[len(prompt)] != int64(len(text)) {
			t.Fatalf("the completion's first token is at offset %d, the echoed prompt is %d bytes", c.Logprobs.TextOffset[len(prompt)], len(text))
		}

		// Streaming: the first chunk is the prompt with its logprobs.
		stream := client.completionsStream(context.Background(), params)
		var chunks []completionResponse
		for stream.Next() {
			chunks = append(chunks, stream.Current())
		}
		if err := stream.Err(); err != nil || len(chunks) == 0 {
			t.Fatalf("stream: %v after %d chunks", err, len(chunks))
		}
		first := chunks[0].Choices[0]
		if first.Text != text || !equalTokens(first.Logprobs.Tokens, c.Logprobs.Tokens[:len(prompt)]) ||
			fmt.Sprint(first.Logprobs.TokenLogprobs) != fmt.Sprint(c.Logprobs.TokenLogprobs[:len(prompt)]) {
			t.Fatalf("stream: first chunk %q with logprobs %+v, want the prompt's", first.Text, first.Logprobs)
		}
		var streamed strings.Builder
		for _, ch := range chunks {
			for _, cc := range ch.Choices {
				streamed.WriteString(cc.Text)
			}
		}
		if streamed.String() != c.Text {
			t.Fatalf("stream: %q, non-stream %q", streamed.String(), c.Text)
		}

		// vLLM's prompt_logprobs, on completions (per choice) and chat.
		resp, err = client.completions(context.Background(), completionRequest{Model: "tiny",
			Prompt: text, MaxTokens: new(int64(2)), Temperature: new(0.0), Extra: map[string]any{"prompt_logprobs": 2}})
		if err != nil {
			t.Fatal(err)
		}
		var comp struct {
			Choices []struct {
				PromptLogprobs vllmPromptLogprobs `json:"prompt_logprobs"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(resp.RawJSON()), &comp); err != nil {
			t.Fatal(err)
		}
		checkVLLMPrompt(t, tok, comp.Choices[0].PromptLogprobs, prompt, refPrompt, 2)

		// n = 2: one prefill; every choice carries the prompt's logprobs,
		// vLLM's and the echo's.
		resp, err = client.completions(context.Background(), completionRequest{Model: "tiny",
			Prompt: text, MaxTokens: new(int64(3)), Temperature: new(1.0),
			Seed: new(int64(4)), N: new(int64(2)), Echo: new(true), Logprobs: new(int64(1)), Extra: map[string]any{"prompt_logprobs": 2}})
		if err != nil {
			t.Fatal(err)
		}
		var two struct {
			Choices []struct {
				Text           string             `json:"text"`
				PromptLogprobs vllmPromptLogprobs `json:"prompt_logprobs"`
				Logprobs       struct {
					TokenLogprobs []*float64 `json:"token_logprobs"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(resp.RawJSON()), &two); err != nil || len(two.Choices) != 2 {
			t.Fatalf("n=2: %v %s", err, resp.RawJSON())
		}
		for k, c := range two.Choices {
			checkVLLMPrompt(t, tok, c.PromptLogprobs, prompt, refPrompt, 2)
			lps := c.Logprobs.TokenLogprobs
			if !strings.HasPrefix(c.Text, text) || len(lps) <= len(prompt) || lps[0] != nil {
				t.Fatalf("n=2 choice %d: %q with %d logprobs", k, c.Text, len(lps))
			}
			for i := 1; i < len(prompt); i++ {
				if lps[i] == nil || *lps[i] != refPrompt[i-1].GetLogprob() {
					t.Fatalf("n=2 choice %d prompt token %d: logprob %v, reference %v", k, i, lps[i], refPrompt[i-1].GetLogprob())
				}
			}
		}
		chatReq := realChat(2)
		chatReq.Extra = map[string]any{"prompt_logprobs": 2}
		chatResp, err := client.chat(context.Background(), chatReq)
		if err != nil {
			t.Fatal(err)
		}
		var ch struct {
			PromptLogprobs vllmPromptLogprobs `json:"prompt_logprobs"`
			Choices        []json.RawMessage  `json:"choices"`
		}
		if err := json.Unmarshal([]byte(chatResp.RawJSON()), &ch); err != nil {
			t.Fatal(err)
		}
		checkVLLMPrompt(t, tok, ch.PromptLogprobs, chat, refChat, 2)
		if strings.Contains(string(ch.Choices[0]), "prompt_logprobs") {
			t.Fatalf("chat's prompt_logprobs belong to the response, not the choice: %s", ch.Choices[0])
		}
	}

	t.Run("single node", func(t *testing.T) {
		tg := startGateway(t, testConfig())
		w := startReal(t, workerConfig(t, "both-plp", config.RoleBoth, config.TransferTCP, tg.RegistryAddr().String())).attach(tg)
		check(t, tg)
		w.poolQuiet()
	})
	t.Run("P/D", func(t *testing.T) {
		tg := startGateway(t, testConfig())
		reg := tg.RegistryAddr().String()
		d := startReal(t, workerConfig(t, "decode-plp", config.RoleDecode, config.TransferTCP, reg)).attach(tg)
		startReal(t, workerConfig(t, "prefill-plp", config.RolePrefill, config.TransferTCP, reg)).attach(tg)
		check(t, tg)
		d.poolQuiet()
	})
}

func equalTokens(a, b []string) bool {
	return strings.Join(a, "\x00") == strings.Join(b, "\x00") && len(a) == len(b)
}

// TestPromptLogprobsValidation: bad prompt_logprobs, and prompt_logprobs
// above 0 with stream, are 400s in the error envelope naming the field;
// no worker is needed to refuse them.
func TestPromptLogprobsValidation(t *testing.T) {
	tg := startGateway(t, testConfig())
	for _, tc := range []struct {
		path  string
		body  map[string]any
		param string
		code  string
	}{
		{"/v1/completions", map[string]any{"prompt_logprobs": -1}, "prompt_logprobs", "integer_below_min_value"},
		{"/v1/completions", map[string]any{"prompt_logprobs": 21}, "prompt_logprobs", "integer_above_max_value"},
		{"/v1/chat/completions", map[string]any{"prompt_logprobs": 1.5}, "prompt_logprobs", "invalid_type"},
		{"/v1/chat/completions", map[string]any{"prompt_logprobs": "2"}, "prompt_logprobs", "invalid_type"},
		{"/v1/completions", map[string]any{"prompt_logprobs": 1, "stream": true}, "prompt_logprobs", "unsupported_value"},
	} {
		body := map[string]any{"model": "tiny", "max_tokens": 2}
		if tc.path == "/v1/completions" {
			body["prompt"] = "hi"
		} else {
			body["messages"] = []map[string]any{{"role": "user", "content": "hi"}}
		}
		for k, v := range tc.body {
			body[k] = v
		}
		code, _, raw := tg.post(tc.path, body)
		var env struct {
			Error struct {
				Type, Param, Code string
			}
		}
		if code != http.StatusBadRequest || json.Unmarshal(raw, &env) != nil || env.Error.Param != tc.param || env.Error.Code != tc.code ||
			env.Error.Type != "invalid_request_error" {
			t.Errorf("%s %v: %d %s, want 400 %s naming %s", tc.path, tc.body, code, raw, tc.code, tc.param)
		}
	}
}

// TestPromptTokens: a worker's prompt logprobs become the API's entries
// (token texts, the first token unscored); entries that do not fit the
// prompt or the request are a protocol error, never shown.
func TestPromptTokens(t *testing.T) {
	tok := presetTokenizer(t)
	ids := byteTokens("hé") // 'h' 0xc3 0xa9
	entry := func(lp float64, rank int32, top ...int32) *controlpb.LogprobsToken {
		e := &controlpb.LogprobsToken{Logprob: lp, Rank: rank, TopIds: top}
		for range top {
			e.TopLogprobs = append(e.TopLogprobs, lp)
		}
		return e
	}
	got, err := promptTokens(tok, ids, []*controlpb.LogprobsToken{entry(-2, 4, 'x', 'y'), entry(-1, 1, 0xa9)}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Token != "h" || got[0].Logprob != 0 || got[0].Rank != 0 || got[1].Token != `bytes:\xc3` ||
		got[1].Logprob != -2 || got[1].Rank != 4 || len(got[1].Top) != 2 || got[1].Top[1].Token != "y" || got[2].Top[0].ID != 0xa9 {
		t.Fatalf("got %+v", got)
	}
	for _, tc := range []struct {
		name string
		lps  []*controlpb.LogprobsToken
		want string
	}{
		{"one entry missing", []*controlpb.LogprobsToken{entry(-1, 1)}, "1 logprobs for a prompt of 3 tokens"},
		{"no rank", []*controlpb.LogprobsToken{entry(-1, 0), entry(-1, 1)}, "rank 0"},
		{"positive", []*controlpb.LogprobsToken{entry(-1, 1), entry(0.5, 1)}, "logprob 0.5"},
		{"too many alternatives", []*controlpb.LogprobsToken{entry(-1, 1, 1, 2, 3), entry(-1, 1)}, "3 alternatives"},
		{"unknown alternative", []*controlpb.LogprobsToken{entry(-1, 1, 99999), entry(-1, 1)}, "unknown token"},
	} {
		if _, err := promptTokens(tok, ids, tc.lps, 2); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
}

package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/worker/engine"
)

// TestTokenLogprobs: token texts (bytes: for a partial character), the
// P/D first token's entry put first, and the worker's entries checked.
func TestTokenLogprobs(t *testing.T) {
	tok := presetTokenizer(t)
	ids := byteTokens("é!") // 0xc3 0xa9 '!'
	entry := func(lp float64, top ...int32) *controlpb.LogprobsToken {
		e := &controlpb.LogprobsToken{Logprob: lp, TopIds: top}
		for range top {
			e.TopLogprobs = append(e.TopLogprobs, lp)
		}
		return e
	}
	got, err := tokenLogprobs(tok, ids, []*controlpb.LogprobsToken{entry(-2, 0xa9), entry(-3)}, entry(-1, 0xc3, '!'), 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Token != `bytes:\xc3` || got[0].Logprob != -1 || len(got[0].Top) != 2 ||
		got[0].Top[1].Token != "!" || got[1].Token != `bytes:\xa9` || string(got[1].Bytes) != "\xa9" || got[2].Token != "!" {
		t.Fatalf("got %+v", got)
	}
	for _, tc := range []struct {
		name string
		lps  []*controlpb.LogprobsToken
		top  int
		want string
	}{
		{"one entry missing", []*controlpb.LogprobsToken{entry(-1), entry(-1)}, 0, "2 logprobs for 3 tokens"},
		{"positive", []*controlpb.LogprobsToken{entry(-1), entry(0.5), entry(-1)}, 0, "logprob 0.5"},
		{"too many alternatives", []*controlpb.LogprobsToken{entry(-1, 1, 2), entry(-1), entry(-1)}, 1, "2 alternatives"},
		{"unknown alternative", []*controlpb.LogprobsToken{entry(-1, 99999), entry(-1), entry(-1)}, 1, "unknown token"},
	} {
		if _, err := tokenLogprobs(tok, ids, tc.lps, nil, tc.top); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
}

// firstLogprobs is the reference worker's logprobs, with top
// alternatives, of the first token after prompt: the raw distribution of
// an unconstrained request with that prefix.
func (r *refWorker) firstLogprobs(prompt []int32, top int) *controlpb.LogprobsToken {
	r.t.Helper()
	r.n++
	stream, err := r.client.Generate(context.Background(), &controlpb.GenerateRequest{
		Owner:  &controlpb.Owner{Tenant: "ref", RequestId: fmt.Sprint("ref-", r.n), Epoch: 1},
		Prompt: prompt, Sampling: &controlpb.SamplingParams{MaxTokens: 1, IgnoreEos: true, Logprobs: true, TopLogprobs: int32(top)},
	})
	if err != nil {
		r.t.Fatal(err)
	}
	var lp *controlpb.LogprobsToken
	for {
		ev, err := stream.Recv()
		if err != nil {
			r.t.Fatalf("reference of a %d-token prompt: %v", len(prompt), err)
		}
		if lps := ev.GetTokens().GetLogprobs(); len(lps) > 0 {
			lp = lps[0]
		}
		if ev.GetDone() != nil {
			if lp == nil {
				r.t.Fatalf("reference of a %d-token prompt: no logprobs", len(prompt))
			}
			return lp
		}
	}
}

// hermesModelDir is the tiny model with a chat template that offers tools
// in the Hermes format (hermesTokenizerConfig).
func hermesModelDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny-tools")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() || e.Name() == tokenizer.ChatTemplateFile || e.Name() == tokenizer.TokenizerConfigFile {
			continue
		}
		if err := os.Symlink(filepath.Join(modelDir, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, tokenizer.TokenizerConfigFile), hermesTokenizerConfig(t), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestRealConstrainedLogprobsAreRaw: through the gateway, on a single
// worker and on a P/D pair (whose first token the prefill worker samples),
// the logprobs of a structured output (an integer schema) and of a call to
// a named tool are those of the raw distribution: at every position the 20
// alternatives are exactly an unconstrained request's for the same prefix
// (never a masked token at -9999), and the sampled token reports its own
// probability there (never 0 for a forced token), while the output still
// obeys the constraint.
func TestRealConstrainedLogprobsAreRaw(t *testing.T) {
	const top = engine.MaxTopLogprobs
	dir := hermesModelDir(t)
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Every token's bytes name it (-1: more than one token has them).
	byBytes := map[string]int32{}
	for id := range int32(tok.VocabSize()) {
		if b, err := tok.TokenBytes(id); err == nil {
			if _, dup := byBytes[string(b)]; dup {
				byBytes[string(b)] = -1
			} else {
				byBytes[string(b)] = id
			}
		}
	}
	ref := newRefWorker(t, workerPages)
	refs := map[string]*controlpb.LogprobsToken{}
	rawAt := func(prefix []int32) *controlpb.LogprobsToken {
		k := fmt.Sprint(prefix)
		if refs[k] == nil {
			refs[k] = ref.firstLogprobs(prefix, top)
		}
		return refs[k]
	}

	msgs := []map[string]any{{"role": "user", "content": "What is the weather in Bern?"}}
	tools := []map[string]any{{"type": "function", "function": map[string]any{"name": "get_weather",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 8}},
			"required": []string{"city"}, "additionalProperties": false}}}}
	cases := []struct {
		name   string
		body   map[string]any
		tools  bool
		finish string
		valid  func(msg map[string]any) bool
	}{
		{"integer schema", map[string]any{"response_format": map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": "n", "schema": map[string]any{"type": "integer"}}}}, false, "stop",
			func(msg map[string]any) bool {
				_, err := strconv.ParseInt(fmt.Sprint(msg["content"]), 10, 64)
				return err == nil
			}},
		{"named tool", map[string]any{"tools": tools, "tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}}, true, "tool_calls",
			func(msg map[string]any) bool {
				calls, _ := msg["tool_calls"].([]any)
				return len(calls) == 1 && strings.Contains(fmt.Sprint(calls[0]), "get_weather")
			}},
	}
	check := func(t *testing.T, tg *testGateway) {
		for _, tc := range cases {
			body := map[string]any{"model": "tiny", "messages": msgs, "max_tokens": 96, "temperature": 1, "seed": 5,
				"logprobs": true, "top_logprobs": top}
			for k, v := range tc.body {
				body[k] = v
			}
			code, _, raw := tg.post("/v1/chat/completions", body)
			var resp struct {
				Choices []struct {
					Message      map[string]any
					FinishReason string `json:"finish_reason"`
					Logprobs     struct {
						Content []struct {
							Logprob     float64
							Bytes       []byte
							TopLogprobs []struct {
								Logprob float64
								Bytes   []byte
							} `json:"top_logprobs"`
						}
					}
				}
				Usage struct {
					PromptTokens int `json:"prompt_tokens"`
				}
			}
			if code != http.StatusOK || json.Unmarshal(raw, &resp) != nil || len(resp.Choices) != 1 ||
				resp.Choices[0].FinishReason != tc.finish || !tc.valid(resp.Choices[0].Message) {
				t.Fatalf("%s: %d %s", tc.name, code, raw)
			}
			opts := tokenizer.ChatOptions{AddGenerationPrompt: true}
			if tc.tools {
				opts.Tools = []json.RawMessage{json.RawMessage(`{}`)} // the template only asks whether there are tools
			}
			prefix, err := tok.EncodeChat([]tokenizer.Message{{Role: "user", Content: fmt.Sprint(msgs[0]["content"])}}, opts)
			if err != nil || len(prefix) != resp.Usage.PromptTokens {
				t.Fatalf("%s: the prompt is %d tokens (%v), the gateway counted %d", tc.name, len(prefix), err, resp.Usage.PromptTokens)
			}
			content := resp.Choices[0].Logprobs.Content
			if len(content) == 0 {
				t.Fatalf("%s: no logprobs: %s", tc.name, raw)
			}
			for i, e := range content {
				want := rawAt(prefix)
				if len(e.TopLogprobs) != len(want.GetTopIds()) {
					t.Fatalf("%s token %d: %d alternatives, want %d", tc.name, i, len(e.TopLogprobs), len(want.GetTopIds()))
				}
				for j, a := range e.TopLogprobs {
					wb, _ := tok.TokenBytes(want.GetTopIds()[j])
					if a.Logprob != want.GetTopLogprobs()[j] || string(a.Bytes) != string(wb) {
						t.Fatalf("%s token %d (%q at %v) alternative %d: %q at %v, the unconstrained request's %q at %v",
							tc.name, i, e.Bytes, e.Logprob, j, a.Bytes, a.Logprob, wb, want.GetTopLogprobs()[j])
					}
				}
				id, ok := byBytes[string(e.Bytes)]
				if !ok || id < 0 {
					t.Fatalf("%s token %d: bytes %q name no single token", tc.name, i, e.Bytes)
				}
				// The token's own logprob: the unconstrained one where it
				// ranks in the top 20, below the 20th otherwise.
				own, ranked := 0.0, false
				for j, alt := range want.GetTopIds() {
					if alt == id {
						own, ranked = want.GetTopLogprobs()[j], true
					}
				}
				last := want.GetTopLogprobs()[top-1]
				if (ranked && e.Logprob != own) || (!ranked && (e.Logprob > last || e.Logprob <= engine.NoLogprob)) {
					t.Fatalf("%s token %d %q: logprob %v, the unconstrained distribution gives %v (ranked %v, 20th %v)",
						tc.name, i, e.Bytes, e.Logprob, own, ranked, last)
				}
				prefix = append(prefix, id)
			}
			t.Logf("%s: %d tokens checked", tc.name, len(content))
		}
	}

	t.Run("single node", func(t *testing.T) {
		tg := startGateway(t, testConfig())
		cfg := workerConfig(t, "both-lp", config.RoleBoth, config.TransferTCP, tg.RegistryAddr().String())
		cfg.Worker.ModelDir = dir
		w := startReal(t, cfg).attach(tg)
		check(t, tg)
		w.poolQuiet()
	})
	t.Run("P/D", func(t *testing.T) {
		tg := startGateway(t, testConfig())
		reg := tg.RegistryAddr().String()
		dcfg := workerConfig(t, "decode-lp", config.RoleDecode, config.TransferTCP, reg)
		pcfg := workerConfig(t, "prefill-lp", config.RolePrefill, config.TransferTCP, reg)
		dcfg.Worker.ModelDir, pcfg.Worker.ModelDir = dir, dir
		d := startReal(t, dcfg).attach(tg)
		startReal(t, pcfg).attach(tg)
		check(t, tg)
		d.poolQuiet()
	})
}

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/test/harness"
	"github.com/warden-ai/warden/worker/engine"
)

// Pinned client libraries for TestClientConformance, installed by
// scripts/npm-cache.sh into a cache outside the repository.
var clientPackages = []string{"openai@7.55.0", "ai@7.0.173", "@ai-sdk/openai@4.0.118", "zod@4.6.7",
	"@langchain/openai@1.6.0", "@langchain/core@1.4.0"}

// TestClientConformance drives `warden up` (P/D) as a new user starts it,
// serving its default dev model (the tiny preset, whose chat template has
// tools in the Hermes format and reasoning), with the
// official OpenAI Node SDK, the Vercel AI SDK's default provider (the
// Responses API) and LangChain JS: chat, models.retrieve, typed errors,
// responses.create streamed and not, stored responses chained with
// previous_response_id (Node SDK and AI SDK) and item references (the AI
// SDK with store on), generateText and streamText, and
// /tokenize and /detokenize (the ids of the reference render, the
// prefilled count), /v1/embeddings (Node SDK base64 and float, AI SDK
// embedMany: the float64 reference's vector, the tokenized count),
// logit_bias forcing a token and greedy output with the
// penalties, top_k and min_p equal to the reference engine's; chat with
// logprobs (the engine's own values), which
// must see exactly the text of the float64 reference model (greedy); then
// tool calls round-tripped through each client, generateObject and
// withStructuredOutput (test/clients/conformance.mjs), and openai-go with
// tools (streamed calls reassembled equal to the non-streamed ones, and
// n: 3 with tools); and n: 3 on the P/D `warden up` and on a second
// `warden up --single` (one prefill shared by the choices). The prompts of the tool round
// trips must have the token count of the Python jinja2 render of the same
// conversation. Without node/npm it is skipped, except under CI.
func TestClientConformance(t *testing.T) {
	modules := harness.NpmModules(t, clientPackages...)
	// `warden up` generates its dev model as the harness generates the
	// tiny one: the same preset and seed.
	model := env.Models[harness.ModelTiny]
	info, _ := startUp(t)
	single, _ := startUp(t, "--single")
	// Node trusts one extra CA file: both dev CAs in one.
	cas := filepath.Join(t.TempDir(), "cas.pem")
	var pem []byte
	for _, f := range []string{info.ca, single.ca} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pem = append(pem, b...)
	}
	if err := os.WriteFile(cas, pem, 0o644); err != nil {
		t.Fatal(err)
	}

	const prompt, maxTokens = "Tell me a story.", 12 // as in conformance.mjs
	ref := referenceAt(t, model)
	p, err := ref.ChatPrompt([]tokenizer.Message{{Role: "user", Content: prompt}})
	if err != nil {
		t.Fatal(err)
	}
	sampling := harness.Greedy(maxTokens)
	sampling.Logprobs, sampling.TopLogprobs = true, 3
	want, err := ref.Run(context.Background(), p, sampling)
	if err != nil {
		t.Fatal(err)
	}
	logprobs := make([]float64, len(want.Logprobs))
	for i, lp := range want.Logprobs {
		logprobs[i] = lp.Logprob
	}
	wantLogprobs, err := json.Marshal(logprobs)
	if err != nil {
		t.Fatal(err)
	}
	wantPrompt, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	penalizedSampling := harness.Greedy(maxTokens)
	penalizedSampling.FrequencyPenalty, penalizedSampling.PresencePenalty, penalizedSampling.RepetitionPenalty = 1.5, 0.5, 1.2
	penalizedSampling.TopK, penalizedSampling.MinP = 40, 0.05
	penalized, err := ref.Run(context.Background(), p, penalizedSampling)
	if err != nil {
		t.Fatal(err)
	}
	forced, err := ref.Tokenizer().Encode(" story")
	if err != nil {
		t.Fatal(err)
	}
	forcedText, err := ref.Decode(forced[:1])
	if err != nil {
		t.Fatal(err)
	}
	wantEmb, err := ref.Embedding(prompt, engine.PoolingLast) // the default models[].pooling
	if err != nil {
		t.Fatal(err)
	}
	wantEmbJSON, err := json.Marshal(wantEmb)
	if err != nil {
		t.Fatal(err)
	}
	cmd := harness.NodeCommand(t, filepath.Join("clients", "conformance.mjs"), modules)
	cmd.Env = append(os.Environ(), "WARDEN_BASE_URL="+info.baseURL, "WARDEN_API_KEY="+info.key, "WARDEN_MODEL="+harness.ModelTiny,
		"WARDEN_WANT="+want.Text, "WARDEN_WANT_LOGPROBS="+string(wantLogprobs), "NODE_EXTRA_CA_CERTS="+cas,
		"WARDEN_SINGLE_BASE_URL="+single.baseURL, "WARDEN_SINGLE_API_KEY="+single.key,
		"WARDEN_WANT_PROMPT="+string(wantPrompt), "WARDEN_WANT_PENALIZED="+penalized.Text,
		"WARDEN_FORCED_TOKEN="+strconv.Itoa(int(forced[0])), "WARDEN_FORCED_TEXT="+forcedText,
		"WARDEN_WANT_EMBEDDING="+string(wantEmbJSON))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("client conformance failed: %v\n%s\nwarden up log:\n%s\nwarden up --single log:\n%s", err, out, info.log(), single.log())
	}
	for _, scenario := range []string{"node chat", "node tokenize", "node embeddings", "node sampling controls", "node logprobs", "node n: 3", "node models.retrieve", "node typed errors", "node responses.create",
		"node responses.create stream", "node responses chained", "ai-sdk embedMany", "ai-sdk generateText", "ai-sdk previousResponseId", "ai-sdk streamText", "ai-sdk reasoning", "node chat with tools",
		"ai-sdk generateText tools", "ai-sdk generateObject", "langchain bindTools", "langchain withStructuredOutput"} {
		if !strings.Contains(string(out), "ok "+scenario+"\n") {
			t.Errorf("scenario %q did not pass:\n%s", scenario, out)
		}
	}
	renders := 0
	for _, line := range strings.Split(string(out), "\n") {
		if r, ok := strings.CutPrefix(line, "render "); ok {
			checkRender(t, model, []byte(r))
			renders++
		}
	}
	if renders == 0 {
		t.Error("the client script printed no conversation to check against the reference render")
	}
	checkGoTools(t, info, model)
	checkGoToolsStream(t, info, single)
}

package gateway

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway/internal/adapters"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/worker/engine"
	float64ref "github.com/warden-ai/warden/worker/reference"
)

// checkEmbedding compares a served embedding with the float64 reference
// of tokens: cosine > 0.9999 and every element within 1e-4.
func checkEmbedding(t *testing.T, what string, got []float64, a *lora.Adapter, tokens []int32, p engine.Pooling) {
	t.Helper()
	want, err := float64ref.Embedding(modelDir, a, tokens, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d dimensions, want %d", what, len(got), len(want))
	}
	var dot, gg, ww, maxDiff float64
	for j := range got {
		dot += got[j] * want[j]
		gg += got[j] * got[j]
		ww += want[j] * want[j]
		maxDiff = math.Max(maxDiff, math.Abs(got[j]-want[j]))
	}
	if cos := dot / math.Sqrt(gg*ww); !(cos > 0.9999) || maxDiff > 1e-4 {
		t.Fatalf("%s: cosine %.7f with the reference, max element error %.3g", what, cos, maxDiff)
	}
}

// completionTokens is text as a completion prompt is tokenized: BOS, then
// the text.
func completionTokens(t *testing.T, text string) []int32 {
	t.Helper()
	tok, err := tokenizer.Load(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode(text)
	if err != nil {
		t.Fatal(err)
	}
	bos, _ := tok.BOS()
	return append([]int32{bos}, ids...)
}

// TestRealEmbeddings: /v1/embeddings through the API client on a
// real worker returns, for strings and token ids, float and base64
// (the same vectors, bit for bit), the last position's normalised final
// hidden state of each input matching the float64 reference; usage counts
// the inputs' tokens, which are billed as prompt tokens; bad requests are
// 400 (404 for an unknown model) in the error envelope naming the field,
// and bill nothing.
func TestRealEmbeddings(t *testing.T) {
	cfg := testConfig()
	cfg.Models[0].Aliases = []string{"embedder"}
	cfg.Tenants.AuthCacheTTL = 0 // limit changes apply at once
	tg := startGateway(t, cfg)
	w := startReal(t, workerConfig(t, "both-embed", config.RoleBoth, config.TransferTCP, tg.RegistryAddr().String())).attach(tg)
	ctx := context.Background()
	client := tg.api()
	texts := []string{"Once upon a time", realPrompt, "a"}
	var tokens [][]int32
	var total int64
	for _, s := range texts {
		tokens = append(tokens, completionTokens(t, s))
		total += int64(len(tokens[len(tokens)-1]))
	}

	resp, err := client.embeddings(ctx, embeddingRequest{Model: "tiny", Input: texts})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Object != "list" || resp.Model != "tiny" || len(resp.Data) != len(texts) ||
		resp.Usage.PromptTokens != total || resp.Usage.TotalTokens != total {
		t.Fatalf("response %s/%s with %d vectors, usage %+v; want %d vectors, %d tokens", resp.Object, resp.Model, len(resp.Data), resp.Usage, len(texts), total)
	}
	floats := make([][]float64, len(texts))
	for i, d := range resp.Data {
		if d.Index != int64(i) || d.Object != "embedding" {
			t.Fatalf("data[%d]: index %d, object %s", i, d.Index, d.Object)
		}
		checkEmbedding(t, "input "+texts[i], d.Embedding, nil, tokens[i], engine.PoolingLast)
		floats[i] = d.Embedding
	}

	// Token ids (one array of arrays), base64: the same vectors exactly.
	var arrays [][]int64
	for _, ids := range tokens {
		arrays = append(arrays, toInt64(ids))
	}
	b64, err := client.embeddings(ctx, embeddingRequest{Model: "tiny", Input: arrays, EncodingFormat: "base64"})
	if err != nil {
		t.Fatal(err)
	}
	if len(b64.Data) != len(texts) || b64.Usage.PromptTokens != total {
		t.Fatalf("base64: %d vectors, usage %+v", len(b64.Data), b64.Usage)
	}
	for i, d := range b64.Data {
		var s string
		if err := json.Unmarshal(d.Raw, &s); err != nil {
			t.Fatalf("base64 data[%d] is not a string: %s", i, d.Raw)
		}
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(raw) != 4*len(floats[i]) {
			t.Fatalf("base64 data[%d]: %d bytes, %v", i, len(raw), err)
		}
		for j := range floats[i] {
			if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:])); got != float32(floats[i][j]) {
				t.Fatalf("base64 data[%d][%d] = %v, the float answer %v", i, j, got, floats[i][j])
			}
		}
	}
	// One array of token ids and one string are one input each.
	one, err := client.embeddings(ctx, embeddingRequest{Model: "tiny", Input: toInt64(tokens[1])})
	if err != nil || len(one.Data) != 1 || !slices.Equal(one.Data[0].Embedding, floats[1]) {
		t.Fatalf("one token array: %v, %+v", err, one)
	}
	// Through an alias: the model it names serves it.
	single, err := client.embeddings(ctx, embeddingRequest{Model: "embedder", Input: texts[0]})
	if err != nil || len(single.Data) != 1 || !slices.Equal(single.Data[0].Embedding, floats[0]) ||
		single.Usage.PromptTokens != int64(len(tokens[0])) || single.Model != "tiny" {
		t.Fatalf("one string: %v, %+v", err, single)
	}
	billed := 2*total + int64(len(tokens[1])+len(tokens[0]))

	tooMany := make([]string, 2049)
	for i := range tooMany {
		tooMany[i] = "x"
	}
	long := make([]int, 2049)
	for _, c := range []struct {
		body        any
		code        int
		param, kind string
	}{
		{map[string]any{"model": "tiny", "input": ""}, 400, "input", "invalid_value"},
		{map[string]any{"model": "tiny", "input": []string{}}, 400, "input", "empty_array"},
		{map[string]any{"model": "tiny", "input": []string{"a", ""}}, 400, "input[1]", "invalid_value"},
		{map[string]any{"model": "tiny", "input": [][]int{{1}, {}}}, 400, "input[1]", "invalid_value"},
		{map[string]any{"model": "tiny", "input": tooMany}, 400, "input", "array_above_max_length"},
		{map[string]any{"model": "tiny", "input": long}, 400, "input", "context_length_exceeded"},
		{map[string]any{"model": "tiny", "input": [][]int{{1}, long}}, 400, "input[1]", "context_length_exceeded"},
		{map[string]any{"model": "tiny", "input": []int{1, 1 << 20}}, 400, "input", "invalid_value"},
		{map[string]any{"model": "tiny", "input": []any{1, "a"}}, 400, "input[1]", "invalid_value"},
		{map[string]any{"model": "tiny", "input": 5}, 400, "input", "invalid_type"},
		{map[string]any{"model": "tiny"}, 400, "input", "missing_required_parameter"},
		{map[string]any{"model": "tiny", "input": "x", "encoding_format": "int8"}, 400, "encoding_format", "invalid_value"},
		{map[string]any{"model": "tiny", "input": "x", "dimensions": 8}, 400, "dimensions", "unsupported_parameter"},
		{map[string]any{"model": "nope", "input": "x"}, 404, "model", "model_not_found"},
	} {
		code, _, body := tg.post("/v1/embeddings", c.body)
		e := decodeEnvelope(t, body)
		if code != c.code || str(e.Error.Param) != c.param || str(e.Error.Code) != c.kind {
			t.Errorf("%.80v: %d %s, want %d %s naming %s", c.body, code, body, c.code, c.kind, c.param)
		}
	}

	// Billed as prompt tokens, nothing for the refused requests.
	usage, err := tg.Store().Usage(ctx, "acme", time.Now().Add(-time.Hour), time.Now().Add(time.Minute))
	if err != nil || len(usage) != 1 || usage[0].PromptTokens != billed || usage[0].CompletionTokens != 0 || usage[0].Requests != 4 {
		t.Fatalf("store usage %+v, %v; want 4 requests, %d prompt tokens", usage, err, billed)
	}
	tg.waitMetric("warden_tokens_total", map[string]string{"kind": "prompt", "tenant": "acme"}, float64(billed))
	// The tenant's token limits admit the inputs' tokens.
	if _, err := tg.Store().UpdateTenant(ctx, tenant.Tenant{ID: "acme", Limits: tenant.Limits{TokensPerMinute: 4}}); err != nil {
		t.Fatal(err)
	}
	code, _, body := tg.post("/v1/embeddings", map[string]any{"model": "tiny", "input": texts[:2]})
	if e := decodeEnvelope(t, body); code != 400 || str(e.Error.Code) != "request_too_large" || str(e.Error.Param) != "input" {
		t.Fatalf("inputs above the tenant's token rate: %d %s", code, body)
	}
	w.poolQuiet()
}

// TestRealEmbeddingsPrefillDecode: on a P/D deployment embeddings run on
// the prefill worker (the decode worker computes none: no transfer), with
// mean pooling when the model is configured so, matching the reference.
func TestRealEmbeddingsPrefillDecode(t *testing.T) {
	cfg := testConfig()
	cfg.Models[0].Pooling = config.PoolingMean
	tg := startGateway(t, cfg)
	reg := tg.RegistryAddr().String()
	d := startReal(t, workerConfig(t, "decode-embed", config.RoleDecode, config.TransferTCP, reg)).attach(tg)
	p := startReal(t, workerConfig(t, "prefill-embed", config.RolePrefill, config.TransferTCP, reg)).attach(tg)
	text := strings.Repeat("a longer input that spans several pages ", 6)
	resp, err := tg.api().embeddings(context.Background(), embeddingRequest{Model: "tiny", Input: text})
	if err != nil {
		t.Fatal(err)
	}
	ids := completionTokens(t, text)
	if len(resp.Data) != 1 || resp.Usage.PromptTokens != int64(len(ids)) {
		t.Fatalf("%d vectors, usage %+v; want 1, %d tokens", len(resp.Data), resp.Usage, len(ids))
	}
	checkEmbedding(t, "mean pooling", resp.Data[0].Embedding, nil, ids, engine.PoolingMean)
	last, err := float64ref.Embedding(modelDir, nil, ids, engine.PoolingLast)
	if err != nil {
		t.Fatal(err)
	}
	var dot float64
	for j, v := range resp.Data[0].Embedding {
		dot += v * last[j]
	}
	if dot > 0.9999 {
		t.Fatalf("mean pooling gave the last position's vector (cosine %v)", dot)
	}
	p.poolQuiet()
	d.poolQuiet()
}

func toInt64(ids []int32) []int64 {
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[i] = int64(id)
	}
	return out
}

// TestEmbeddingsUnsupportedBackend: a model whose workers answer Embed
// Unimplemented (a backend without hidden states: cuda) is a 400 naming
// the model, and bills nothing.
func TestEmbeddingsUnsupportedBackend(t *testing.T) {
	tg := startGateway(t, testConfig())
	newFake(tg, controlpb.Role_ROLE_BOTH, 256, nil).start()
	code, _, body := tg.post("/v1/embeddings", map[string]any{"model": "tiny", "input": "hello"})
	if e := decodeEnvelope(t, body); code != 400 || str(e.Error.Param) != "model" || str(e.Error.Code) != "unsupported_value" ||
		!strings.Contains(e.Error.Message, "does not compute embeddings") {
		t.Fatalf("embeddings on a backend without them: %d %s", code, body)
	}
	usage, err := tg.Store().Usage(context.Background(), "acme", time.Now().Add(-time.Hour), time.Now().Add(time.Minute))
	for _, u := range usage {
		if u.PromptTokens != 0 || u.BilledTokens != 0 {
			err = fmt.Errorf("billed %+v", u)
		}
	}
	if err != nil {
		t.Fatalf("store usage: %v; want no token billed", err)
	}
}

// TestRealEmbeddingsUnderAdapter: /v1/embeddings of a LoRA adapter the
// tenant owns runs on its base model under the adapter, which the gateway
// pushes to the worker when the worker refuses it for want of it: the
// vectors match the float64 reference with the adapter merged, far from
// the base model's, the base model's own vectors are unchanged, the
// response and the usage name the adapter, and a tenant it is not shared
// with gets the 404 of a missing model.
func TestRealEmbeddingsUnderAdapter(t *testing.T) {
	tg := startGateway(t, testConfig())
	w := startReal(t, workerConfig(t, "both-embed-ad", config.RoleBoth, config.TransferTCP, tg.RegistryAddr().String())).attach(tg)
	ctx := context.Background()
	cfg, weights, a := realAdapterFiles(t, 7)
	if _, err := tg.adapters.Register(ctx, adapters.Upload{Base: "tiny", Name: "ad", Owner: "acme", ConfigJSON: cfg, Weights: weights}); err != nil {
		t.Fatal(err)
	}
	texts := []string{"Once upon a time", realPrompt}
	var tokens [][]int32
	var total int64
	for _, s := range texts {
		tokens = append(tokens, completionTokens(t, s))
		total += int64(len(tokens[len(tokens)-1]))
	}
	resp, err := tg.api().embeddings(ctx, embeddingRequest{Model: "tiny:ad", Input: texts})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Model != "tiny:ad" || len(resp.Data) != len(texts) || resp.Usage.PromptTokens != total {
		t.Fatalf("response for model %q with %d vectors, usage %+v; want tiny:ad, %d vectors, %d tokens", resp.Model, len(resp.Data), resp.Usage, len(texts), total)
	}
	for i, d := range resp.Data {
		checkEmbedding(t, "under the adapter: "+texts[i], d.Embedding, a, tokens[i], engine.PoolingLast)
		base, err := float64ref.Embedding(modelDir, nil, tokens[i], engine.PoolingLast)
		if err != nil {
			t.Fatal(err)
		}
		var dot float64
		for j, v := range d.Embedding {
			dot += v * base[j]
		}
		if dot > 0.999 {
			t.Fatalf("input %d: cosine %.5f to the base model's vector; the adapter should move it", i, dot)
		}
	}
	base, err := tg.api().embeddings(ctx, embeddingRequest{Model: "tiny", Input: texts[0]})
	if err != nil || len(base.Data) != 1 || base.Model != "tiny" {
		t.Fatalf("the base model's embedding: %v, %+v", err, base)
	}
	checkEmbedding(t, "the base model", base.Data[0].Embedding, nil, tokens[0], engine.PoolingLast)

	usage, err := tg.Store().Usage(ctx, "acme", time.Now().Add(-time.Hour), time.Now().Add(time.Minute))
	if err != nil || len(usage) != 2 || usage[0].Model != "tiny" || usage[1].Model != "tiny:ad" ||
		usage[1].Requests != 1 || usage[1].PromptTokens != total || usage[0].PromptTokens != int64(len(tokens[0])) {
		t.Fatalf("acme's usage %+v, %v; want one request of %d prompt tokens under tiny:ad, one of %d under tiny", usage, err, total, len(tokens[0]))
	}

	beta := tg.as("beta")
	s1, _, forbidden := beta.post("/v1/embeddings", map[string]any{"model": "tiny:ad", "input": "x"})
	s2, _, missing := beta.post("/v1/embeddings", map[string]any{"model": "tiny:nope", "input": "x"})
	if s1 != 404 || s2 != 404 || string(forbidden) != strings.ReplaceAll(string(missing), "tiny:nope", "tiny:ad") {
		t.Fatalf("beta's embeddings of acme's adapter: %d %s\nof a missing one: %d %s\nwant the same 404", s1, forbidden, s2, missing)
	}
	w.poolQuiet()
}

package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway/internal/adapters"
	"github.com/warden-ai/warden/gateway/internal/admission"
	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/gateway/internal/embeddings"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/gateway/internal/registry"
	"github.com/warden-ai/warden/gateway/internal/tokenize"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/reasoning"
	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/internal/toolcall"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/worker/model"
)

// modelTokenizer is the tokenizer of one model as its workers ship it.
type modelTokenizer struct {
	tok *tokenizer.Tokenizer
	sha string
	// addBOS: completions get the BOS token prepended (see encodePrompt).
	addBOS bool
	// tools is the tool-call format of the chat template (toolcall.Detect).
	tools toolcall.Format
	// reasoning is the model's reasoning format: models[].reasoning_parser,
	// else reasoning.Detect of the chat template.
	reasoning reasoning.Format
	// shape is the model's layer geometry (ModelAssetsResponse.shape),
	// what LoRA adapters are checked against; nil when the worker sent
	// none.
	shape *model.Config
}

// modelShape implements adapters.Shapes with the shape the model's
// workers reported.
func (g *Gateway) modelShape(base string) (*model.Config, bool) {
	mt := g.tokenizers.get(base)
	if mt == nil || mt.shape == nil {
		return nil, false
	}
	return mt.shape, true
}

// shapeConfig is the configuration a ModelShape describes, nil when it
// describes no model.
func shapeConfig(s *controlpb.ModelShape) *model.Config {
	c := &model.Config{NumHiddenLayers: int(s.GetNumHiddenLayers()), HiddenSize: int(s.GetHiddenSize()),
		IntermediateSize: int(s.GetIntermediateSize()), NumAttentionHeads: int(s.GetNumAttentionHeads()),
		NumKeyValueHeads: int(s.GetNumKeyValueHeads()), HeadDim: int(s.GetHeadDim())}
	if c.NumHiddenLayers <= 0 || c.HiddenSize <= 0 || c.IntermediateSize <= 0 || c.NumAttentionHeads <= 0 ||
		c.NumKeyValueHeads <= 0 || c.HeadDim <= 0 {
		return nil
	}
	return c
}

// tokenizers holds each model's tokenizer. A model's tokenizer is set by
// the first worker that registers for it (ModelAssets), and may only be
// replaced when no healthy worker serves the old one; a worker whose
// tokenizer differs from the one healthy workers serve is refused.
type tokenizers struct {
	reg    *registry.Registry
	logger *slog.Logger
	// reasoning holds the configured reasoning formats
	// (models[].reasoning_parser) of the models that set one.
	reasoning map[string]reasoning.Format

	mu     sync.Mutex
	models map[string]*modelTokenizer
}

// get returns model's tokenizer, or nil before any worker registered.
func (t *tokenizers) get(model string) *modelTokenizer {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.models[model]
}

// accept vets a registering worker's tokenizer (registry.Config.Accept;
// the registry runs registrations one at a time). The assets come in one
// message of up to controlpb.MaxAssetsMessageBytes, far above gRPC's
// default 4 MiB receive limit (real tokenizer.json files are 9-35 MB), and
// are checked against the tokenizer_sha256 the worker registered with.
func (t *tokenizers) accept(ctx context.Context, info *controlpb.WorkerInfo, client controlpb.WorkerClient) error {
	cur := t.get(info.Model)
	if cur != nil && cur.sha == info.TokenizerSha256 {
		return nil
	}
	if cur != nil {
		for _, w := range t.reg.Healthy(info.Model) {
			if w.ID != info.WorkerId && w.TokenizerSHA256 == cur.sha {
				return refuse(refusedTokenizerMismatch, codes.FailedPrecondition,
					"worker %s: tokenizer_sha256 %s differs from %s, the tokenizer of model %s served by worker %s",
					info.WorkerId, info.TokenizerSha256, cur.sha, info.Model, w.ID)
			}
		}
	}
	assets, err := client.ModelAssets(ctx, &controlpb.ModelAssetsRequest{}, grpc.MaxCallRecvMsgSize(controlpb.MaxAssetsMessageBytes))
	if err != nil {
		code := codes.Unavailable
		if status.Code(err) == codes.ResourceExhausted {
			code = codes.FailedPrecondition // too large: retrying cannot help
		}
		return refuse(refusedAssetsUnavailable, code, "worker %s: fetching model assets from %s: %v", info.WorkerId, info.ControlAddr, err)
	}
	start := time.Now()
	mt, err := parseAssets(info, assets)
	if err != nil {
		return refuse(refusedAssetsInvalid, codes.FailedPrecondition, "worker %s: %v", info.WorkerId, err)
	}
	if f := t.reasoning[info.Model]; f != "" {
		mt.reasoning = f
	}
	t.logger.Info("model tokenizer loaded", "model", info.Model, "worker", info.WorkerId,
		"bytes", len(assets.GetTokenizerJson()), "duration", time.Since(start), "tokenizer_sha256", mt.sha)
	t.mu.Lock()
	t.models[info.Model] = mt
	t.mu.Unlock()
	return nil
}

// parseAssets checks a worker's model assets against what it registered
// with and loads the tokenizer.
func parseAssets(info *controlpb.WorkerInfo, a *controlpb.ModelAssetsResponse) (*modelTokenizer, error) {
	sum := sha256.Sum256(a.GetTokenizerJson())
	sha := hex.EncodeToString(sum[:])
	switch {
	case a.GetModel() != info.Model:
		return nil, fmt.Errorf("model assets are for model %q, registered for %q", a.GetModel(), info.Model)
	case sha != info.TokenizerSha256 || a.GetTokenizerSha256() != info.TokenizerSha256:
		return nil, fmt.Errorf("tokenizer.json hashes to %s, registered as %s", sha, info.TokenizerSha256)
	}
	var opts []tokenizer.Option
	if len(a.GetChatTemplateJinja()) > 0 {
		opts = append(opts, tokenizer.WithChatTemplate(string(a.GetChatTemplateJinja())))
	}
	tok, err := tokenizer.Parse(a.GetTokenizerJson(), a.GetTokenizerConfigJson(), opts...)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return &modelTokenizer{tok: tok, sha: sha, addBOS: wantsBOS(tok, a.GetTokenizerConfigJson()),
		tools: toolcall.Detect(tok.ChatTemplate()), reasoning: reasoning.Detect(tok.ChatTemplate()), shape: shapeConfig(a.GetShape())}, nil
}

// reasoningOverrides are the reasoning formats the configuration sets
// (validated: ParseFormat cannot fail), by model.
func reasoningOverrides(models []config.Model) map[string]reasoning.Format {
	out := make(map[string]reasoning.Format)
	for _, m := range models {
		if f, _ := reasoning.ParseFormat(m.ReasoningParser); f != "" {
			out[m.Name] = f
		}
	}
	return out
}

// wantsBOS decides whether completion prompts start with BOS: when the
// tokenizer has a BOS token and tokenizer_config.json does not set
// add_bos_token to false. That is what Hugging Face's Llama tokenizers do
// when encoding a prompt, so the model sees the sequence start it was
// trained with. Chat prompts get BOS from the chat template instead.
func wantsBOS(tok *tokenizer.Tokenizer, configJSON []byte) bool {
	if _, ok := tok.BOS(); !ok {
		return false
	}
	var cfg struct {
		AddBOS *bool `json:"add_bos_token"`
	}
	if len(configJSON) > 0 && json.Unmarshal(configJSON, &cfg) == nil && cfg.AddBOS != nil {
		return *cfg.AddBOS
	}
	return true
}

// encodePrompt tokenizes a request exactly as it will be prefilled: chat
// messages through the model's chat template (with the generation
// prompt), a completion prompt as plain text after BOS when wantsBOS.
// Rejections are *api.Error.
func (mt *modelTokenizer) encodePrompt(req *api.GenerateRequest) ([]int32, error) {
	return mt.Encode(req, true, true)
}

// Encode implements tokenize.Tokenizer: encodePrompt, except that with
// generationPrompt false a chat is rendered without the generation prompt
// and with special false a completion prompt gets no BOS.
func (mt *modelTokenizer) Encode(req *api.GenerateRequest, special, generationPrompt bool) ([]int32, error) {
	if req.Kind == api.KindChat {
		if mt.tok.ChatTemplate() == "" {
			return nil, api.InvalidRequest("messages", api.CodeInvalidValue,
				fmt.Sprintf("The model %q has no chat template; use /v1/completions.", req.Model))
		}
		msgs, opts, err := mt.chatInput(req)
		if err != nil {
			return nil, err
		}
		opts.AddGenerationPrompt = generationPrompt
		ids, err := mt.tok.EncodeChat(msgs, opts)
		switch {
		case errors.Is(err, tokenizer.ErrInvalidMessage), errors.Is(err, tokenizer.ErrChatTemplate):
			return nil, api.InvalidRequest("messages", api.CodeInvalidValue,
				fmt.Sprintf("The messages cannot be rendered with the model's chat template: %v", err))
		case err != nil:
			return nil, fmt.Errorf("gateway: chat template: %w", err)
		}
		return ids, nil
	}
	ids, err := mt.tok.Encode(req.Prompt)
	if err != nil {
		return nil, api.InvalidRequest("prompt", api.CodeInvalidValue, fmt.Sprintf("The prompt cannot be tokenized: %v", err))
	}
	if bos, ok := mt.tok.BOS(); ok && mt.addBOS && special {
		ids = append([]int32{bos}, ids...)
	}
	return ids, nil
}

// Decode implements tokenize.Tokenizer.
func (mt *modelTokenizer) Decode(ids []int32) ([]byte, error) { return mt.tok.Decode(ids) }

// VocabSize implements tokenize.Tokenizer.
func (mt *modelTokenizer) VocabSize() int { return mt.tok.VocabSize() }

var _ tokenize.Tokenizer = (*modelTokenizer)(nil)

// tokenizeModels serves /tokenize and /detokenize their models.
type tokenizeModels struct{ g *Gateway }

var _ tokenize.Models = tokenizeModels{}

// Open implements tokenize.Models: the model must be one p may use (as
// /v1/models lists them) and served; the call counts as one request
// against p's request rate and concurrency, billed no tokens. A LoRA
// adapter p may use tokenizes as its base model.
func (m tokenizeModels) Open(ctx context.Context, p api.Principal, model string) (tokenize.Tokenizer, int64, error) {
	g := m.g
	// name is what p asked for, which errors name; model is what serves it.
	name, ar := model, tenant.AcquireRequest{Model: model}
	if ad, err := (service{g}).resolveAdapter(ctx, p.Tenant, name); err != nil {
		return nil, 0, err
	} else if ad != nil {
		model, ar.Model, ar.UsageModel = ad.BaseModel, ad.BaseModel, name
	}
	mt, err := g.openModel(ctx, p, model, name)
	if err != nil {
		return nil, 0, err
	}
	lease, err := g.store.Acquire(ctx, p.Tenant, ar)
	if err != nil {
		return nil, 0, limitError(name, ar, "model", err)
	}
	g.releaseLease(lease, "", tenant.Consumed{})
	st, _, err := g.admission.State(ctx, model)
	if err != nil {
		return nil, 0, service{g}.storeError(err)
	}
	return mt, st.Effective, nil
}

// openModel returns the tokenizer of model (asked for as name, which
// errors name: an adapter is served by its base), which must be one p may use
// (as /v1/models lists them) and served. Rejections are *api.Error.
func (g *Gateway) openModel(ctx context.Context, p api.Principal, model, name string) (*modelTokenizer, error) {
	if !g.admission.Has(model) || !g.auth.info(p.Tenant).allowed.Allows(model) {
		return nil, api.ModelNotFound(name)
	}
	if ml, found, err := g.modelLimits.Get(ctx, model); err != nil {
		return nil, service{g}.storeError(err)
	} else if found && !ml.Allows(p.Tenant) {
		return nil, api.ModelNotFound(name)
	}
	if err := g.startingError(model); err != nil {
		return nil, err
	}
	mt := g.tokenizers.get(model)
	if mt == nil {
		return nil, api.ModelUnavailable(model, "no worker serving it has registered yet")
	}
	return mt, nil
}

// embedService serves /v1/embeddings (gateway/internal/embeddings).
type embedService struct{ g *Gateway }

var _ embeddings.Service = embedService{}

// Embed implements embeddings.Service: an alias is resolved, the model
// checked as for any request, the inputs tokenized (strings as a
// completion prompt) and each held to the model's context window; the
// tenant's limits admit the inputs' tokens, which are billed as prompt
// tokens once the vectors are computed (nothing on a failure). A LoRA
// adapter p may use runs on its base model, whose limits and pooling
// apply, under the adapter; the result and the usage name the adapter.
func (s embedService) Embed(ctx context.Context, p api.Principal, requestID string, req *embeddings.Request) (*embeddings.Result, error) {
	g := s.g
	if !g.admission.Has(req.Model) {
		if target, ok := g.aliases.Resolve(ctx, req.Model); ok {
			req.Model = target
		}
	}
	// req.Model is what p asked for (errors and usage name it); model
	// is what serves it.
	model, ar := req.Model, tenant.AcquireRequest{Model: req.Model}
	ad, err := service{g}.resolveAdapter(ctx, p.Tenant, req.Model)
	if err != nil {
		return nil, err
	} else if ad != nil {
		model, ar.Model, ar.UsageModel = ad.BaseModel, ad.BaseModel, req.Model
	}
	mt, err := g.openModel(ctx, p, model, req.Model)
	if err != nil {
		return nil, err
	}
	if e := embeddings.CheckVocab(req, mt.tok.VocabSize()); e != nil {
		return nil, e
	}
	st, _, err := g.admission.State(ctx, model)
	if err != nil {
		return nil, service{g}.storeError(err)
	}
	if !st.Serving {
		return nil, api.ModelUnavailable(model, st.Reason)
	}
	inputs := make([]*controlpb.EmbedInput, len(req.Inputs))
	var total int64
	for i, in := range req.Inputs {
		ids, param := in.Tokens, embeddings.InputParam(req, i)
		if ids == nil {
			if ids, err = mt.Encode(&api.GenerateRequest{Kind: api.KindCompletion, Model: model, Prompt: in.Text}, true, true); err != nil {
				var e *api.Error
				if errors.As(err, &e) {
					e.Param = param
				}
				return nil, err
			}
		}
		if n := int64(len(ids)); n > st.Effective {
			return nil, api.InvalidRequest(param, api.CodeContextLength, fmt.Sprintf(
				"This model's maximum context length is %d tokens; '%s' has %d tokens.", st.Effective, param, n))
		}
		inputs[i] = &controlpb.EmbedInput{Tokens: ids}
		total += int64(len(ids))
	}
	if !g.begin() {
		return nil, abortedError(lifecycle.CauseShutdown, 0)
	}
	defer g.running.Done()
	ar.Tokens = total
	lease, err := g.store.Acquire(ctx, p.Tenant, ar)
	if err != nil {
		return nil, limitError(req.Model, ar, "input", err)
	}
	pooling := controlpb.Pooling_POOLING_LAST
	if g.pooling(model) == config.PoolingMean {
		pooling = controlpb.Pooling_POOLING_MEAN
	}
	// Bounded like a generation (gateway.request_timeout): a worker
	// waiting for pages gives up then.
	rctx, cancel := context.WithTimeout(ctx, g.cfg.Gateway.RequestTimeout)
	vectors, err := s.run(rctx, p, requestID, model, ad, pooling, inputs)
	cancel()
	var used tenant.Consumed
	if err == nil {
		used.PromptTokens = total
	}
	g.releaseLease(lease, requestID, used)
	g.metrics.billed(p.Tenant, used.PromptTokens, 0)
	if err != nil {
		return nil, err
	}
	return &embeddings.Result{Model: req.Model, Vectors: vectors, PromptTokens: total}, nil
}

// run computes the inputs' embeddings on workers that prefill, under
// adapter ad (nil: the base model), pushed to a worker that does not
// hold it: as many inputs in one Embed call (one engine batch) as the
// chosen worker's pool holds at once, the next ones in the next call.
func (s embedService) run(ctx context.Context, p api.Principal, requestID, model string, ad *tenant.Adapter, pooling controlpb.Pooling, inputs []*controlpb.EmbedInput) ([][]float32, error) {
	g := s.g
	out := make([][]float32, 0, len(inputs))
	var hash string
	var size int64
	if ad != nil {
		hash, size = ad.Hash, ad.Bytes
	}
	for call := uint64(1); len(inputs) > 0; {
		w, err := g.reg.PickPrefiller(model, int64(len(inputs[0].GetTokens())), hash, size)
		if err != nil {
			return nil, api.ModelUnavailable(model, "no worker that computes it is available")
		}
		pool := w.Snapshot().Pool
		pt := int64(max(pool.PageTokens, 1))
		n, pages := 0, int64(0)
		for ; n < len(inputs); n++ {
			np := (int64(len(inputs[n].GetTokens())) + pt - 1) / pt
			if n > 0 && (pages+np)*pt > pool.UsableTokens() {
				break
			}
			pages += np
		}
		done := w.BeginFor(p.Tenant, pages)
		// Each call is its own attempt (epoch) of the request's owner; the
		// one after an adapter push too.
		var resp *controlpb.EmbedResponse
		err = g.adapters.Retry(ctx, w.Client(), ad, func() (err error) {
			owner := &controlpb.Owner{Tenant: p.Tenant, RequestId: requestID, Epoch: call}
			if ad != nil {
				owner.Adapter = ad.Hash
			}
			call++
			resp, err = w.Client().Embed(ctx, &controlpb.EmbedRequest{
				Owner: owner, Inputs: inputs[:n], Pooling: pooling, TenantWeight: int32(g.auth.info(p.Tenant).weight),
				Adapter: adapters.Ref(ad),
			})
			return err
		}, func(loaded int64) { w.AdapterLoaded(ad.Hash, loaded) })
		done()
		if err != nil {
			return nil, s.workerError(ctx, w, model, err)
		}
		if len(resp.GetEmbeddings()) != n {
			g.logger.ErrorContext(ctx, "worker answered Embed with the wrong number of vectors", "worker", w.ID(),
				"want", n, "got", len(resp.GetEmbeddings()))
			return nil, api.Internal()
		}
		for _, e := range resp.GetEmbeddings() {
			out = append(out, e.GetValues())
		}
		inputs = inputs[n:]
	}
	return out, nil
}

// workerError maps a failed Embed call on w to the client's error.
func (s embedService) workerError(ctx context.Context, w *registry.Worker, model string, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return abortedError(lifecycle.CauseDeadline, s.g.cfg.Gateway.RequestTimeout)
	}
	if ctx.Err() != nil {
		return ctx.Err() // the client went away
	}
	if registry.ConnectionLost(err) {
		s.g.reg.Suspect(w.ID(), err)
	}
	if status.Code(err) == codes.Unimplemented {
		return api.InvalidRequest("model", api.CodeUnsupportedValue, fmt.Sprintf(
			"The model %q is served by workers whose backend does not compute embeddings.", model))
	}
	_, client := workerFailure(err, "")
	if client.Status >= 500 {
		s.g.logger.WarnContext(ctx, "Embed failed", "worker", w.ID(), "err", err)
	}
	return client
}

// pooling is model's configured embedding pooling (last by default).
func (g *Gateway) pooling(model string) config.Pooling {
	for _, m := range g.cfg.Models {
		if m.Name == model && m.Pooling != "" {
			return m.Pooling
		}
	}
	return config.PoolingLast
}

// capacities converts a model's healthy workers for admission.
func capacities(ws []registry.Snapshot) []admission.WorkerCapacity {
	out := make([]admission.WorkerCapacity, len(ws))
	for i, w := range ws {
		out[i] = admission.WorkerCapacity{ID: w.ID, Role: w.Role, CapacityTokens: w.Pool.CapacityTokens,
			UnusableTokens: w.Pool.CapacityTokens - w.Pool.UsableTokens(), MaxPositions: w.ModelMaxContext}
	}
	return out
}

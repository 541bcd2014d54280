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
	"github.com/warden-ai/warden/gateway/internal/admission"
	"github.com/warden-ai/warden/gateway/internal/api"
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
	if !g.admission.Has(model) || !g.auth.info(p.Tenant).allowed.Allows(model) {
		return nil, 0, api.ModelNotFound(name)
	}
	if ml, found, err := g.modelLimits.Get(ctx, model); err != nil {
		return nil, 0, service{g}.storeError(err)
	} else if found && !ml.Allows(p.Tenant) {
		return nil, 0, api.ModelNotFound(name)
	}
	if err := g.startingError(model); err != nil {
		return nil, 0, err
	}
	mt := g.tokenizers.get(model)
	if mt == nil {
		return nil, 0, api.ModelUnavailable(model, "no worker serving it has registered yet")
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

// capacities converts a model's healthy workers for admission.
func capacities(ws []registry.Snapshot) []admission.WorkerCapacity {
	out := make([]admission.WorkerCapacity, len(ws))
	for i, w := range ws {
		out[i] = admission.WorkerCapacity{ID: w.ID, Role: w.Role, CapacityTokens: w.Pool.CapacityTokens,
			UnusableTokens: w.Pool.CapacityTokens - w.Pool.UsableTokens(), MaxPositions: w.ModelMaxContext}
	}
	return out
}

package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/kvpool"
	"github.com/warden-ai/warden/worker/reference"
	"github.com/warden-ai/warden/worker/runtime"
)

// referenceKV is the reference runtime's KV pool: one sequence of
// DefaultContext tokens of either model, with room to spare.
const referenceKV = 64 << 20

// Reference runs a model in the test process, outside any worker, and
// turns its output into text exactly as the gateway does: what a request
// served by warden must return. It is safe for concurrent use (sequences
// run one at a time).
type Reference struct {
	dir    string // the model directory
	tok    *tokenizer.Tokenizer
	addBOS bool
	rt     *runtime.Runtime
	stop   context.CancelFunc
	done   chan struct{}

	mu sync.Mutex
	n  int
}

// Output is one reference generation.
type Output struct {
	// Text is the generated text (special tokens render as nothing).
	Text string
	// Tokens are the generated token IDs, without a final stop token.
	Tokens []int32
	// Logprobs are the tokens' logprobs when the sampling asked for them.
	Logprobs []*engine.Logprobs
	// PromptTokens and CompletionTokens are the engine's counts, which the
	// response's usage must equal (completion includes a final stop
	// token).
	PromptTokens, CompletionTokens int
	// Finish is "stop" or "length".
	Finish string
}

// NewReference loads the model in dir with one compute thread (the engine
// is deterministic whatever the thread count). Close it when done.
func NewReference(dir string) (*Reference, error) {
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, err
	}
	addBOS, err := wantsBOS(tok, dir)
	if err != nil {
		return nil, err
	}
	rt, err := runtime.Open(runtime.Options{ModelDir: dir, Threads: 1, PageTokens: 16, KVBytes: referenceKV, ChunkTokens: 512, MaxBatch: 1})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Reference{dir: dir, tok: tok, addBOS: addBOS, rt: rt, stop: cancel, done: make(chan struct{})}
	go func() {
		_ = rt.Run(ctx)
		close(r.done)
	}()
	return r, nil
}

// Close stops the engine and frees the model.
func (r *Reference) Close() error {
	r.stop()
	<-r.done
	return r.rt.Close()
}

// Tokenizer returns the model's tokenizer.
func (r *Reference) Tokenizer() *tokenizer.Tokenizer { return r.tok }

// wantsBOS is the gateway's rule for completion prompts: BOS first when the
// tokenizer has one and tokenizer_config.json does not set add_bos_token
// to false (gateway/models.go).
func wantsBOS(tok *tokenizer.Tokenizer, dir string) (bool, error) {
	if _, ok := tok.BOS(); !ok {
		return false, nil
	}
	data, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	} else if err != nil {
		return false, err
	}
	var cfg struct {
		AddBOS *bool `json:"add_bos_token"`
	}
	if json.Unmarshal(data, &cfg) == nil && cfg.AddBOS != nil {
		return *cfg.AddBOS, nil
	}
	return true, nil
}

// ChatPrompt tokenizes chat messages as the gateway does: the model's chat
// template with the generation prompt.
func (r *Reference) ChatPrompt(msgs []tokenizer.Message) ([]int32, error) {
	return r.tok.ApplyChatTemplate(msgs, true)
}

// CompletionPrompt tokenizes a completion prompt as the gateway does: the
// text after BOS (see wantsBOS).
func (r *Reference) CompletionPrompt(prompt string) ([]int32, error) {
	ids, err := r.tok.Encode(prompt)
	if err != nil {
		return nil, err
	}
	if bos, ok := r.tok.BOS(); ok && r.addBOS {
		ids = append([]int32{bos}, ids...)
	}
	return ids, nil
}

// Embedding is the float64 reference embedding of a completion-style
// input as /v1/embeddings computes it: prompt tokenized as a completion
// prompt, its final hidden states pooled with p and L2-normalised.
func (r *Reference) Embedding(prompt string, p engine.Pooling) ([]float64, error) {
	ids, err := r.CompletionPrompt(prompt)
	if err != nil {
		return nil, err
	}
	return reference.Embedding(r.dir, nil, ids, p)
}

// Chat is the greedy output for chat messages with maxTokens.
func (r *Reference) Chat(ctx context.Context, msgs []tokenizer.Message, maxTokens int) (Output, error) {
	p, err := r.ChatPrompt(msgs)
	if err != nil {
		return Output{}, err
	}
	return r.Run(ctx, p, Greedy(maxTokens))
}

// ChatUnder is Chat under the LoRA adapter whose PEFT files are
// configJSON (adapter_config.json) and weights
// (adapter_model.safetensors), computed by the same engine as warden's
// workers.
func (r *Reference) ChatUnder(ctx context.Context, configJSON, weights []byte, msgs []tokenizer.Message, maxTokens int) (Output, error) {
	a, err := lora.Parse(configJSON, weights, &r.rt.Model.Config)
	if err != nil {
		return Output{}, fmt.Errorf("reference: %w", err)
	}
	if r.rt.PrepareAdapter == nil {
		return Output{}, fmt.Errorf("reference: the backend serves no adapters")
	}
	ad, err := r.rt.PrepareAdapter(a)
	if err != nil {
		return Output{}, fmt.Errorf("reference: %w", err)
	}
	p, err := r.ChatPrompt(msgs)
	if err != nil {
		return Output{}, err
	}
	return r.run(ctx, p, Greedy(maxTokens), ad)
}

// Completion is the greedy output for a completion prompt with maxTokens.
func (r *Reference) Completion(ctx context.Context, prompt string, maxTokens int) (Output, error) {
	p, err := r.CompletionPrompt(prompt)
	if err != nil {
		return Output{}, err
	}
	return r.Run(ctx, p, Greedy(maxTokens))
}

// Greedy is greedy decoding of at most maxTokens tokens, as the gateway
// asks for a request with temperature 0 (top_p 1, EOS stops).
func Greedy(maxTokens int) engine.Sampling {
	return engine.Sampling{Temperature: 0, TopP: 1, MaxTokens: maxTokens}
}

// Run generates from prompt tokens with sampling and decodes the output.
// For seeded sampling pass the request's temperature, top_p and seed: the
// engine's draws depend only on (seed, token index).
func (r *Reference) Run(ctx context.Context, prompt []int32, s engine.Sampling) (Output, error) {
	return r.run(ctx, prompt, s, nil)
}

// run is Run under adapter ad (nil: the base model).
func (r *Reference) run(ctx context.Context, prompt []int32, s engine.Sampling, ad engine.Adapter) (Output, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	owner := kvpool.Owner{Tenant: "reference", Request: fmt.Sprint(r.n), Epoch: 1}
	if ad != nil {
		owner.Adapter = ad.Hash()
	}
	pages, err := r.rt.Pool.Reserve(owner, len(prompt)+s.MaxTokens)
	if err != nil {
		return Output{}, fmt.Errorf("reference: %w", err)
	}
	defer func() { _, _ = r.rt.Pool.Release(owner) }()
	stream, err := r.rt.Engine.Submit(ctx, engine.Request{Owner: owner, Pages: pages, Prompt: prompt, Sampling: s, Adapter: ad})
	if err != nil {
		return Output{}, fmt.Errorf("reference: %w", err)
	}
	defer stream.Close()
	var out Output
	for {
		ev, err := stream.Next(ctx)
		if err != nil {
			return Output{}, fmt.Errorf("reference: %w", err)
		}
		switch ev.Kind {
		case engine.EventToken:
			out.Tokens = append(out.Tokens, ev.Token)
			if ev.Logprobs != nil {
				out.Logprobs = append(out.Logprobs, ev.Logprobs)
			}
		case engine.EventDone:
			res := ev.Result
			if res.Err != nil {
				return Output{}, fmt.Errorf("reference: %w", res.Err)
			}
			out.Finish = string(res.Finish)
			out.PromptTokens, out.CompletionTokens = res.PromptTokens, res.CompletionTokens
			out.Text, err = r.Decode(out.Tokens)
			return out, err
		}
	}
}

// Decode turns generated tokens into text as the gateway streams it:
// special tokens render as nothing, a character split across tokens is
// emitted whole, and an incomplete one at the end becomes U+FFFD.
func (r *Reference) Decode(ids []int32) (string, error) {
	dec := tokenizer.NewStreamDecoder(r.tok)
	var b strings.Builder
	for _, id := range ids {
		if r.tok.IsSpecial(id) {
			continue
		}
		s, err := dec.Add(id)
		if err != nil {
			return "", err
		}
		b.WriteString(s)
	}
	b.WriteString(dec.Flush())
	return b.String(), nil
}

package api

import (
	"context"
	"net/http"
	"time"
)

// Principal is the authenticated caller of a request.
type Principal struct {
	Tenant string // tenant ID; every request is charged and isolated by it
	KeyID  string // ID of the API key used (never the key itself)
	// Incarnation is the tenant record's immutable random value as of
	// authentication (tenant.Tenant.Incarnation): the prefix cache salts
	// the request's domain with it (DESIGN I8).
	Incarnation string
}

// PrincipalOf is the authenticated caller of the request whose context
// is ctx (a TenantRoute's handler); false outside an authenticated route.
func PrincipalOf(ctx context.Context) (Principal, bool) {
	info := infoFrom(ctx)
	if info == nil || info.principal.Tenant == "" {
		return Principal{}, false
	}
	return info.principal, true
}

// TenantRoute is an authenticated route of Config.TenantRoutes.
type TenantRoute struct {
	// Method and Pattern route it (chi patterns: "/v1/adapters/*").
	Method, Pattern string
	// MaxBodyBytes caps its body (413 above).
	MaxBodyBytes int64
	Handler      http.Handler
}

// Authenticator resolves an API key to a Principal.
//
// A rejected key (unknown, wrong, revoked, tenant disabled) must be reported
// as an *Error, normally InvalidAPIKey(...). Any other error is treated as a
// failure of the key store and answered 500, so an outage never looks like a
// bad key to the client.
type Authenticator interface {
	Authenticate(ctx context.Context, apiKey string) (Principal, error)
}

// Service is the gateway core as seen by the HTTP layer.
type Service interface {
	// Models lists the models the principal may use.
	Models(ctx context.Context, p Principal) ([]Model, error)
	// Generate admits and starts one request. Rejections (unknown model,
	// context too long, rate limits, no capacity) are returned here as
	// *Error, before any byte of the response is written.
	Generate(ctx context.Context, p Principal, req *GenerateRequest) (Generation, error)
}

// Generation is one running request.
//
// The handler calls Next until it returns an error (io.EOF after the final
// event), then calls Close exactly once. Close is also called when the
// handler stops early (client disconnect, write failure, panic), and must
// then abort the request everywhere. Next and Close are never called
// concurrently.
type Generation interface {
	// Next blocks for the next event and returns io.EOF after the final one.
	// It must return promptly (with ctx.Err() or any error) once ctx is
	// done: ctx is the HTTP request's context, cancelled when the client
	// disconnects.
	Next(ctx context.Context) (Event, error)
	// Close aborts the request if it has not finished; it is a no-op after
	// Next returned io.EOF.
	Close()
}

// Event is one step of a Generation. Any field may be empty.
//
// The final event carries FinishReason and Usage (Usage may also come in a
// later event, before io.EOF). A Generation that ends without a finish
// reason, or without usage, is treated as failed: the client sees an error,
// never a response that looks complete.
type Event struct {
	// TextDelta is the next piece of output text. It must be valid UTF-8
	// (the core decodes tokens incrementally); invalid text fails the request.
	TextDelta string
	// ReasoningDelta is the next piece of the model's reasoning (chat
	// requests to a model with a reasoning format: the text between
	// <think> and </think>); it comes before TextDelta. Valid UTF-8.
	ReasoningDelta string
	// Logprobs are the next generated tokens' log probabilities, in
	// order, when the request asked for them (GenerateRequest.Logprobs).
	// They need not arrive with the text of the same tokens (text may be
	// held back to match stop sequences).
	Logprobs []TokenLogprob
	// PromptLogprobs are the prompt's tokens with their log probabilities
	// (PromptToken), on the first event, when the request asked for them
	// (GenerateRequest.PromptScoring).
	PromptLogprobs []PromptToken
	// Choice is the index of the choice (GenerateRequest.N) the text,
	// logprobs, tool calls and finish reason belong to.
	Choice int
	// ToolCalls are the next steps of the tool calls parsed from the
	// output of choice Choice (chat requests with tools only); they come
	// after TextDelta. A call's first delta has its ID and name, indices
	// run 0, 1, ...
	ToolCalls []ToolCallDelta
	// FinishReason is "stop", "length", "tool_calls" (the output ended
	// with tool calls) or "content_filter" on the final event of Choice;
	// every choice gets one.
	FinishReason string
	// Usage is the honest token count of the whole request (I7): the
	// prompt once, the completion tokens of every choice.
	Usage *Usage
	// Headers (rate-limit state, for instance) are sent with the response
	// if they arrive before its first byte, and ignored afterwards.
	Headers http.Header
}

// Usage counts the tokens of one request.
type Usage struct {
	PromptTokens     int64 // prompt tokens actually prefilled
	CompletionTokens int64 // tokens actually generated
	// CachedTokens is the part of PromptTokens served from a prefix cache
	// instead of being computed (usage.prompt_tokens_details.cached_tokens).
	CachedTokens int64
}

// Model describes one model served to a principal.
type Model struct {
	ID      string
	Created int64  // Unix seconds
	OwnedBy string // shown as owned_by
	// ContextLength is the effective context window: the smaller of the
	// configured window and every serving worker's KV pool (I2).
	ContextLength int64
	// ConfiguredContextLength is the window set in configuration.
	ConfiguredContextLength int64
	// DType is the element type the serving workers compute with ("f16",
	// "bf16", "q8", ...), several joined by "," in order when they
	// differ; "" when no worker says.
	DType string
	// AliasFor is, for a model alias, the model it names (shown as
	// metadata.alias_for); "" for a model.
	AliasFor string
	// Parent is, for a LoRA adapter, its base model (shown as parent, as
	// vLLM lists LoRA modules); "" for a model.
	Parent string
}

// Kind says which endpoint a request came from.
type Kind string

// The two kinds of generation request.
const (
	KindChat       Kind = "chat"       // POST /v1/chat/completions
	KindCompletion Kind = "completion" // POST /v1/completions
)

// Message is one chat message. Content is plain text: text parts of an
// array-form content are concatenated in order, without separator.
type Message struct {
	Role    string // system, user, assistant, developer or tool
	Content string
	// ToolCalls are the calls of an assistant message.
	ToolCalls []ToolCall
	// ToolCallID is, in a tool message, the call it answers.
	ToolCallID string
	// ReasoningContent is an assistant's reasoning in an earlier turn
	// (reasoning_content), passed to the chat template.
	ReasoningContent string
}

// GenerateRequest is the validated, normalised form of both generation
// endpoints. Pointer fields are nil when the client did not send them; the
// core applies its defaults and its context-window checks.
type GenerateRequest struct {
	// RequestID is assigned by the gateway (I6); clients cannot choose it.
	RequestID string
	// ClientRequestID is the client's own x-client-request-id or
	// x-request-id header, kept for correlation only (printable ASCII,
	// at most 128 bytes; empty when absent or unusable).
	ClientRequestID string
	// User is the client's end-user identifier ("user"), opaque.
	User       string
	ReceivedAt time.Time
	Model      string
	Kind       Kind
	Messages   []Message // KindChat only; at least one
	Prompt     string    // KindCompletion only

	// MaxTokens is max_tokens or max_completion_tokens, in
	// [1, Config.MaxTokensLimit]; nil lets the core choose.
	MaxTokens   *int64
	Temperature *float64 // [0, 2]
	TopP        *float64 // (0, 1]
	Seed        *int64
	Stop        []string // at most 4, none empty
	// Speculative ("speculative", a warden extension) turns exact
	// speculative decoding on or off for this request; nil follows the
	// worker's setting. It never changes the output.
	Speculative *bool

	// The sampling controls with vLLM's semantics (decode_sampling.go);
	// zero values leave them off.
	TopK              int     // keep the K likeliest tokens; 0: off
	MinP              float64 // [0, 1]
	PresencePenalty   float64 // [-2, 2], over output tokens
	FrequencyPenalty  float64 // [-2, 2], over output tokens
	RepetitionPenalty float64 // (0, MaxRepetitionPenalty]; 0 when absent (off)
	// LogitBias is sorted by token, tokens distinct; the core checks them
	// against the model's vocabulary.
	LogitBias []LogitBias
	// Echo (completions) sends the prompt's text before the completion;
	// with Logprobs, the prompt's tokens' logprobs before the
	// completion's, with TopLogprobs alternatives each.
	Echo bool
	// PromptLogprobs is vLLM's prompt_logprobs (non-streaming only): the
	// prompt tokens' logprobs with that many alternatives each
	// (0..MaxTopLogprobs); nil when not asked for.
	PromptLogprobs *int

	Stream       bool
	IncludeUsage bool // stream_options.include_usage (streaming only)

	// Tools are the functions the model may call (chat only); the core
	// renders them through the model's chat template and parses its
	// output into ToolCallDelta events, refusing a model whose template
	// has no tool-call format it knows.
	Tools      []Tool
	ToolChoice ToolChoice
	// ParallelToolCalls allows several calls in one answer (default true).
	ParallelToolCalls bool
	// EnableThinking is passed to the chat template as enable_thinking
	// (chat_template_kwargs.enable_thinking, reasoning_effort, or the
	// Responses API's reasoning.effort); nil leaves the template's
	// default.
	EnableThinking *bool

	// Constraint is the structured-output constraint (response_format,
	// guided_*, text.format) in its wire form, constrain.Spec.Encode,
	// already accepted once within constrain.DefaultLimits; "" means
	// none. ConstraintParam is the field it came from, for errors.
	Constraint      string
	ConstraintParam string
	// Logprobs asks for each generated token's log probability and its
	// TopLogprobs (0..MaxTopLogprobs) most likely alternatives.
	Logprobs    bool
	TopLogprobs int
	// N is the number of choices (n), at least 1. The choices share one
	// prefill; each streams its own events (Event.Choice).
	N int

	// Priority is the scheduling priority asked for, in [0, MaxPriority];
	// 0 when absent. Higher is served sooner when workers are saturated.
	// The core must refuse one above the tenant's maximum (I8).
	Priority int
}

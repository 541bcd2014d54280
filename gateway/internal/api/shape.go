package api

import (
	"encoding/json"
	"strings"
)

// shape builds the OpenAI wire objects of one endpoint: the chunks of a
// stream and the single non-streaming response. Chunks name their
// choice's index (n > 1).
type shape interface {
	// first is the chunk sent for a choice before any text, or nil.
	first(choice int) any
	// delta is the chunk of a choice's next text and its tokens' logprobs.
	delta(choice int, text string, lps []TokenLogprob) any
	// reasoningDelta is the chunk of a choice's next reasoning text (chat
	// only).
	reasoningDelta(choice int, text string) any
	finish(choice int, reason string) any
	// toolDelta is the chunk of one tool-call delta of a choice (chat
	// only).
	toolDelta(choice int, d ToolCallDelta) any
	// usage is the extra chunk of stream_options.include_usage.
	usage(u Usage) any
	response(r result) any
}

// result is a whole generation, as collected for a non-streaming
// response: its choices (n) and usage.
type result struct {
	choices []choiceOut
	usage   Usage
	// prompt is the prompt's tokens with their logprobs, when asked for.
	prompt []PromptToken
}

// choiceOut is one whole choice of a non-streamed response.
type choiceOut struct {
	text string
	// reasoning is the model's reasoning, apart from text (chat only).
	reasoning string
	calls     []ToolCall
	// logprobs are the generated tokens' log probabilities when asked.
	logprobs []TokenLogprob
	finish   string
}

func newShape(req *GenerateRequest, created int64) shape {
	id := strings.TrimPrefix(req.RequestID, "req_")
	if req.Kind == KindChat {
		return &chatShape{id: "chatcmpl-" + id, created: created, model: req.Model, includeUsage: req.IncludeUsage, logprobs: req.Logprobs,
			promptLogprobs: req.PromptLogprobs}
	}
	return &completionShape{id: "cmpl-" + id, created: created, model: req.Model, includeUsage: req.IncludeUsage, logprobs: req.Logprobs,
		promptLogprobs: req.PromptLogprobs, offsets: make([]int, max(req.N, 1))}
}

type wireUsage struct {
	PromptTokens            int64             `json:"prompt_tokens"`
	CompletionTokens        int64             `json:"completion_tokens"`
	TotalTokens             int64             `json:"total_tokens"`
	PromptTokensDetails     promptDetails     `json:"prompt_tokens_details"`
	CompletionTokensDetails completionDetails `json:"completion_tokens_details"`
}

// promptDetails breaks down prompt_tokens as OpenAI does.
type promptDetails struct {
	// CachedTokens were served from a prefix cache rather than computed.
	CachedTokens int64 `json:"cached_tokens"`
}

// completionDetails breaks down completion_tokens as OpenAI does; warden
// has no predicted outputs and does not yet count reasoning tokens apart
// (they are in completion_tokens), so all are 0.
type completionDetails struct {
	ReasoningTokens          int64 `json:"reasoning_tokens"`
	AcceptedPredictionTokens int64 `json:"accepted_prediction_tokens"`
	RejectedPredictionTokens int64 `json:"rejected_prediction_tokens"`
}

func toWire(u Usage) *wireUsage {
	return &wireUsage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens,
		TotalTokens:         u.PromptTokens + u.CompletionTokens,
		PromptTokensDetails: promptDetails{CachedTokens: u.CachedTokens}}
}

// chunkUsage is a stream chunk's usage field: absent without
// include_usage; with it, null on every chunk but the usage chunk, as
// OpenAI sends it.
type chunkUsage struct {
	shown bool
	u     *wireUsage
}

// IsZero makes omitzero drop the field when it is not shown.
func (c chunkUsage) IsZero() bool { return !c.shown }

// MarshalJSON writes the usage object or null.
func (c chunkUsage) MarshalJSON() ([]byte, error) { return json.Marshal(c.u) }

// --- /v1/chat/completions ---

type chatShape struct {
	id, model    string
	created      int64
	includeUsage bool
	logprobs     bool
	// promptLogprobs is the request's prompt_logprobs (nil: not asked).
	promptLogprobs *int
}

// chatMessage is the answer; content is null when the answer is only
// tool calls, as OpenAI sends it.
type chatMessage struct {
	Role    string  `json:"role"`
	Content *string `json:"content"`
	// ReasoningContent is the model's reasoning, as vLLM returns it;
	// absent when the model did not reason.
	ReasoningContent *string        `json:"reasoning_content,omitempty"`
	ToolCalls        []wireToolCall `json:"tool_calls,omitempty"`
}

type wireFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type wireToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

// wireToolDelta is a tool call in a stream chunk: the first one of a
// call has its id, type and name.
type wireToolDelta struct {
	Index    int          `json:"index"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function wireFunction `json:"function"`
}

type chatChoice struct {
	Index        int           `json:"index"`
	Message      chatMessage   `json:"message"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason string        `json:"finish_reason"`
}

type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *wireUsage   `json:"usage"`
	// PromptLogprobs is vLLM's response-level prompt_logprobs.
	PromptLogprobs []map[string]wirePromptEntry `json:"prompt_logprobs,omitempty"`
}

type chatDelta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	ToolCalls        []wireToolDelta `json:"tool_calls,omitempty"`
}

type chatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        chatDelta     `json:"delta"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

type chatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []chatChunkChoice `json:"choices"`
	Usage   chunkUsage        `json:"usage,omitzero"`
}

func (s *chatShape) chunk(choices []chatChunkChoice, u *wireUsage) chatChunk {
	return chatChunk{ID: s.id, Object: "chat.completion.chunk", Created: s.created, Model: s.model,
		Choices: choices, Usage: chunkUsage{shown: s.includeUsage, u: u}}
}

func (s *chatShape) first(choice int) any {
	empty := ""
	return s.chunk([]chatChunkChoice{{Index: choice, Delta: chatDelta{Role: "assistant", Content: &empty}}}, nil)
}

func (s *chatShape) delta(choice int, text string, lps []TokenLogprob) any {
	return s.chunk([]chatChunkChoice{{Index: choice, Delta: chatDelta{Content: &text}, Logprobs: chatLogprobsOf(s.logprobs, lps)}}, nil)
}

func (s *chatShape) reasoningDelta(choice int, text string) any {
	return s.chunk([]chatChunkChoice{{Index: choice, Delta: chatDelta{ReasoningContent: &text}}}, nil)
}

func (s *chatShape) toolDelta(choice int, d ToolCallDelta) any {
	w := wireToolDelta{Index: d.Index, ID: d.ID, Function: wireFunction{Name: d.Name, Arguments: d.Arguments}}
	if d.ID != "" {
		w.Type = "function"
	}
	return s.chunk([]chatChunkChoice{{Index: choice, Delta: chatDelta{ToolCalls: []wireToolDelta{w}}}}, nil)
}

func (s *chatShape) finish(choice int, reason string) any {
	return s.chunk([]chatChunkChoice{{Index: choice, FinishReason: &reason}}, nil)
}

func (s *chatShape) usage(u Usage) any {
	return s.chunk([]chatChunkChoice{}, toWire(u))
}

func (s *chatShape) response(r result) any {
	out := make([]chatChoice, len(r.choices))
	for k, c := range r.choices {
		m := chatMessage{Role: "assistant", Content: &c.text}
		if len(c.calls) > 0 && c.text == "" {
			m.Content = nil
		}
		if c.reasoning != "" {
			m.ReasoningContent = &c.reasoning
		}
		for _, tc := range c.calls {
			m.ToolCalls = append(m.ToolCalls, wireToolCall{ID: tc.ID, Type: "function", Function: wireFunction{Name: tc.Name, Arguments: tc.Arguments}})
		}
		out[k] = chatChoice{Index: k, Message: m, Logprobs: chatLogprobsOf(s.logprobs, c.logprobs), FinishReason: c.finish}
	}
	return chatCompletion{ID: s.id, Object: "chat.completion", Created: s.created, Model: s.model,
		Choices: out, Usage: toWire(r.usage), PromptLogprobs: wirePromptLogprobs(s.promptLogprobs, r.prompt)}
}

// --- /v1/completions ---

type completionShape struct {
	id, model    string
	created      int64
	includeUsage bool
	logprobs     bool
	// promptLogprobs is the request's prompt_logprobs (nil: not asked).
	promptLogprobs *int
	offsets        []int // text_offset of each choice's next streamed token
}

type textChoice struct {
	Text         string              `json:"text"`
	Index        int                 `json:"index"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
	// PromptLogprobs is vLLM's choice-level prompt_logprobs.
	PromptLogprobs []map[string]wirePromptEntry `json:"prompt_logprobs,omitempty"`
}

// textCompletion is both the response and each stream chunk, as in OpenAI.
type textCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []textChoice `json:"choices"`
	Usage   chunkUsage   `json:"usage,omitzero"`
}

func (s *completionShape) object(choices []textChoice, showUsage bool, u *wireUsage) textCompletion {
	return textCompletion{ID: s.id, Object: "text_completion", Created: s.created, Model: s.model,
		Choices: choices, Usage: chunkUsage{shown: showUsage, u: u}}
}

func (s *completionShape) first(int) any { return nil }

func (s *completionShape) delta(choice int, text string, lps []TokenLogprob) any {
	c := textChoice{Text: text, Index: choice, Logprobs: completionLogprobsOf(s.logprobs, lps, s.offsets[choice])}
	s.offsets[choice] += bytesOf(lps)
	return s.object([]textChoice{c}, s.includeUsage, nil)
}

func (s *completionShape) finish(choice int, reason string) any {
	return s.object([]textChoice{{Index: choice, FinishReason: &reason}}, s.includeUsage, nil)
}

func (s *completionShape) usage(u Usage) any {
	return s.object([]textChoice{}, true, toWire(u))
}

// reasoningDelta is never called: completions are not parsed for
// reasoning.
func (s *completionShape) reasoningDelta(int, string) any { return nil }

// toolDelta is never called: completions have no tools.
func (s *completionShape) toolDelta(int, ToolCallDelta) any { return nil }

func (s *completionShape) response(r result) any {
	out := make([]textChoice, len(r.choices))
	for k, c := range r.choices {
		out[k] = textChoice{Text: c.text, Index: k, Logprobs: completionLogprobsOf(s.logprobs, c.logprobs, 0), FinishReason: &c.finish,
			PromptLogprobs: wirePromptLogprobs(s.promptLogprobs, r.prompt)}
	}
	return s.object(out, true, toWire(r.usage))
}

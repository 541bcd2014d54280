package api

import (
	"encoding/json"
	"strings"
)

// shape builds the OpenAI wire objects of one endpoint: the chunks of a
// stream and the single non-streaming response.
type shape interface {
	// first is the chunk sent before any text, or nil.
	first() any
	// delta is the chunk of the next text and its tokens' logprobs.
	delta(text string, lps []TokenLogprob) any
	finish(reason string) any
	// toolDelta is the chunk of one tool-call delta (chat only).
	toolDelta(d ToolCallDelta) any
	// usage is the extra chunk of stream_options.include_usage.
	usage(u Usage) any
	response(r result) any
}

// result is a whole generation, as collected for a non-streaming
// response.
type result struct {
	text  string
	calls []ToolCall
	// logprobs are the generated tokens' log probabilities when asked.
	logprobs []TokenLogprob
	finish   string
	usage    Usage
}

func newShape(req *GenerateRequest, created int64) shape {
	id := strings.TrimPrefix(req.RequestID, "req_")
	if req.Kind == KindChat {
		return &chatShape{id: "chatcmpl-" + id, created: created, model: req.Model, includeUsage: req.IncludeUsage, logprobs: req.Logprobs}
	}
	return &completionShape{id: "cmpl-" + id, created: created, model: req.Model, includeUsage: req.IncludeUsage, logprobs: req.Logprobs}
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
// has no reasoning or predicted-output tokens, so all are 0.
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
}

// chatMessage is the answer; content is null when the answer is only
// tool calls, as OpenAI sends it.
type chatMessage struct {
	Role      string         `json:"role"`
	Content   *string        `json:"content"`
	ToolCalls []wireToolCall `json:"tool_calls,omitempty"`
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
}

type chatDelta struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	ToolCalls []wireToolDelta `json:"tool_calls,omitempty"`
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

func (s *chatShape) first() any {
	empty := ""
	return s.chunk([]chatChunkChoice{{Delta: chatDelta{Role: "assistant", Content: &empty}}}, nil)
}

func (s *chatShape) delta(text string, lps []TokenLogprob) any {
	return s.chunk([]chatChunkChoice{{Delta: chatDelta{Content: &text}, Logprobs: chatLogprobsOf(s.logprobs, lps)}}, nil)
}

func (s *chatShape) toolDelta(d ToolCallDelta) any {
	w := wireToolDelta{Index: d.Index, ID: d.ID, Function: wireFunction{Name: d.Name, Arguments: d.Arguments}}
	if d.ID != "" {
		w.Type = "function"
	}
	return s.chunk([]chatChunkChoice{{Delta: chatDelta{ToolCalls: []wireToolDelta{w}}}}, nil)
}

func (s *chatShape) finish(reason string) any {
	return s.chunk([]chatChunkChoice{{FinishReason: &reason}}, nil)
}

func (s *chatShape) usage(u Usage) any {
	return s.chunk([]chatChunkChoice{}, toWire(u))
}

func (s *chatShape) response(r result) any {
	m := chatMessage{Role: "assistant", Content: &r.text}
	if len(r.calls) > 0 && r.text == "" {
		m.Content = nil
	}
	for _, c := range r.calls {
		m.ToolCalls = append(m.ToolCalls, wireToolCall{ID: c.ID, Type: "function", Function: wireFunction{Name: c.Name, Arguments: c.Arguments}})
	}
	return chatCompletion{ID: s.id, Object: "chat.completion", Created: s.created, Model: s.model,
		Choices: []chatChoice{{Message: m, Logprobs: chatLogprobsOf(s.logprobs, r.logprobs), FinishReason: r.finish}}, Usage: toWire(r.usage)}
}

// --- /v1/completions ---

type completionShape struct {
	id, model    string
	created      int64
	includeUsage bool
	logprobs     bool
	offset       int // text_offset of the next streamed token
}

type textChoice struct {
	Text         string              `json:"text"`
	Index        int                 `json:"index"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
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

func (s *completionShape) first() any { return nil }

func (s *completionShape) delta(text string, lps []TokenLogprob) any {
	c := textChoice{Text: text, Logprobs: completionLogprobsOf(s.logprobs, lps, s.offset)}
	s.offset += bytesOf(lps)
	return s.object([]textChoice{c}, s.includeUsage, nil)
}

func (s *completionShape) finish(reason string) any {
	return s.object([]textChoice{{FinishReason: &reason}}, s.includeUsage, nil)
}

func (s *completionShape) usage(u Usage) any {
	return s.object([]textChoice{}, true, toWire(u))
}

// toolDelta is never called: completions have no tools.
func (s *completionShape) toolDelta(ToolCallDelta) any { return nil }

func (s *completionShape) response(r result) any {
	return s.object([]textChoice{{Text: r.text, Logprobs: completionLogprobsOf(s.logprobs, r.logprobs, 0), FinishReason: &r.finish}}, true, toWire(r.usage))
}

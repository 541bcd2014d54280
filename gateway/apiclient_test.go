package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// A test client of the gateway's OpenAI-compatible API: typed bodies with
// the fields the tests send and read, sent as the official OpenAI client
// sends them (JSON, a bearer key, over tg.http), answers outside 2xx as an
// *apiError, and streams read as that client reads them. The package's
// tests use it rather than the official Go SDK, whose compilation under
// the race detector alone takes about two CPU-minutes on a fresh machine;
// the SDK itself is exercised by test/ and gateway/internal/api.

// apiClient calls the API with one API key.
type apiClient struct {
	tg  *testGateway
	key string
}

// api returns a client calling with the gateway's key (tenant acme).
func (tg *testGateway) api() apiClient { return tg.apiAs(tg.key) }

// apiAs returns a client calling with API key key.
func (tg *testGateway) apiAs(key string) apiClient { return apiClient{tg: tg, key: key} }

// send sends body as JSON (no body when nil) to path with the client's
// key and the headers in header, and returns the response whatever its
// status.
func (c apiClient) send(ctx context.Context, method, path string, body any, header http.Header) (*http.Response, error) {
	var content io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		content = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.tg.base+path, content)
	if err != nil {
		return nil, err
	}
	for name, values := range header {
		req.Header[name] = values
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.tg.http.Do(req)
}

// call sends body to path and decodes a 2xx answer into out (when not
// nil), keeping its JSON as received when out has room for it; any other
// status is an *apiError.
func (c apiClient) call(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.send(ctx, method, path, body, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if err := statusError(resp.StatusCode, raw); err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: %w in %s", method, path, err, raw)
	}
	if k, ok := out.(interface{ keep([]byte) }); ok {
		k.keep(raw)
	}
	return nil
}

// callFor is call decoding the answer into a new T.
func callFor[T any](ctx context.Context, c apiClient, method, path string, body any) (*T, error) {
	out := new(T)
	if err := c.call(ctx, method, path, body, out); err != nil {
		return nil, err
	}
	return out, nil
}

// chat creates a chat completion.
func (c apiClient) chat(ctx context.Context, req chatCompletionRequest) (*chatCompletion, error) {
	return callFor[chatCompletion](ctx, c, http.MethodPost, "/v1/chat/completions", req)
}

// chatStream creates a chat completion with stream set.
func (c apiClient) chatStream(ctx context.Context, req chatCompletionRequest) *sseStream[chatChunk] {
	req.Stream = true
	return openStream[chatChunk](ctx, c, "/v1/chat/completions", req)
}

// completions creates a (legacy) completion.
func (c apiClient) completions(ctx context.Context, req completionRequest) (*completionResponse, error) {
	return callFor[completionResponse](ctx, c, http.MethodPost, "/v1/completions", req)
}

// completionsStream creates a completion with stream set.
func (c apiClient) completionsStream(ctx context.Context, req completionRequest) *sseStream[completionResponse] {
	req.Stream = true
	return openStream[completionResponse](ctx, c, "/v1/completions", req)
}

// embeddings creates embeddings.
func (c apiClient) embeddings(ctx context.Context, req embeddingRequest) (*embeddingResponse, error) {
	return callFor[embeddingResponse](ctx, c, http.MethodPost, "/v1/embeddings", req)
}

// createResponse creates a response (the Responses API).
func (c apiClient) createResponse(ctx context.Context, req responseRequest) (*responseObject, error) {
	return callFor[responseObject](ctx, c, http.MethodPost, "/v1/responses", req)
}

// responseStream creates a response with stream set.
func (c apiClient) responseStream(ctx context.Context, req responseRequest) *sseStream[responseEvent] {
	req.Stream = true
	return openStream[responseEvent](ctx, c, "/v1/responses", req)
}

// getResponse fetches a stored response.
func (c apiClient) getResponse(ctx context.Context, id string) (*responseObject, error) {
	return callFor[responseObject](ctx, c, http.MethodGet, "/v1/responses/"+url.PathEscape(id), nil)
}

// deleteResponse deletes a stored response.
func (c apiClient) deleteResponse(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, "/v1/responses/"+url.PathEscape(id), nil, nil)
}

// models lists the models the key may use.
func (c apiClient) models(ctx context.Context) (*modelList, error) {
	return callFor[modelList](ctx, c, http.MethodGet, "/v1/models", nil)
}

// model fetches one model (or alias) by name.
func (c apiClient) model(ctx context.Context, name string) (*modelEntry, error) {
	return callFor[modelEntry](ctx, c, http.MethodGet, "/v1/models/"+url.PathEscape(name), nil)
}

// apiError is an answer outside 2xx: its status and error envelope.
type apiError struct {
	StatusCode int
	Message    string
	Type       string
	Param      string
	Code       string
	Body       []byte // as received
}

// Error gives the status and the body as received.
func (e *apiError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.StatusCode, http.StatusText(e.StatusCode), bytes.TrimSpace(e.Body))
}

// statusError is the *apiError of an answer with status code and body,
// nil for a 2xx status.
func statusError(code int, body []byte) error {
	if code >= 200 && code < 300 {
		return nil
	}
	var env envelope
	_ = json.Unmarshal(body, &env) // a body that is no envelope leaves the fields empty
	e := env.Error
	return &apiError{StatusCode: code, Message: e.Message, Type: e.Type, Param: str(e.Param), Code: str(e.Code), Body: body}
}

// keptJSON keeps an answer's JSON as received, for the checks that read
// what the typed fields leave out (a string: it prints as JSON).
type keptJSON struct{ raw string }

// RawJSON is the JSON as received.
func (k keptJSON) RawJSON() string { return k.raw }

// keep records raw as the JSON received.
func (k *keptJSON) keep(raw []byte) { k.raw = string(raw) }

// ---- streams ----

// sseReader reads the events of a text/event-stream body as the official
// client does: an event's "data:" lines, joined by newlines, dispatched
// at the blank line that ends it; other fields and comments are skipped.
type sseReader struct {
	lines *bufio.Scanner
}

// newSSEReader reads body, with events of up to 32 MiB as the official
// client allows.
func newSSEReader(body io.Reader) *sseReader {
	lines := bufio.NewScanner(body)
	lines.Buffer(nil, 32<<20)
	return &sseReader{lines: lines}
}

// next returns the next event's data; false at the end of the body (see
// err).
func (r *sseReader) next() ([]byte, bool) {
	var data []byte
	for r.lines.Scan() {
		line := r.lines.Bytes()
		if len(line) == 0 {
			if data == nil {
				continue
			}
			return bytes.TrimSuffix(data, []byte("\n")), true
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		if string(name) == "data" {
			data = append(data, bytes.TrimPrefix(value, []byte(" "))...)
			data = append(data, '\n')
		}
	}
	return nil, false
}

// err is what ended the body early, nil at its end.
func (r *sseReader) err() error { return r.lines.Err() }

// streamError is an event with an "error" member, which ends a stream.
type streamError struct{ event []byte }

// Error says what the official client says of such an event: its error
// member as received.
func (e *streamError) Error() string {
	var ev struct {
		Error json.RawMessage `json:"error"`
	}
	_ = json.Unmarshal(e.event, &ev)
	return "received error while streaming: " + string(ev.Error)
}

// sseStream is a streamed answer read as the official client reads one:
// an answer outside 2xx is an *apiError; each event is decoded into a T
// (keeping its JSON where T has room for it); data: [DONE] ends the
// stream, an event with an "error" member ends it with a *streamError,
// and a body that ends without [DONE] ends it with the reading's error,
// nil if none.
type sseStream[T any] struct {
	body   io.ReadCloser
	events *sseReader
	cur    T
	err    error
	done   bool
}

// openStream posts body to path and returns the stream of its answer.
func openStream[T any](ctx context.Context, c apiClient, path string, body any) *sseStream[T] {
	s := &sseStream[T]{}
	resp, err := c.send(ctx, http.MethodPost, path, body, nil)
	if err != nil {
		s.err = err
		return s
	}
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			err = statusError(resp.StatusCode, raw)
		}
		s.err = err
		return s
	}
	s.body, s.events = resp.Body, newSSEReader(resp.Body)
	return s
}

// Next decodes the next event into Current; false once the stream ended
// (see Err).
func (s *sseStream[T]) Next() bool {
	if s.err != nil || s.done {
		return false
	}
	data, ok := s.events.next()
	if !ok {
		return s.finish(s.events.err())
	}
	if bytes.HasPrefix(data, []byte("[DONE]")) {
		return s.finish(nil)
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(data, &members) == nil {
		if _, ok := members["error"]; ok {
			return s.finish(&streamError{event: data})
		}
	}
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		return s.finish(fmt.Errorf("%w in event %s", err, data))
	}
	if k, ok := any(&v).(interface{ keep([]byte) }); ok {
		k.keep(data)
	}
	s.cur = v
	return true
}

// finish ends the stream with err; it returns false, for Next.
func (s *sseStream[T]) finish(err error) bool {
	s.err = err
	s.Close()
	return false
}

// Current is the event Next decoded.
func (s *sseStream[T]) Current() T { return s.cur }

// Err is what ended the stream: nil after [DONE] or a body's clean end.
func (s *sseStream[T]) Err() error { return s.err }

// Close closes the answer's body; the stream ends.
func (s *sseStream[T]) Close() {
	s.done = true
	if s.body != nil {
		s.body.Close()
	}
}

// ---- chat completions ----

// chatCompletionRequest is a /v1/chat/completions body. Unset (nil)
// parameters are left out, as the official client leaves out those it is
// not given.
type chatCompletionRequest struct {
	Model            string           `json:"model"`
	Messages         []chatMessage    `json:"messages"`
	MaxTokens        *int64           `json:"max_tokens,omitempty"`
	Temperature      *float64         `json:"temperature,omitempty"`
	TopP             *float64         `json:"top_p,omitempty"`
	Seed             *int64           `json:"seed,omitempty"`
	N                *int64           `json:"n,omitempty"`
	PresencePenalty  *float64         `json:"presence_penalty,omitempty"`
	FrequencyPenalty *float64         `json:"frequency_penalty,omitempty"`
	LogitBias        map[string]int64 `json:"logit_bias,omitempty"`
	Logprobs         *bool            `json:"logprobs,omitempty"`
	TopLogprobs      *int64           `json:"top_logprobs,omitempty"`
	Tools            []chatTool       `json:"tools,omitempty"`
	ResponseFormat   *responseFormat  `json:"response_format,omitempty"`
	Stream           bool             `json:"stream,omitempty"`
	StreamOptions    *streamOptions   `json:"stream_options,omitempty"`
	// Extra holds members beyond OpenAI's (vLLM's top_k, warden's
	// speculative, chat_template_kwargs...), sent beside the others.
	Extra map[string]any `json:"-"`
}

// MarshalJSON encodes the request with its Extra members.
func (r chatCompletionRequest) MarshalJSON() ([]byte, error) {
	type members chatCompletionRequest // without this method
	return withExtra(members(r), r.Extra)
}

// withExtra is body's JSON object with the members of extra added.
func withExtra(body any, extra map[string]any) ([]byte, error) {
	b, err := json.Marshal(body)
	if err != nil || len(extra) == 0 {
		return b, err
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(b, &members); err != nil {
		return nil, err
	}
	for name, v := range extra {
		if members[name], err = json.Marshal(v); err != nil {
			return nil, err
		}
	}
	return json.Marshal(members)
}

// chatMessage is a message of a chat request.
type chatMessage struct {
	Role       string     `json:"role"`
	Content    *string    `json:"content,omitempty"`
	ToolCalls  []toolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// userMessage is a user message saying content.
func userMessage(content string) chatMessage { return chatMessage{Role: "user", Content: &content} }

// assistantMessage is an assistant message saying content.
func assistantMessage(content string) chatMessage {
	return chatMessage{Role: "assistant", Content: &content}
}

// toolMessage is the result content of the tool call with ID id.
func toolMessage(content, id string) chatMessage {
	return chatMessage{Role: "tool", Content: &content, ToolCallID: id}
}

// chatTool is a tool offered to the model.
type chatTool struct {
	Type     string      `json:"type"`
	Function functionDef `json:"function"`
}

// functionDef is a function tool's definition.
type functionDef struct {
	Name       string         `json:"name"`
	Parameters map[string]any `json:"parameters,omitempty"`
}

// functionTool offers function name taking parameters (a JSON schema).
func functionTool(name string, parameters map[string]any) chatTool {
	return chatTool{Type: "function", Function: functionDef{Name: name, Parameters: parameters}}
}

// toolCall is a function call: in an assistant message sent back, in an
// answer, or, in a stream's delta, a fragment of the call at Index.
type toolCall struct {
	Index    int64        `json:"index,omitempty"` // stream deltas only
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function functionCall `json:"function"`
}

// functionCall is the function a toolCall calls.
type functionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// responseFormat is a chat request's response_format.
type responseFormat struct {
	Type string `json:"type"`
}

// streamOptions are a streamed request's stream_options.
type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// chatCompletion is a chat completion, or one a chatAccumulator made of
// a stream.
type chatCompletion struct {
	keptJSON
	ID      string          `json:"id"`
	Model   string          `json:"model"`
	Choices []chatChoice    `json:"choices"`
	Usage   completionUsage `json:"usage"`
}

// chatChoice is one choice of a chat completion.
type chatChoice struct {
	Index        int64        `json:"index"`
	Message      chatAnswer   `json:"message"`
	FinishReason string       `json:"finish_reason"`
	Logprobs     chatLogprobs `json:"logprobs"`
}

// chatAnswer is the assistant's message in a choice, or its fragment in
// a stream chunk's delta.
type chatAnswer struct {
	Role             string     `json:"role"`
	Content          string     `json:"content"`
	ReasoningContent string     `json:"reasoning_content"`
	ToolCalls        []toolCall `json:"tool_calls"`
}

// chatLogprobs are a choice's (or a chunk's) token logprobs.
type chatLogprobs struct {
	Content []tokenLogprob `json:"content"`
}

// tokenLogprob is a sampled token's logprob and the top alternatives'.
type tokenLogprob struct {
	Token       string  `json:"token"`
	Logprob     float64 `json:"logprob"`
	TopLogprobs []struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
	} `json:"top_logprobs"`
}

// completionUsage is the usage of a completion or chat completion.
type completionUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	TotalTokens         int64 `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// chatChunk is one event of a streamed chat completion.
type chatChunk struct {
	ID      string          `json:"id"`
	Model   string          `json:"model"`
	Choices []chunkChoice   `json:"choices"`
	Usage   completionUsage `json:"usage"`
}

// chunkChoice is a chunk's part of one choice.
type chunkChoice struct {
	Index        int64        `json:"index"`
	Delta        chatAnswer   `json:"delta"`
	FinishReason string       `json:"finish_reason"`
	Logprobs     chatLogprobs `json:"logprobs"`
}

// chatAccumulator folds a chat stream into the completion it makes up,
// as the official client's ChatCompletionAccumulator does: per choice the
// content, and each tool call's name and arguments (by index), appended,
// a call's ID and type and the role as last given, and the finish reason
// of the last chunk holding the choice; usage added up. A chunk of
// another completion (another ID) is refused.
type chatAccumulator struct {
	chatCompletion
}

// add folds chunk in; false if it was refused.
func (a *chatAccumulator) add(chunk chatChunk) bool {
	if a.ID != "" && chunk.ID != a.ID {
		return false
	}
	for _, d := range chunk.Choices {
		if d.Index < 0 {
			return false
		}
		for _, tc := range d.Delta.ToolCalls {
			if tc.Index < 0 {
				return false
			}
		}
	}
	a.ID, a.Model = chunk.ID, chunk.Model
	for _, d := range chunk.Choices {
		for int64(len(a.Choices)) <= d.Index {
			a.Choices = append(a.Choices, chatChoice{Index: int64(len(a.Choices))})
		}
		c := &a.Choices[d.Index]
		c.FinishReason = d.FinishReason
		if d.Delta.Role != "" {
			c.Message.Role = d.Delta.Role
		}
		c.Message.Content += d.Delta.Content
		for _, tc := range d.Delta.ToolCalls {
			for int64(len(c.Message.ToolCalls)) <= tc.Index {
				c.Message.ToolCalls = append(c.Message.ToolCalls, toolCall{})
			}
			call := &c.Message.ToolCalls[tc.Index]
			if tc.ID != "" {
				call.ID = tc.ID
			}
			if tc.Type != "" {
				call.Type = tc.Type
			}
			call.Function.Name += tc.Function.Name
			call.Function.Arguments += tc.Function.Arguments
		}
		c.Logprobs.Content = append(c.Logprobs.Content, d.Logprobs.Content...)
	}
	a.Usage.PromptTokens += chunk.Usage.PromptTokens
	a.Usage.CompletionTokens += chunk.Usage.CompletionTokens
	a.Usage.TotalTokens += chunk.Usage.TotalTokens
	a.Usage.PromptTokensDetails.CachedTokens += chunk.Usage.PromptTokensDetails.CachedTokens
	return true
}

// ---- completions ----

// completionRequest is a /v1/completions body; unset (nil) parameters
// are left out.
type completionRequest struct {
	Model         string         `json:"model"`
	Prompt        string         `json:"prompt"`
	MaxTokens     *int64         `json:"max_tokens,omitempty"`
	Temperature   *float64       `json:"temperature,omitempty"`
	Seed          *int64         `json:"seed,omitempty"`
	N             *int64         `json:"n,omitempty"`
	Echo          *bool          `json:"echo,omitempty"`
	Logprobs      *int64         `json:"logprobs,omitempty"`
	Stop          string         `json:"stop,omitempty"`
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
	// Extra holds members beyond OpenAI's (vLLM's prompt_logprobs...).
	Extra map[string]any `json:"-"`
}

// MarshalJSON encodes the request with its Extra members.
func (r completionRequest) MarshalJSON() ([]byte, error) {
	type members completionRequest // without this method
	return withExtra(members(r), r.Extra)
}

// completionResponse is a completion, or one event of a streamed one.
type completionResponse struct {
	keptJSON
	ID      string             `json:"id"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   completionUsage    `json:"usage"`
}

// completionChoice is one choice of a completion.
type completionChoice struct {
	Index        int64              `json:"index"`
	Text         string             `json:"text"`
	FinishReason string             `json:"finish_reason"`
	Logprobs     completionLogprobs `json:"logprobs"`
}

// completionLogprobs are a completion choice's logprobs; a null logprob
// (the echoed prompt's first token) reads as 0.
type completionLogprobs struct {
	Tokens        []string  `json:"tokens"`
	TokenLogprobs []float64 `json:"token_logprobs"`
	TextOffset    []int64   `json:"text_offset"`
}

// ---- embeddings ----

// embeddingRequest is a /v1/embeddings body.
type embeddingRequest struct {
	Model          string `json:"model"`
	Input          any    `json:"input"` // a string, strings, token ids or arrays of them
	EncodingFormat string `json:"encoding_format,omitempty"`
}

// embeddingResponse is the answer of /v1/embeddings.
type embeddingResponse struct {
	Object string          `json:"object"`
	Model  string          `json:"model"`
	Data   []embeddingData `json:"data"`
	Usage  struct {
		PromptTokens int64 `json:"prompt_tokens"`
		TotalTokens  int64 `json:"total_tokens"`
	} `json:"usage"`
}

// embeddingData is one input's embedding: Raw as received (an array of
// floats, or base64), Embedding the floats of an array.
type embeddingData struct {
	Index     int64           `json:"index"`
	Object    string          `json:"object"`
	Raw       json.RawMessage `json:"embedding"`
	Embedding []float64       `json:"-"`
}

// UnmarshalJSON keeps the embedding as received and decodes an array's
// floats.
func (d *embeddingData) UnmarshalJSON(b []byte) error {
	type members embeddingData // without this method
	if err := json.Unmarshal(b, (*members)(d)); err != nil {
		return err
	}
	if bytes.HasPrefix(d.Raw, []byte("[")) {
		return json.Unmarshal(d.Raw, &d.Embedding)
	}
	return nil
}

// ---- responses ----

// responseRequest is a /v1/responses body; unset parameters are left out.
type responseRequest struct {
	Model              string         `json:"model"`
	Input              string         `json:"input"`
	Tools              []responseTool `json:"tools,omitempty"`
	MaxOutputTokens    *int64         `json:"max_output_tokens,omitempty"`
	Temperature        *float64       `json:"temperature,omitempty"`
	PreviousResponseID string         `json:"previous_response_id,omitempty"`
	Stream             bool           `json:"stream,omitempty"`
}

// responseTool is a function tool of the Responses API.
type responseTool struct {
	Type       string         `json:"type"`
	Name       string         `json:"name"`
	Parameters map[string]any `json:"parameters"`
	Strict     bool           `json:"strict"`
}

// responseFunction is a non-strict function tool name taking parameters.
func responseFunction(name string, parameters map[string]any) responseTool {
	return responseTool{Type: "function", Name: name, Parameters: parameters}
}

// responseObject is a response of the Responses API.
type responseObject struct {
	keptJSON
	ID                 string         `json:"id"`
	PreviousResponseID string         `json:"previous_response_id"`
	Output             []responseItem `json:"output"`
	Usage              struct {
		InputTokens        int64 `json:"input_tokens"`
		OutputTokens       int64 `json:"output_tokens"`
		InputTokensDetails struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"input_tokens_details"`
	} `json:"usage"`
}

// outputText is the text of the response's output_text parts, as the
// official client's OutputText joins them.
func (r responseObject) outputText() string {
	var text string
	for _, item := range r.Output {
		for _, part := range item.Content {
			if part.Type == "output_text" {
				text += part.Text
			}
		}
	}
	return text
}

// responseItem is an output item: a message, a reasoning item (its
// content the reasoning) or a function call.
type responseItem struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Content   []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
}

// responseEvent is one event of a streamed response.
type responseEvent struct {
	keptJSON
	Type      string         `json:"type"`
	Delta     string         `json:"delta"`
	ItemID    string         `json:"item_id"`
	Arguments string         `json:"arguments"`
	Item      responseItem   `json:"item"`
	Response  responseObject `json:"response"`
}

// ---- models ----

// modelList is the answer of /v1/models.
type modelList struct {
	Data []modelEntry `json:"data"`
}

// modelEntry is a model or an alias (metadata.alias_for names its
// target).
type modelEntry struct {
	keptJSON
	ID       string `json:"id"`
	Metadata struct {
		AliasFor string `json:"alias_for"`
	} `json:"metadata"`
}

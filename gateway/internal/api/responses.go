package api

import (
	"net/http"
	"strings"
)

// The Responses API (POST /v1/responses), served statelessly on the chat
// path: see decodeResponsesRequest for the request side. A stream is a
// sequence of named events (response.created, response.in_progress,
// response.output_item.added, response.content_part.added,
// response.output_text.delta..., response.output_text.done,
// response.content_part.done, response.output_item.done, and
// response.completed or response.incomplete), each with a sequence_number;
// there is no "data: [DONE]". A failure after the first event is one
// "error" event, and the stream ends without response.completed.

type respUsage struct {
	InputTokens         int64          `json:"input_tokens"`
	InputTokensDetails  promptDetails  `json:"input_tokens_details"`
	OutputTokens        int64          `json:"output_tokens"`
	OutputTokensDetails reasoningCount `json:"output_tokens_details"`
	TotalTokens         int64          `json:"total_tokens"`
}

type reasoningCount struct {
	ReasoningTokens int64 `json:"reasoning_tokens"`
}

type respTextPart struct {
	Type        string      `json:"type"`
	Text        string      `json:"text"`
	Annotations []any       `json:"annotations"`
	Logprobs    []wireToken `json:"logprobs"`
}

type respMessage struct {
	Type    string         `json:"type"`
	ID      string         `json:"id"`
	Status  string         `json:"status"`
	Role    string         `json:"role"`
	Content []respTextPart `json:"content"`
}

type respIncomplete struct {
	Reason string `json:"reason"`
}

type respTextFormat struct {
	Format struct {
		Type string `json:"type"`
	} `json:"format"`
}

// respObject is the response object, as returned and as carried by the
// lifecycle events of a stream.
type respObject struct {
	ID                 string          `json:"id"`
	Object             string          `json:"object"`
	CreatedAt          int64           `json:"created_at"`
	Status             string          `json:"status"`
	Error              *struct{}       `json:"error"`
	IncompleteDetails  *respIncomplete `json:"incomplete_details"`
	Instructions       *string         `json:"instructions"`
	MaxOutputTokens    *int64          `json:"max_output_tokens"`
	Model              string          `json:"model"`
	Output             []respMessage   `json:"output"`
	ParallelToolCalls  bool            `json:"parallel_tool_calls"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Store              bool            `json:"store"`
	Temperature        float64         `json:"temperature"`
	Text               respTextFormat  `json:"text"`
	ToolChoice         string          `json:"tool_choice"`
	Tools              []any           `json:"tools"`
	TopP               float64         `json:"top_p"`
	Truncation         string          `json:"truncation"`
	Usage              *respUsage      `json:"usage"`
	Metadata           map[string]any  `json:"metadata"`
}

// respShape builds one request's response objects and stream events.
type respShape struct {
	id, msgID, model string
	created          int64
	params           *responseParams
	seq              int64
}

func newRespShape(req *GenerateRequest, p *responseParams, created int64) *respShape {
	id := strings.TrimPrefix(req.RequestID, "req_")
	return &respShape{id: "resp_" + id, msgID: "msg_" + id, model: req.Model, created: created, params: p}
}

// object is the response object with the given status and output.
func (s *respShape) object(status string, output []respMessage, reason string, u *Usage) respObject {
	o := respObject{ID: s.id, Object: "response", CreatedAt: s.created, Status: status,
		Instructions: s.params.instructions, MaxOutputTokens: s.params.maxOutput, Model: s.model,
		Output: output, ParallelToolCalls: true, Temperature: s.params.temperature, ToolChoice: "auto",
		Tools: []any{}, TopP: s.params.topP, Truncation: "disabled", Metadata: map[string]any{}}
	o.Text.Format.Type = "text"
	if reason == "length" {
		o.IncompleteDetails = &respIncomplete{Reason: "max_output_tokens"}
	}
	if u != nil {
		o.Usage = &respUsage{InputTokens: u.PromptTokens, InputTokensDetails: promptDetails{CachedTokens: u.CachedTokens},
			OutputTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens}
	}
	return o
}

// final is the finished response for the whole text.
func (s *respShape) final(text string, lps []TokenLogprob, reason string, u Usage) respObject {
	status := "completed"
	if reason == "length" {
		status = "incomplete"
	}
	return s.object(status, []respMessage{s.message(status, text, lps)}, reason, &u)
}

func (s *respShape) message(status, text string, lps []TokenLogprob) respMessage {
	m := respMessage{Type: "message", ID: s.msgID, Status: status, Role: "assistant", Content: []respTextPart{}}
	if status != "in_progress" {
		m.Content = append(m.Content, textPart(text, lps))
	}
	return m
}

// textPart is an output_text part; its logprobs are [] unless asked for.
func textPart(text string, lps []TokenLogprob) respTextPart {
	return respTextPart{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: toWireTokens(lps)}
}

// event is one stream event: its type, a sequence number and fields.
func (s *respShape) event(typ string, fields map[string]any) map[string]any {
	fields["type"] = typ
	fields["sequence_number"] = s.seq
	s.seq++
	return fields
}

// opening returns the events sent before any text.
func (s *respShape) opening() []map[string]any {
	return []map[string]any{
		s.event("response.created", map[string]any{"response": s.object("in_progress", []respMessage{}, "", nil)}),
		s.event("response.in_progress", map[string]any{"response": s.object("in_progress", []respMessage{}, "", nil)}),
		s.event("response.output_item.added", map[string]any{"output_index": 0, "item": s.message("in_progress", "", nil)}),
		s.event("response.content_part.added", map[string]any{"item_id": s.msgID, "output_index": 0, "content_index": 0,
			"part": textPart("", nil)}),
	}
}

func (s *respShape) delta(text string, lps []TokenLogprob) map[string]any {
	return s.event("response.output_text.delta", map[string]any{"item_id": s.msgID, "output_index": 0, "content_index": 0,
		"delta": text, "logprobs": toWireTokens(lps)})
}

// closing returns the events after the last text.
func (s *respShape) closing(text string, lps []TokenLogprob, reason string, u Usage) []map[string]any {
	final := s.final(text, lps, reason, u)
	done := "response.completed"
	if final.Status == "incomplete" {
		done = "response.incomplete"
	}
	return []map[string]any{
		s.event("response.output_text.done", map[string]any{"item_id": s.msgID, "output_index": 0, "content_index": 0,
			"text": text, "logprobs": toWireTokens(lps)}),
		s.event("response.content_part.done", map[string]any{"item_id": s.msgID, "output_index": 0, "content_index": 0,
			"part": textPart(text, lps)}),
		s.event("response.output_item.done", map[string]any{"output_index": 0, "item": final.Output[0]}),
		s.event(done, map[string]any{"response": final}),
	}
}

// responses serves POST /v1/responses.
func (s *server) responses(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	req, params, e := decodeResponsesRequest(body, s.cfg.MaxTokensLimit)
	if e != nil {
		writeError(w, e)
		return
	}
	gen, rc, ok := s.start(w, r, req)
	if !ok {
		return
	}
	defer gen.Close()
	defer s.clearDeadline(rc)
	sh := newRespShape(req, params, infoFrom(r.Context()).start.Unix())
	if req.Stream {
		s.streamResponse(w, r, rc, gen, sh)
		return
	}
	out, ok := s.collect(w, r, gen, 1)
	if !ok {
		return
	}
	s.setDeadline(rc)
	c := out.choices[0]
	writeJSON(w, http.StatusOK, sh.final(c.text, c.logprobs, c.finish, out.usage))
}

// streamResponse relays a generation as Responses API events.
func (s *server) streamResponse(w http.ResponseWriter, r *http.Request, rc *http.ResponseController, gen Generation, sh *respShape) {
	sse := &sseWriter{w: w, rc: rc, timeout: s.cfg.WriteTimeout, now: s.now}
	t := newTracker(1)
	var (
		text strings.Builder
		lps  []TokenLogprob
	)
	send := func(evs ...map[string]any) error {
		for _, ev := range evs {
			if err := sse.named(ev["type"].(string), ev); err != nil {
				return err
			}
		}
		return nil
	}
	for {
		ev, done, err := t.next(r.Context(), gen)
		if err != nil {
			if !sse.started {
				s.fail(w, r, err)
			} else if r.Context().Err() == nil {
				e := s.toError(r, err)
				_ = send(sh.event("error", map[string]any{"code": nullable(e.Code), "message": e.Message, "param": nullable(e.Param)}))
			}
			return
		}
		if done {
			break
		}
		if !sse.started {
			copyHeaders(w.Header(), ev.Headers)
			sse.start()
			err = send(sh.opening()...)
		}
		if err == nil && (ev.TextDelta != "" || len(ev.Logprobs) > 0) {
			text.WriteString(ev.TextDelta)
			lps = append(lps, ev.Logprobs...)
			err = send(sh.delta(ev.TextDelta, ev.Logprobs))
		}
		if err != nil {
			return // the client is gone or stalled
		}
	}
	_ = send(sh.closing(text.String(), lps, t.finish[0], *t.usage)...)
}

// notStored answers the routes of stored responses (retrieve, delete,
// cancel, input items): warden keeps none.
func notStored(w http.ResponseWriter, _ *http.Request) {
	writeError(w, &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Code: CodeNotFound,
		Message: "This server does not store responses: every response is returned only to the request that created it."})
}

// nullable is s, or JSON null when empty.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// The Responses API (POST /v1/responses), served statelessly on the chat
// path: see decodeResponsesRequest for the request side. A stream is a
// sequence of named events (response.created, response.in_progress,
// response.output_item.added, response.content_part.added,
// response.output_text.delta..., response.output_text.done,
// (a reasoning item first when the model reasons:
// response.output_item.added, response.reasoning_text.delta...,
// response.reasoning_text.done, response.output_item.done; with
// reasoning.summary also response.reasoning_summary_part.added,
// response.reasoning_summary_text.delta... beside the text deltas,
// response.reasoning_summary_text.done and
// response.reasoning_summary_part.done),
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

// respCall is a function_call output item.
type respCall struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Status    string `json:"status"`
}

// respReasoningItem is a reasoning output item: the model's reasoning
// text as one reasoning_text part, and, when the request asked for a
// summary, the same text as its one summary_text part (warden has no
// summarizer: the "summary" is the reasoning itself).
type respReasoningItem struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Status  string          `json:"status"`
	Summary []reasoningPart `json:"summary"`
	Content []reasoningPart `json:"content"`
}

type reasoningPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// respReasoning is the response object's reasoning configuration, as
// asked for.
type respReasoning struct {
	Effort  *string `json:"effort"`
	Summary *string `json:"summary"`
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
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	CreatedAt          int64             `json:"created_at"`
	Status             string            `json:"status"`
	Error              *struct{}         `json:"error"`
	IncompleteDetails  *respIncomplete   `json:"incomplete_details"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int64            `json:"max_output_tokens"`
	Model              string            `json:"model"`
	Output             []any             `json:"output"` // respMessage and respCall items
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Reasoning          respReasoning     `json:"reasoning"`
	Store              bool              `json:"store"`
	Temperature        float64           `json:"temperature"`
	Text               respTextFormat    `json:"text"`
	ToolChoice         any               `json:"tool_choice"`
	Tools              []json.RawMessage `json:"tools"`
	TopP               float64           `json:"top_p"`
	Truncation         string            `json:"truncation"`
	Usage              *respUsage        `json:"usage"`
	Metadata           map[string]any    `json:"metadata"`
}

// respShape builds one request's response objects and stream events.
type respShape struct {
	id, model string
	created   int64
	params    *responseParams
	seq       int64
	// keep stores the finished response and reports whether it did; nil
	// when it is not to be stored.
	keep func(obj respObject, output []any) bool
}

func newRespShape(req *GenerateRequest, p *responseParams, created int64) *respShape {
	id := strings.TrimPrefix(req.RequestID, "req_")
	return &respShape{id: id, model: req.Model, created: created, params: p}
}

// object is the response object with the given status and output.
func (s *respShape) object(status string, output []any, reason string, u *Usage) respObject {
	o := respObject{ID: "resp_" + s.id, Object: "response", CreatedAt: s.created, Status: status,
		Instructions: s.params.instructions, MaxOutputTokens: s.params.maxOutput, Model: s.model,
		Output: output, ParallelToolCalls: s.params.parallel, Temperature: s.params.temperature, ToolChoice: s.params.toolChoice,
		Tools: s.params.tools, TopP: s.params.topP, Truncation: "disabled", Metadata: map[string]any{}, Reasoning: s.params.reasoning}
	if s.params.previousID != "" {
		o.PreviousResponseID = &s.params.previousID
	}
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

// status is the response's status for a finish reason.
func status(reason string) string {
	if reason == "length" {
		return "incomplete"
	}
	return "completed"
}

// final is the finished response: a message with the text (left out
// when the answer is only tool calls), then one item per call.
func (s *respShape) final(res result) respObject {
	r := res.choices[0] // the Responses API has no n
	st := status(r.finish)
	var output []any
	if r.reasoning != "" {
		output = append(output, s.reasoningItem(st, r.reasoning))
	}
	if r.text != "" || len(r.calls) == 0 {
		output = append(output, s.message(0, st, r.text, r.logprobs))
	}
	for i, c := range r.calls {
		output = append(output, s.call(i, c, st))
	}
	return s.stored(s.object(st, output, r.finish, &res.usage))
}

// stored stores the finished response obj when the request asked for it,
// and returns it with "store" saying whether it was.
func (s *respShape) stored(obj respObject) respObject {
	if s.keep != nil {
		obj.Store = s.keep(obj, obj.Output)
	}
	return obj
}

// message is the n-th message item (text after tool calls starts another).
func (s *respShape) message(n int, status, text string, lps []TokenLogprob) respMessage {
	m := respMessage{Type: "message", ID: s.msgID(n), Status: status, Role: "assistant", Content: []respTextPart{}}
	if status != "in_progress" {
		m.Content = append(m.Content, textPart(text, lps))
	}
	return m
}

// reasoningItem is the reasoning item (there is one at most: it comes
// before any other output).
func (s *respShape) reasoningItem(status, text string) respReasoningItem {
	it := respReasoningItem{Type: "reasoning", ID: "rs_" + s.id, Status: status, Summary: []reasoningPart{}, Content: []reasoningPart{}}
	if status != "in_progress" {
		it.Content = append(it.Content, reasoningPart{Type: "reasoning_text", Text: text})
		if s.summaries() {
			it.Summary = append(it.Summary, reasoningPart{Type: "summary_text", Text: text})
		}
	}
	return it
}

// summaries reports whether the request asked for reasoning summaries.
func (s *respShape) summaries() bool { return s.params.reasoning.Summary != nil }

func (s *respShape) msgID(n int) string {
	if n == 0 {
		return "msg_" + s.id
	}
	return fmt.Sprintf("msg_%s_%d", s.id, n)
}

// call is the function_call item of call i.
func (s *respShape) call(i int, c ToolCall, status string) respCall {
	return respCall{Type: "function_call", ID: fmt.Sprintf("fc_%s_%d", s.id, i), CallID: c.ID, Name: c.Name,
		Arguments: c.Arguments, Status: status}
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

// respStream is the state of a streamed response: the output items sent
// so far and the one open now.
type respStream struct {
	sh    *respShape
	items []any
	msgs  int              // message items opened
	text  *strings.Builder // the open message's text; nil when none is open
	// lps are the open message's logprobs so far, or, while no message is
	// open (tool calls), those waiting for the next text.
	lps    []TokenLogprob
	call   *respCall // the open function_call item
	ncalls int
	// reasoning is the open reasoning item's text; nil when none is open.
	reasoning *strings.Builder
}

// opening returns the events sent first. Items open as their output
// comes: a reasoning item at the first reasoning text, a message at the
// first text.
func (r *respStream) opening() []map[string]any {
	s := r.sh
	return []map[string]any{
		s.event("response.created", map[string]any{"response": s.object("in_progress", []any{}, "", nil)}),
		s.event("response.in_progress", map[string]any{"response": s.object("in_progress", []any{}, "", nil)}),
	}
}

func (r *respStream) openMessage() []map[string]any {
	s := r.sh
	r.text = &strings.Builder{}
	id := s.msgID(r.msgs)
	return []map[string]any{
		s.event("response.output_item.added", map[string]any{"output_index": len(r.items), "item": s.message(r.msgs, "in_progress", "", nil)}),
		s.event("response.content_part.added", map[string]any{"item_id": id, "output_index": len(r.items), "content_index": 0,
			"part": textPart("", nil)}),
	}
}

// closeItem ends the open item, if any, with status st.
func (r *respStream) closeItem(st string) []map[string]any {
	s := r.sh
	var evs []map[string]any
	switch {
	case r.reasoning != nil:
		text, item, idx := r.reasoning.String(), s.reasoningItem(st, r.reasoning.String()), len(r.items)
		evs = append(evs, s.event("response.reasoning_text.done", map[string]any{"item_id": item.ID, "output_index": idx, "content_index": 0, "text": text}))
		if s.summaries() {
			part := reasoningPart{Type: "summary_text", Text: text}
			evs = append(evs,
				s.event("response.reasoning_summary_text.done", map[string]any{"item_id": item.ID, "output_index": idx, "summary_index": 0, "text": text}),
				s.event("response.reasoning_summary_part.done", map[string]any{"item_id": item.ID, "output_index": idx, "summary_index": 0, "part": part}))
		}
		evs = append(evs, s.event("response.output_item.done", map[string]any{"output_index": idx, "item": item}))
		r.items = append(r.items, item)
		r.reasoning = nil
	case r.text != nil:
		text, id, idx := r.text.String(), s.msgID(r.msgs), len(r.items)
		item := s.message(r.msgs, st, text, r.lps)
		evs = append(evs,
			s.event("response.output_text.done", map[string]any{"item_id": id, "output_index": idx, "content_index": 0,
				"text": text, "logprobs": toWireTokens(r.lps)}),
			s.event("response.content_part.done", map[string]any{"item_id": id, "output_index": idx, "content_index": 0,
				"part": textPart(text, r.lps)}),
			s.event("response.output_item.done", map[string]any{"output_index": idx, "item": item}))
		r.items = append(r.items, item)
		r.text, r.lps = nil, nil
		r.msgs++
	case r.call != nil:
		c, idx := *r.call, len(r.items)
		c.Status = st
		evs = append(evs,
			s.event("response.function_call_arguments.done", map[string]any{"item_id": c.ID, "output_index": idx,
				"name": c.Name, "arguments": c.Arguments}),
			s.event("response.output_item.done", map[string]any{"output_index": idx, "item": c}))
		r.items = append(r.items, c)
		r.call = nil
	}
	return evs
}

// add returns the events of one generation event.
func (r *respStream) add(ev Event) []map[string]any {
	s := r.sh
	var evs []map[string]any
	if ev.ReasoningDelta != "" {
		if r.reasoning == nil {
			evs = append(evs, r.closeItem("completed")...)
			r.reasoning = &strings.Builder{}
			evs = append(evs, s.event("response.output_item.added", map[string]any{"output_index": len(r.items),
				"item": s.reasoningItem("in_progress", "")}))
			if s.summaries() {
				evs = append(evs, s.event("response.reasoning_summary_part.added", map[string]any{"item_id": "rs_" + s.id,
					"output_index": len(r.items), "summary_index": 0, "part": reasoningPart{Type: "summary_text", Text: ""}}))
			}
		}
		r.reasoning.WriteString(ev.ReasoningDelta)
		evs = append(evs, s.event("response.reasoning_text.delta", map[string]any{"item_id": "rs_" + s.id,
			"output_index": len(r.items), "content_index": 0, "delta": ev.ReasoningDelta}))
		if s.summaries() {
			evs = append(evs, s.event("response.reasoning_summary_text.delta", map[string]any{"item_id": "rs_" + s.id,
				"output_index": len(r.items), "summary_index": 0, "delta": ev.ReasoningDelta}))
		}
	}
	if ev.TextDelta != "" && r.text == nil {
		waiting := r.lps
		evs = append(evs, r.closeItem("completed")...)
		evs = append(evs, r.openMessage()...)
		r.lps = waiting
	}
	// Logprobs may come without text (text held back for stop
	// sequences); while no message is open they wait for the next text.
	switch {
	case r.text != nil && (ev.TextDelta != "" || len(ev.Logprobs) > 0):
		r.text.WriteString(ev.TextDelta)
		r.lps = append(r.lps, ev.Logprobs...)
		evs = append(evs, s.event("response.output_text.delta", map[string]any{"item_id": s.msgID(r.msgs),
			"output_index": len(r.items), "content_index": 0, "delta": ev.TextDelta, "logprobs": toWireTokens(ev.Logprobs)}))
	case r.text == nil:
		r.lps = append(r.lps, ev.Logprobs...)
	}
	for _, d := range ev.ToolCalls {
		if d.ID != "" {
			evs = append(evs, r.closeItem("completed")...)
			c := s.call(r.ncalls, ToolCall{ID: d.ID, Name: d.Name}, "in_progress")
			r.call = &c
			r.ncalls++
			evs = append(evs, s.event("response.output_item.added", map[string]any{"output_index": len(r.items), "item": c}))
		}
		if d.Arguments != "" && r.call != nil {
			r.call.Arguments += d.Arguments
			evs = append(evs, s.event("response.function_call_arguments.delta", map[string]any{"item_id": r.call.ID,
				"output_index": len(r.items), "delta": d.Arguments}))
		}
	}
	return evs
}

// closing returns the events after the last output: the open item ends,
// then response.completed or response.incomplete with the whole response.
func (r *respStream) closing(reason string, u Usage) []map[string]any {
	st := status(reason)
	var evs []map[string]any
	if r.text == nil && r.call == nil && !r.answered() {
		// No answer at all: one empty message.
		evs = append(evs, r.closeItem(st)...)
		evs = append(evs, r.openMessage()...)
	}
	evs = append(evs, r.closeItem(st)...)
	final := r.sh.stored(r.sh.object(st, r.items, reason, &u))
	done := "response.completed"
	if st == "incomplete" {
		done = "response.incomplete"
	}
	return append(evs, r.sh.event(done, map[string]any{"response": final}))
}

// answered reports whether a message or call item was closed.
func (r *respStream) answered() bool {
	for _, it := range r.items {
		if _, ok := it.(respReasoningItem); !ok {
			return true
		}
	}
	return false
}

// responses serves POST /v1/responses.
func (s *server) responses(w http.ResponseWriter, r *http.Request) {
	var params *responseParams
	s.serveGeneration(w, r, func(body []byte) (*GenerateRequest, *Error) {
		req, p, e := decodeResponsesRequest(body, s.cfg.MaxTokensLimit, s.cfg.Grammars, s.itemsOf(r))
		if e == nil {
			e = s.continueFrom(r, req, p)
		}
		params = p
		return req, e
	}, func(req *GenerateRequest) reply {
		sh := newRespShape(req, params, infoFrom(r.Context()).start.Unix())
		sh.keep = s.keeper(r, params)
		return reply{
			stream: func(rc *http.ResponseController, gen Generation) { s.streamResponse(w, r, rc, gen, sh) },
			answer: func(res result) any { return sh.final(res) },
		}
	})
}

// streamResponse relays a generation as Responses API events.
func (s *server) streamResponse(w http.ResponseWriter, r *http.Request, rc *http.ResponseController, gen Generation, sh *respShape) {
	sse := &sseWriter{w: w, rc: rc, timeout: s.cfg.WriteTimeout, now: s.now}
	t := newTracker(1)
	st := &respStream{sh: sh}
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
			err = send(st.opening()...)
		}
		if err == nil {
			err = send(st.add(ev)...)
		}
		if err != nil {
			return // the client is gone or stalled
		}
	}
	_ = send(st.closing(t.finish[0], *t.usage)...)
}

// notStored answers the routes of stored responses warden does not serve
// (cancel, input items): retrieve and delete are getResponse and
// deleteResponse.
func notStored(w http.ResponseWriter, r *http.Request) {
	writeError(w, &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Code: CodeNotFound,
		Message: fmt.Sprintf("This server serves only GET and DELETE of a stored response, not %s %.80s.", r.Method, r.URL.Path)})
}

// nullable is s, or JSON null when empty.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

package api

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
)

type wireModel struct {
	ID                      string `json:"id"`
	Object                  string `json:"object"`
	Created                 int64  `json:"created"`
	OwnedBy                 string `json:"owned_by"`
	ContextLength           int64  `json:"context_length"`
	ConfiguredContextLength int64  `json:"configured_context_length"`
	DType                   string `json:"dtype,omitempty"`
	// Parent is set for a LoRA adapter: its base model.
	Parent string `json:"parent,omitempty"`
	// Metadata is set for an alias: the model it names.
	Metadata *modelMetadata `json:"metadata,omitempty"`
}

type modelMetadata struct {
	AliasFor string `json:"alias_for"`
}

// toWireModel is a model as /v1/models lists it.
func toWireModel(m Model) wireModel {
	w := wireModel{ID: m.ID, Object: "model", Created: m.Created, OwnedBy: m.OwnedBy,
		ContextLength: m.ContextLength, ConfiguredContextLength: m.ConfiguredContextLength, DType: m.DType, Parent: m.Parent}
	if m.AliasFor != "" {
		w.Metadata = &modelMetadata{AliasFor: m.AliasFor}
	}
	return w
}

type modelList struct {
	Object string      `json:"object"`
	Data   []wireModel `json:"data"`
}

func (s *server) models(w http.ResponseWriter, r *http.Request) {
	ms, err := s.svc.Models(r.Context(), infoFrom(r.Context()).principal)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := modelList{Object: "list", Data: make([]wireModel, 0, len(ms))}
	for _, m := range ms {
		out.Data = append(out.Data, toWireModel(m))
	}
	writeJSON(w, http.StatusOK, out)
}

// model serves GET /v1/models/{id}: one model the principal may use.
// Model IDs may contain slashes ("org/name").
func (s *server) model(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "*")
	if u, err := url.PathUnescape(id); err == nil {
		id = u // chi matches the raw path: "org%2Fname" is "org/name"
	}
	ms, err := s.svc.Models(r.Context(), infoFrom(r.Context()).principal)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for _, m := range ms {
		if m.ID == id {
			writeJSON(w, http.StatusOK, toWireModel(m))
			return
		}
	}
	writeError(w, ModelNotFound(id))
}

// readBody reads the request body, answering 413 or 400 itself when it
// cannot.
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, RequestTooLarge(tooBig.Limit))
		} else if r.Context().Err() == nil {
			writeError(w, InvalidRequest("", CodeInvalidJSON, "The request body could not be read."))
		}
		return nil, false
	}
	return body, true
}

// start fills in the gateway's fields of req and starts it, answering the
// rejection itself. The caller must Close the generation and clear the
// write deadline (clearDeadline) when done.
func (s *server) start(w http.ResponseWriter, r *http.Request, req *GenerateRequest) (Generation, *http.ResponseController, bool) {
	info := infoFrom(r.Context())
	req.RequestID, req.ClientRequestID, req.ReceivedAt = info.id, info.clientID, info.start
	gen, err := s.svc.Generate(r.Context(), info.principal, req)
	if err == nil && gen == nil {
		err = errors.New("api: Service.Generate returned no generation and no error")
	}
	if err != nil {
		s.fail(w, r, err)
		return nil, nil, false
	}
	return gen, http.NewResponseController(w), true
}

// setDeadline bounds the next write to the client.
func (s *server) setDeadline(rc *http.ResponseController) {
	_ = rc.SetWriteDeadline(s.now().Add(s.cfg.WriteTimeout))
}

// clearDeadline removes the write deadline: deadlines set per write
// outlive the request on a kept-alive connection unless cleared.
func (s *server) clearDeadline(rc *http.ResponseController) { _ = rc.SetWriteDeadline(time.Time{}) }

// reply is how an endpoint answers a started generation: stream writes
// it as server-sent events, answer shapes the collected result into the
// JSON body.
type reply struct {
	stream func(rc *http.ResponseController, gen Generation)
	answer func(res result) any
}

// serveGeneration is the course every generation endpoint takes: read the
// body, decode it, start the generation, and stream it or collect it into
// one JSON answer (newReply builds the endpoint's reply once the request
// has its ID). Failures before the first byte are answered here.
func (s *server) serveGeneration(w http.ResponseWriter, r *http.Request, decode func(body []byte) (*GenerateRequest, *Error),
	newReply func(req *GenerateRequest) reply) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	req, e := decode(body)
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
	if req.Echo {
		gen = &echoGeneration{Generation: gen, prompt: req.Prompt, choices: max(req.N, 1), logprobs: req.Logprobs, top: req.TopLogprobs}
	}
	rep := newReply(req)
	if req.Stream {
		rep.stream(rc, gen)
		return
	}
	res, ok := s.collect(w, r, gen, req.N)
	if !ok {
		return
	}
	s.setDeadline(rc)
	writeJSON(w, http.StatusOK, rep.answer(res))
}

// generate serves the chat and text completion endpoints.
func (s *server) generate(kind Kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.serveGeneration(w, r, func(body []byte) (*GenerateRequest, *Error) {
			req, e := decodeRequest(kind, body, s.cfg.MaxTokensLimit, s.cfg.Grammars)
			if e == nil {
				e = checkChoices(req, s.cfg.MaxChoices)
			}
			return req, e
		}, func(req *GenerateRequest) reply {
			sh := newShape(req, infoFrom(r.Context()).start.Unix())
			return reply{
				stream: func(rc *http.ResponseController, gen Generation) {
					s.stream(w, r, rc, gen, sh, req.N, req.IncludeUsage)
				},
				answer: sh.response,
			}
		})
	}
}

// collect waits for the whole generation of n choices: their text, tool
// calls, logprobs, finish reasons, and the usage. On failure it answers
// the error itself.
func (s *server) collect(w http.ResponseWriter, r *http.Request, gen Generation, n int) (result, bool) {
	t := newTracker(n)
	texts := make([]strings.Builder, len(t.finish))
	reasoning := make([]strings.Builder, len(t.finish))
	res := result{choices: make([]choiceOut, len(t.finish))}
	for {
		ev, done, err := t.next(r.Context(), gen)
		if err != nil {
			s.fail(w, r, err)
			return result{}, false
		}
		if done {
			for k := range res.choices {
				res.choices[k].text, res.choices[k].finish, res.choices[k].calls = texts[k].String(), t.finish[k], t.calls[k]
				res.choices[k].reasoning = reasoning[k].String()
			}
			res.usage = *t.usage
			return res, true
		}
		copyHeaders(w.Header(), ev.Headers)
		texts[ev.Choice].WriteString(ev.TextDelta)
		reasoning[ev.Choice].WriteString(ev.ReasoningDelta)
		res.choices[ev.Choice].logprobs = append(res.choices[ev.Choice].logprobs, ev.Logprobs...)
		if ev.PromptLogprobs != nil {
			res.prompt = ev.PromptLogprobs
		}
	}
}

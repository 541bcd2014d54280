package api

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"time"
)

type wireModel struct {
	ID                      string `json:"id"`
	Object                  string `json:"object"`
	Created                 int64  `json:"created"`
	OwnedBy                 string `json:"owned_by"`
	ContextLength           int64  `json:"context_length"`
	ConfiguredContextLength int64  `json:"configured_context_length"`
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
		out.Data = append(out.Data, wireModel{ID: m.ID, Object: "model", Created: m.Created, OwnedBy: m.OwnedBy,
			ContextLength: m.ContextLength, ConfiguredContextLength: m.ConfiguredContextLength})
	}
	writeJSON(w, http.StatusOK, out)
}

// generate serves both generation endpoints.
func (s *server) generate(kind Kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		info := infoFrom(r.Context())
		body, err := io.ReadAll(r.Body)
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				writeError(w, RequestTooLarge(tooBig.Limit))
			} else if r.Context().Err() == nil {
				writeError(w, InvalidRequest("", CodeInvalidJSON, "The request body could not be read."))
			}
			return
		}
		req, e := decodeRequest(kind, body, s.cfg.MaxTokensLimit)
		if e != nil {
			writeError(w, e)
			return
		}
		req.RequestID, req.ClientRequestID, req.ReceivedAt = info.id, info.clientID, info.start

		gen, err := s.svc.Generate(r.Context(), info.principal, req)
		if err == nil && gen == nil {
			err = errors.New("api: Service.Generate returned no generation and no error")
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		defer gen.Close()

		rc := http.NewResponseController(w)
		// Deadlines set per write outlive the request on a kept-alive
		// connection unless cleared.
		defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
		sh := newShape(req, info.start.Unix())
		if req.Stream {
			s.stream(w, r, rc, gen, sh, req.IncludeUsage)
		} else {
			s.respond(w, r, rc, gen, sh)
		}
	}
}

// respond waits for the whole generation and sends one JSON response.
func (s *server) respond(w http.ResponseWriter, r *http.Request, rc *http.ResponseController, gen Generation, sh shape) {
	var (
		t    tracker
		text strings.Builder
	)
	for {
		ev, done, err := t.next(r.Context(), gen)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if done {
			break
		}
		copyHeaders(w.Header(), ev.Headers)
		text.WriteString(ev.TextDelta)
	}
	_ = rc.SetWriteDeadline(s.now().Add(s.cfg.WriteTimeout))
	writeJSON(w, http.StatusOK, sh.response(text.String(), t.finish, *t.usage))
}

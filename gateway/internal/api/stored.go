package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
)

// ResponseStore keeps the Responses API's stored responses, each in its
// tenant's own namespace (gateway/internal/storedresp). Get and Delete
// return ErrResponseNotFound for an ID the principal's tenant does not
// hold — another tenant's included: the API answers both alike.
type ResponseStore interface {
	Put(ctx context.Context, p Principal, r *StoredResponse) error
	Get(ctx context.Context, p Principal, id string) (*StoredResponse, error)
	Delete(ctx context.Context, p Principal, id string) error
}

// Errors of a ResponseStore the API maps.
var (
	// ErrResponseNotFound: the store holds no such ID for the principal.
	ErrResponseNotFound = errors.New("api: stored response not found")
	// ErrResponseStoreUnavailable: the store's backend cannot be reached
	// (answered 503 with retry-after).
	ErrResponseStoreUnavailable = errors.New("api: response store unavailable")
)

// storeFailure is the answer for a failed ResponseStore call (not a
// missing ID).
func (s *server) storeFailure(r *http.Request, err error) *Error {
	if errors.Is(err, ErrResponseStoreUnavailable) {
		s.logger.WarnContext(r.Context(), "response store unavailable", "request_id", infoFrom(r.Context()).id,
			"tenant", infoFrom(r.Context()).principal.Tenant, "err", err)
		return &Error{Status: http.StatusServiceUnavailable, Type: TypeServer, Code: "service_unavailable",
			Message: "Stored responses are unavailable; retry shortly.", Headers: http.Header{"Retry-After": {"1"}}}
	}
	return s.toError(r, err)
}

// StoredResponse is what a stored response keeps.
type StoredResponse struct {
	// ID is the response's ID (resp_...).
	ID string
	// Messages are the conversation up to and including the response's
	// output, without any request's instructions (which do not carry over
	// to a continuation).
	Messages []Message
	// Response is the response object as it was returned.
	Response json.RawMessage
}

// storeTimeout bounds writing a stored response after the answer is
// complete; the client may be gone by then.
const storeTimeout = 5 * time.Second

// maxResponseIDLen bounds the part of a response ID after "resp_".
const maxResponseIDLen = 128

// validResponseID reports whether id can name a response.
func validResponseID(id string) bool {
	rest, ok := strings.CutPrefix(id, "resp_")
	if !ok || rest == "" || len(rest) > maxResponseIDLen {
		return false
	}
	for _, c := range rest {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// responseNotFound is the answer for an ID the tenant does not hold.
func responseNotFound(param, id string) *Error {
	e := &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Code: CodeNotFound,
		Message: fmt.Sprintf("Response with id %.60q not found.", id)}
	if param != "" {
		e.Param = param
		e.Code = "previous_response_not_found"
		e.Message = fmt.Sprintf("Previous response with id %.60q not found.", id)
	}
	return e
}

// continueFrom prepends the conversation of the previous response named
// in p to req's messages (after the request's own instructions), and
// records on p the conversation a stored answer will extend.
func (s *server) continueFrom(r *http.Request, req *GenerateRequest, p *responseParams) *Error {
	instructions := 0
	if p.instructions != nil {
		instructions = 1
	}
	input := req.Messages[instructions:]
	if p.previousID == "" {
		p.conversation = input
		return nil
	}
	if s.cfg.Responses == nil {
		return responseNotFound("previous_response_id", p.previousID)
	}
	prev, err := s.cfg.Responses.Get(r.Context(), infoFrom(r.Context()).principal, p.previousID)
	if errors.Is(err, ErrResponseNotFound) {
		return responseNotFound("previous_response_id", p.previousID)
	}
	if err != nil {
		return s.storeFailure(r, err)
	}
	conv := append(append([]Message{}, prev.Messages...), input...)
	req.Messages = append(req.Messages[:instructions:instructions], conv...)
	p.conversation = conv
	return nil
}

// keeper returns the function that stores a finished response of the
// request: it reports whether the response is stored, for its "store"
// field. It is nil when the request is not to be stored.
func (s *server) keeper(r *http.Request, p *responseParams) func(obj respObject, output []any) bool {
	store := s.cfg.Responses != nil && s.cfg.StoreResponsesByDefault
	if p.store != nil {
		store = *p.store && s.cfg.Responses != nil
	}
	if !store {
		return nil
	}
	principal := infoFrom(r.Context()).principal
	return func(obj respObject, output []any) bool {
		obj.Store = true
		raw, err := json.Marshal(obj)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), storeTimeout)
			defer cancel()
			msgs := append(append([]Message{}, p.conversation...), assistantOf(output))
			err = s.cfg.Responses.Put(ctx, principal, &StoredResponse{ID: obj.ID, Messages: msgs, Response: raw})
		}
		if err != nil {
			s.logger.WarnContext(r.Context(), "response not stored", "request_id", infoFrom(r.Context()).id,
				"tenant", principal.Tenant, "response_id", obj.ID, "err", err)
			return false
		}
		return true
	}
}

// assistantOf is the assistant message of a response's output items: its
// reasoning, text and function calls.
func assistantOf(output []any) Message {
	m := Message{Role: "assistant"}
	for _, item := range output {
		switch it := item.(type) {
		case respReasoningItem:
			for _, part := range it.Content {
				m.ReasoningContent += part.Text
			}
		case respMessage:
			for _, part := range it.Content {
				m.Content += part.Text
			}
		case respCall:
			m.ToolCalls = append(m.ToolCalls, ToolCall{ID: it.CallID, Name: it.Name, Arguments: it.Arguments})
		}
	}
	return m
}

// getResponse serves GET /v1/responses/{id}: the stored response object.
func (s *server) getResponse(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if s.cfg.Responses == nil || !validResponseID(id) {
		writeError(w, responseNotFound("", id))
		return
	}
	sr, err := s.cfg.Responses.Get(r.Context(), infoFrom(r.Context()).principal, id)
	switch {
	case errors.Is(err, ErrResponseNotFound):
		writeError(w, responseNotFound("", id))
	case err != nil:
		writeError(w, s.storeFailure(r, err))
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(sr.Response)
	}
}

// deleteResponse serves DELETE /v1/responses/{id}.
func (s *server) deleteResponse(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if s.cfg.Responses == nil || !validResponseID(id) {
		writeError(w, responseNotFound("", id))
		return
	}
	err := s.cfg.Responses.Delete(r.Context(), infoFrom(r.Context()).principal, id)
	switch {
	case errors.Is(err, ErrResponseNotFound):
		writeError(w, responseNotFound("", id))
	case err != nil:
		writeError(w, s.storeFailure(r, err))
	default:
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "response", "deleted": true})
	}
}

// itemsOf resolves the item_reference input items of r's principal: an
// output item of a stored response, found through the response its ID
// names (msg_X, msg_X_n, fc_X_i and rs_X belong to resp_X). nil without
// a response store.
func (s *server) itemsOf(r *http.Request) itemLookup {
	if s.cfg.Responses == nil {
		return nil
	}
	principal := infoFrom(r.Context()).principal
	outputs := map[string][]storedItem{} // by response ID, for the items of one request
	return func(id, param string) (Message, *Error) {
		notFound := &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Code: CodeNotFound, Param: param,
			Message: fmt.Sprintf("Item with id %.60q not found.", id)}
		rid, ok := responseOfItem(id)
		if !ok {
			return Message{}, notFound
		}
		items, seen := outputs[rid]
		if !seen {
			sr, err := s.cfg.Responses.Get(r.Context(), principal, rid)
			if errors.Is(err, ErrResponseNotFound) {
				return Message{}, notFound
			}
			if err != nil {
				return Message{}, s.storeFailure(r, err)
			}
			var obj struct {
				Output []storedItem `json:"output"`
			}
			if err := json.Unmarshal(sr.Response, &obj); err != nil {
				return Message{}, s.toError(r, fmt.Errorf("stored response %s: %w", rid, err))
			}
			items, outputs[rid] = obj.Output, obj.Output
		}
		for _, it := range items {
			if it.ID != id {
				continue
			}
			switch it.Type {
			case "message":
				m := Message{Role: "assistant"}
				for _, part := range it.Content {
					m.Content += part.Text
				}
				return m, nil
			case "function_call":
				return Message{Role: "assistant", ToolCalls: []ToolCall{{ID: it.CallID, Name: it.Name, Arguments: it.Arguments}}}, nil
			case "reasoning":
				m := Message{Role: "assistant"}
				for _, part := range it.Content {
					m.ReasoningContent += part.Text
				}
				return m, nil
			}
		}
		return Message{}, notFound
	}
}

// storedItem is what itemsOf reads of a stored response's output item
// (respMessage, respCall or respReasoningItem).
type storedItem struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Content   []struct {
		Text string `json:"text"`
	} `json:"content"`
}

// responseOfItem is the ID of the response an output item ID belongs to.
func responseOfItem(id string) (string, bool) {
	var rest string
	switch {
	case strings.HasPrefix(id, "msg_"):
		rest = id[len("msg_"):]
	case strings.HasPrefix(id, "fc_"):
		rest = id[len("fc_"):]
	case strings.HasPrefix(id, "rs_"):
		rest = id[len("rs_"):]
	default:
		return "", false
	}
	x, _, _ := strings.Cut(rest, "_")
	rid := "resp_" + x
	return rid, validResponseID(rid)
}

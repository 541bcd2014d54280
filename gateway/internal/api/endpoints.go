package api

import (
	"context"
	"encoding/json"
	"net/http"
)

// JSONEndpoint serves one more authenticated POST endpoint with a JSON
// body (Config.Endpoints): it gets the caller and the body, and returns
// what to answer 200 with, or an error (an *Error as it is; anything else
// is a 500 whose cause is logged).
type JSONEndpoint func(ctx context.Context, p Principal, body []byte) (any, error)

// jsonEndpoint adapts a JSONEndpoint to the router: the body limit (413),
// authentication and Content-Type were checked by the middleware.
func (s *server) jsonEndpoint(fn JSONEndpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, ok := s.readBody(w, r)
		if !ok {
			return
		}
		out, err := fn(r.Context(), infoFrom(r.Context()).principal, body)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// DecodeInput reads the input of a generation request from body the way
// the generation endpoints do, for an endpoint that renders it without
// generating (/tokenize): "messages" with "tools", "tool_choice" and
// "parallel_tool_calls" as chat reads them (Kind chat), otherwise "prompt"
// as completions read it (Kind completion). It returns the request, with
// Model and its input set, and the body's other fields.
func DecodeInput(body []byte) (*GenerateRequest, map[string]json.RawMessage, *Error) {
	f, e := splitBody(body)
	if e != nil {
		return nil, nil, e
	}
	kind := KindCompletion
	if f.get("messages") != nil {
		kind = KindChat
	}
	d := &decoder{f: f, r: &GenerateRequest{Kind: kind, N: 1}}
	steps := []func() *Error{d.model, d.prompt}
	if kind == KindChat {
		steps = []func() *Error{d.model, d.messages, func() *Error { return d.tools(false) }}
	}
	for _, step := range steps {
		if e := step(); e != nil {
			return nil, nil, e
		}
	}
	for _, name := range []string{"model", "messages", "prompt"} {
		delete(f, name)
	}
	return d.r, f, nil
}

// RequestID is the gateway's ID of the request ctx serves (the
// x-request-id it answers with), for a JSONEndpoint; "" outside one.
func RequestID(ctx context.Context) string {
	if info := infoFrom(ctx); info != nil {
		return info.id
	}
	return ""
}

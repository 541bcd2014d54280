// Package errenvelope is the JSON body of every error answer of warden's
// HTTP APIs, public and admin alike, in the shape OpenAI clients parse:
//
//	{"error": {"message": "...", "type": "...", "param": null, "code": "..."}}
//
// param and code are null when empty.
package errenvelope

import (
	"encoding/json"
	"fmt"
)

// Envelope is the whole error body.
type Envelope struct {
	Error Body `json:"error"`
}

// Body is the inside of an Envelope.
type Body struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// New builds an envelope; an empty param or code is sent as null.
func New(message, typ, param, code string) Envelope {
	b := Body{Message: message, Type: typ}
	if param != "" {
		b.Param = &param
	}
	if code != "" {
		b.Code = &code
	}
	return Envelope{Error: b}
}

// Decode reads an envelope and returns its body. It fails when data is not
// JSON or carries no "error" object.
func Decode(data []byte) (Body, error) {
	var env struct {
		Error *Body `json:"error"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		return Body{}, fmt.Errorf("not an error envelope: %w: %q", err, data)
	}
	if env.Error == nil {
		return Body{}, fmt.Errorf("no error in %q", data)
	}
	return *env.Error, nil
}

// CodeOrEmpty is b's code, or "" when it is null.
func (b Body) CodeOrEmpty() string { return deref(b.Code) }

// ParamOrEmpty is b's param, or "" when it is null.
func (b Body) ParamOrEmpty() string { return deref(b.Param) }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

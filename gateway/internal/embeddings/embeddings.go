package embeddings

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/warden-ai/warden/gateway/internal/api"
)

// Path is the endpoint's path.
const Path = "/v1/embeddings"

// MaxInputs bounds the inputs of one request (OpenAI's bound).
const MaxInputs = 2048

// Input is one input to embed: Text to tokenize, or Tokens when the
// client sent token ids.
type Input struct {
	Text   string
	Tokens []int32
}

// Request is a decoded /v1/embeddings body.
type Request struct {
	Model  string
	Inputs []Input
	// Base64 is encoding_format base64.
	Base64 bool
}

// Result is what the gateway computed for a Request.
type Result struct {
	// Model is the model that served it (an alias resolved).
	Model string
	// Vectors are the embeddings, one per input in order.
	Vectors [][]float32
	// PromptTokens counts the inputs' tokens (what was billed).
	PromptTokens int64
}

// Service is the gateway core as the endpoint needs it.
type Service interface {
	// Embed admits, bills and computes req for p. Rejections are
	// *api.Error: an unknown model or one p may not use (404), an input
	// that does not fit the model's context or names a token outside its
	// vocabulary (400), a limit (429), no worker (503).
	Embed(ctx context.Context, p api.Principal, requestID string, req *Request) (*Result, error)
}

// Endpoints returns the endpoint for api.Config.Endpoints.
func Endpoints(s Service) map[string]api.JSONEndpoint {
	return map[string]api.JSONEndpoint{
		Path: func(ctx context.Context, p api.Principal, body []byte) (any, error) {
			req, e := Decode(body)
			if e != nil {
				return nil, e
			}
			res, err := s.Embed(ctx, p, api.RequestID(ctx), req)
			if err != nil {
				return nil, err
			}
			return respond(req, res), nil
		},
	}
}

// Response is the endpoint's answer, as OpenAI shapes it.
type Response struct {
	Object string      `json:"object"`
	Data   []Embedding `json:"data"`
	Model  string      `json:"model"`
	Usage  Usage       `json:"usage"`
}

// Embedding is one vector of a Response: a JSON array of numbers, or a
// base64 string of its little-endian float32 bytes.
type Embedding struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
}

// Usage counts the request's tokens; embeddings have no output.
type Usage struct {
	PromptTokens int64 `json:"prompt_tokens"`
	TotalTokens  int64 `json:"total_tokens"`
}

func respond(req *Request, res *Result) *Response {
	out := &Response{Object: "list", Data: make([]Embedding, len(res.Vectors)), Model: res.Model,
		Usage: Usage{PromptTokens: res.PromptTokens, TotalTokens: res.PromptTokens}}
	for i, v := range res.Vectors {
		var e any = v
		if req.Base64 {
			e = EncodeBase64(v)
		}
		out.Data[i] = Embedding{Object: "embedding", Index: i, Embedding: e}
	}
	return out
}

// EncodeBase64 is v's little-endian float32 bytes in standard base64,
// OpenAI's encoding_format base64.
func EncodeBase64(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(b)
}

// Decode reads a /v1/embeddings body. Errors name the field.
func Decode(body []byte) (*Request, *api.Error) {
	var f map[string]json.RawMessage
	if err := json.Unmarshal(body, &f); err != nil || f == nil {
		return nil, api.InvalidRequest("", api.CodeInvalidJSON, "The request body must be a JSON object.")
	}
	req := &Request{}
	if raw := f["model"]; isNull(raw) {
		return nil, missing("model")
	} else if json.Unmarshal(raw, &req.Model) != nil {
		return nil, wrongType("model", "a string")
	} else if req.Model == "" {
		return nil, missing("model")
	}
	raw := f["input"]
	if isNull(raw) {
		return nil, missing("input")
	}
	inputs, e := decodeInput(raw)
	if e != nil {
		return nil, e
	}
	req.Inputs = inputs
	if raw := f["encoding_format"]; !isNull(raw) {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil, wrongType("encoding_format", "a string")
		}
		switch s {
		case "float":
		case "base64":
			req.Base64 = true
		default:
			return nil, api.InvalidRequest("encoding_format", api.CodeInvalidValue, fmt.Sprintf(
				"Invalid value for 'encoding_format': %q; supported values are 'float' and 'base64'.", clip(s)))
		}
	}
	if raw := f["dimensions"]; !isNull(raw) {
		if n, err := strconv.ParseInt(string(raw), 10, 64); err != nil {
			return nil, wrongType("dimensions", "an integer")
		} else if n < 1 {
			return nil, api.InvalidRequest("dimensions", api.CodeIntegerTooSmall,
				fmt.Sprintf("Invalid 'dimensions': integer below minimum value. Expected a value >= 1, but got %d instead.", n))
		}
		return nil, api.InvalidRequest("dimensions", api.CodeUnsupportedParameter,
			"Unsupported parameter: 'dimensions': this server's embeddings have the model's hidden size and are not truncated (the served models are not Matryoshka models); omit it.")
	}
	if raw := f["user"]; !isNull(raw) {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil, wrongType("user", "a string")
		}
	}
	return req, nil
}

// decodeInput reads OpenAI's four shapes of input.
func decodeInput(raw json.RawMessage) ([]Input, *api.Error) {
	raw = bytes.TrimSpace(raw)
	const want = "a string, an array of strings, an array of token ids or an array of arrays of token ids"
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil, wrongType("input", want)
		}
		if s == "" {
			return nil, emptyInput("input")
		}
		return []Input{{Text: s}}, nil
	}
	var items []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, wrongType("input", want)
	}
	if len(items) == 0 {
		return nil, api.InvalidRequest("input", api.CodeEmptyArray, "Invalid 'input': empty array. Expected an array with minimum length 1, but got an empty array instead.")
	}
	first := bytes.TrimSpace(items[0])
	switch {
	case len(first) > 0 && first[0] == '[': // arrays of token ids
		if len(items) > MaxInputs {
			return nil, tooMany(len(items))
		}
		out := make([]Input, len(items))
		for i, item := range items {
			param := fmt.Sprintf("input[%d]", i)
			var ids []json.RawMessage
			if t := bytes.TrimSpace(item); len(t) == 0 || t[0] != '[' || json.Unmarshal(t, &ids) != nil {
				return nil, wrongType(param, "an array of token ids, like the other inputs")
			}
			if len(ids) == 0 {
				return nil, emptyInput(param)
			}
			toks, e := tokenIDs(ids, param)
			if e != nil {
				return nil, e
			}
			out[i] = Input{Tokens: toks}
		}
		return out, nil
	case len(first) > 0 && first[0] == '"': // strings
		if len(items) > MaxInputs {
			return nil, tooMany(len(items))
		}
		out := make([]Input, len(items))
		for i, item := range items {
			param := fmt.Sprintf("input[%d]", i)
			var s string
			if t := bytes.TrimSpace(item); len(t) == 0 || t[0] != '"' || json.Unmarshal(t, &s) != nil {
				return nil, wrongType(param, "a string, like the other inputs")
			}
			if s == "" {
				return nil, emptyInput(param)
			}
			out[i] = Input{Text: s}
		}
		return out, nil
	}
	toks, e := tokenIDs(items, "input") // one input of token ids
	if e != nil {
		return nil, e
	}
	return []Input{{Tokens: toks}}, nil
}

// tokenIDs reads token ids: integers in [0, 2^31). The vocabulary bound
// is checked once the model is known.
func tokenIDs(items []json.RawMessage, param string) ([]int32, *api.Error) {
	ids := make([]int32, len(items))
	for j, item := range items {
		t := bytes.TrimSpace(item)
		id, err := strconv.ParseInt(string(t), 10, 32)
		if err != nil || id < 0 {
			p := fmt.Sprintf("%s[%d]", param, j)
			return nil, api.InvalidRequest(p, api.CodeInvalidValue, fmt.Sprintf(
				"Invalid '%s': expected a token id (an integer >= 0), got %s.", p, clip(string(t))))
		}
		ids[j] = int32(id)
	}
	return ids, nil
}

// CheckVocab checks the token-id inputs against a vocabulary of size
// vocab.
func CheckVocab(req *Request, vocab int) *api.Error {
	for i, in := range req.Inputs {
		if j := slices.IndexFunc(in.Tokens, func(t int32) bool { return int(t) >= vocab }); j >= 0 {
			p := InputParam(req, i)
			return api.InvalidRequest(p, api.CodeInvalidValue, fmt.Sprintf(
				"Invalid '%s': token %d is outside the vocabulary of model %q (%d tokens).", p, in.Tokens[j], req.Model, vocab))
		}
	}
	return nil
}

// InputParam names input i in errors: "input" for a single input,
// "input[i]" otherwise.
func InputParam(req *Request, i int) string {
	if len(req.Inputs) == 1 {
		return "input"
	}
	return fmt.Sprintf("input[%d]", i)
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

func tooMany(n int) *api.Error {
	return api.InvalidRequest("input", api.CodeArrayTooLong, fmt.Sprintf(
		"Invalid 'input': array too long. Expected an array with maximum length %d, but got an array with length %d instead.", MaxInputs, n))
}

func emptyInput(param string) *api.Error {
	return api.InvalidRequest(param, api.CodeInvalidValue, fmt.Sprintf("Invalid '%s': an input to embed cannot be empty.", param))
}

func missing(name string) *api.Error {
	return api.InvalidRequest(name, api.CodeMissingParameter, fmt.Sprintf("Missing required parameter: '%s'.", name))
}

func wrongType(name, want string) *api.Error {
	return api.InvalidRequest(name, api.CodeInvalidType, fmt.Sprintf("Invalid type for '%s': expected %s.", name, want))
}

// clip shortens a client value for a message.
func clip(s string) string {
	const max = 32
	if len(s) > max {
		return strings.ToValidUTF8(s[:max], "") + "…"
	}
	return s
}

package tokenize

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/warden-ai/warden/gateway/internal/api"
)

// Tokenizer is one model's tokenizer as the gateway applies it to
// generation requests.
type Tokenizer interface {
	// Encode tokenizes req's input exactly as a generation request with
	// the same input is prefilled. With generationPrompt false a chat is
	// rendered without the assistant's generation prompt; with special
	// false a completion prompt gets no special tokens. Rejections are
	// *api.Error.
	Encode(req *api.GenerateRequest, special, generationPrompt bool) ([]int32, error)
	// Decode returns the bytes of ids (special tokens as their content).
	Decode(ids []int32) ([]byte, error)
	// VocabSize bounds the token ids.
	VocabSize() int
}

// Models is the gateway core as these endpoints need it.
type Models interface {
	// Open counts one request of p for model against p's limits, billed
	// no tokens, and returns the model's tokenizer and its effective
	// context window. Rejections are *api.Error: an unknown model or one
	// p may not use (404), a rate limit (429), a model no worker serves
	// yet (503).
	Open(ctx context.Context, p api.Principal, model string) (Tokenizer, int64, error)
}

// Paths of the endpoints.
const (
	PathTokenize   = "/tokenize"
	PathDetokenize = "/detokenize"
)

// Endpoints returns the two endpoints for api.Config.Endpoints.
func Endpoints(m Models) map[string]api.JSONEndpoint {
	return map[string]api.JSONEndpoint{
		PathTokenize: func(ctx context.Context, p api.Principal, body []byte) (any, error) {
			return tokenize(ctx, m, p, body)
		},
		PathDetokenize: func(ctx context.Context, p api.Principal, body []byte) (any, error) {
			return detokenize(ctx, m, p, body)
		},
	}
}

// TokenizeResponse is /tokenize's answer, as vLLM shapes it.
type TokenizeResponse struct {
	Count       int     `json:"count"`
	MaxModelLen int64   `json:"max_model_len"`
	Tokens      []int32 `json:"tokens"`
}

// DetokenizeResponse is /detokenize's answer.
type DetokenizeResponse struct {
	Prompt string `json:"prompt"`
}

// tokenizeRequest is a decoded /tokenize body.
type tokenizeRequest struct {
	req              *api.GenerateRequest
	special          bool
	generationPrompt bool
}

func tokenize(ctx context.Context, m Models, p api.Principal, body []byte) (*TokenizeResponse, error) {
	tr, e := decodeTokenize(body)
	if e != nil {
		return nil, e
	}
	tok, maxLen, err := m.Open(ctx, p, tr.req.Model)
	if err != nil {
		return nil, err
	}
	ids, err := tok.Encode(tr.req, tr.special, tr.generationPrompt)
	if err != nil {
		return nil, err
	}
	if ids == nil {
		ids = []int32{}
	}
	return &TokenizeResponse{Count: len(ids), MaxModelLen: maxLen, Tokens: ids}, nil
}

func detokenize(ctx context.Context, m Models, p api.Principal, body []byte) (*DetokenizeResponse, error) {
	model, ids, e := decodeDetokenize(body)
	if e != nil {
		return nil, e
	}
	tok, _, err := m.Open(ctx, p, model)
	if err != nil {
		return nil, err
	}
	for i, id := range ids {
		if int(id) >= tok.VocabSize() {
			return nil, outOfVocab(i, id, model, tok.VocabSize())
		}
	}
	text, err := tok.Decode(ids)
	if err != nil {
		// An id inside the range that names no token (a gap in the
		// vocabulary).
		return nil, api.InvalidRequest("tokens", api.CodeInvalidValue, fmt.Sprintf("Invalid 'tokens': %v.", err))
	}
	// Bytes that are not valid UTF-8 (a character cut by the last token)
	// become U+FFFD, as vLLM's decode does.
	return &DetokenizeResponse{Prompt: strings.ToValidUTF8(string(text), "\uFFFD")}, nil
}

func outOfVocab(i int, id int32, model string, vocab int) *api.Error {
	return api.InvalidRequest(fmt.Sprintf("tokens[%d]", i), api.CodeInvalidValue, fmt.Sprintf(
		"Invalid 'tokens[%d]': token %d is outside the vocabulary of model %q (%d tokens).", i, id, model, vocab))
}

// decodeTokenize reads a /tokenize body: the input as the generation
// endpoints read it, then the options.
func decodeTokenize(body []byte) (*tokenizeRequest, *api.Error) {
	req, rest, e := api.DecodeInput(body)
	if e != nil {
		return nil, e
	}
	chat := req.Kind == api.KindChat
	tr := &tokenizeRequest{req: req, special: !chat, generationPrompt: true}
	names := make([]string, 0, len(rest))
	for name := range rest {
		names = append(names, name)
	}
	slices.Sort(names) // deterministic errors
	for _, name := range names {
		raw := rest[name]
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		switch name {
		case "add_special_tokens":
			v, e := decodeBool(raw, name)
			if e != nil {
				return nil, e
			}
			if chat && v {
				return nil, api.InvalidRequest(name, api.CodeUnsupportedValue,
					"Unsupported value for 'add_special_tokens' with messages: the chat template already places the model's special tokens.")
			}
			tr.special = v
		case "add_generation_prompt":
			v, e := decodeBool(raw, name)
			if e != nil {
				return nil, e
			}
			tr.generationPrompt = v
		case "return_token_strs", "continue_final_message":
			v, e := decodeBool(raw, name)
			if e != nil {
				return nil, e
			}
			if v {
				return nil, unsupported(name)
			}
		case "chat_template", "chat_template_kwargs", "mm_processor_kwargs", "documents":
			if name == "chat_template_kwargs" && string(raw) == "{}" {
				continue
			}
			return nil, unsupported(name)
		}
		// Other fields are ignored, as the generation endpoints ignore
		// unknown ones.
	}
	return tr, nil
}

func unsupported(name string) *api.Error {
	return api.InvalidRequest(name, api.CodeUnsupportedParameter,
		fmt.Sprintf("Unsupported parameter: '%s' is not supported by this server's /tokenize.", name))
}

// decodeDetokenize reads a /detokenize body: {model, tokens}. Token ids
// must be integers in [0, 2^31); the vocabulary bound is checked once
// the model is known.
func decodeDetokenize(body []byte) (string, []int32, *api.Error) {
	var f map[string]json.RawMessage
	if err := json.Unmarshal(body, &f); err != nil || f == nil {
		return "", nil, api.InvalidRequest("", api.CodeInvalidJSON, "The request body must be a JSON object.")
	}
	var model string
	if raw := f["model"]; len(raw) == 0 || string(raw) == "null" {
		return "", nil, missing("model")
	} else if json.Unmarshal(raw, &model) != nil {
		return "", nil, wrongType("model", "a string")
	} else if model == "" {
		return "", nil, missing("model")
	}
	raw := f["tokens"]
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, missing("tokens")
	}
	var items []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return "", nil, wrongType("tokens", "an array of token ids")
	}
	ids := make([]int32, len(items))
	for i, item := range items {
		id, err := strconv.ParseInt(string(item), 10, 32)
		if err != nil || id < 0 {
			return "", nil, api.InvalidRequest(fmt.Sprintf("tokens[%d]", i), api.CodeInvalidValue, fmt.Sprintf(
				"Invalid 'tokens[%d]': expected a token id (an integer >= 0), got %s.", i, clip(item)))
		}
		ids[i] = int32(id)
	}
	return model, ids, nil
}

func decodeBool(raw json.RawMessage, name string) (bool, *api.Error) {
	switch string(raw) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, wrongType(name, "a boolean")
}

func missing(name string) *api.Error {
	return api.InvalidRequest(name, api.CodeMissingParameter, fmt.Sprintf("Missing required parameter: '%s'.", name))
}

func wrongType(name, want string) *api.Error {
	return api.InvalidRequest(name, api.CodeInvalidType, fmt.Sprintf("Invalid type for '%s': expected %s.", name, want))
}

// clip shortens a raw JSON value for a message.
func clip(raw json.RawMessage) string {
	const max = 32
	if len(raw) > max {
		return strings.ToValidUTF8(string(raw[:max]), "") + "…"
	}
	return string(raw)
}

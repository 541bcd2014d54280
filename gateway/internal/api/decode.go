package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/warden-ai/warden/internal/constrain"
	"github.com/warden-ai/warden/tenant"
)

// Limits on fields this layer checks itself.
const (
	maxStopSequences = 4
	maxModelNameLen  = 256
	maxUserLen       = 256
)

// MaxPriority is the highest request priority a client may send; whether
// its tenant may use it is for the Service to decide (the tenant's
// max_priority, which cannot exceed the same ceiling).
const MaxPriority = tenant.MaxRequestPriority

// fields is a request body split into its top-level fields.
type fields map[string]json.RawMessage

// get returns a field's value, or nil when it is absent or null: the API
// treats an explicit null like an omitted field.
func (f fields) get(name string) json.RawMessage {
	if raw := f[name]; !isNull(raw) {
		return raw
	}
	return nil
}

// take is get for a field the decoder implements that checkOtherField
// would otherwise judge: the field is removed from f.
func (f fields) take(name string) json.RawMessage {
	raw := f.get(name)
	delete(f, name)
	return raw
}

// decoder turns the fields of one request into a GenerateRequest.
type decoder struct {
	f         fields
	r         *GenerateRequest
	maxTokens int64
	grammars  *constrain.Cache
}

// decodeRequest parses and validates the body of a generation request.
// It returns exactly one of a request and a 400 *Error naming the param.
// RequestID, ClientRequestID and ReceivedAt are left for the caller.
//
// Policy for fields it does not implement is in checkOtherField.
func decodeRequest(kind Kind, body []byte, maxTokens int64, grammars *constrain.Cache) (*GenerateRequest, *Error) {
	f, e := splitBody(body)
	if e != nil {
		return nil, e
	}
	d := &decoder{f: f, r: &GenerateRequest{Kind: kind}, maxTokens: maxTokens, grammars: grammars}
	content := func() *Error {
		if e := d.messages(); e != nil {
			return e
		}
		return d.tools(false)
	}
	if kind == KindCompletion {
		content = d.prompt
	}
	for _, step := range []func() *Error{
		d.model, content, d.maxTokensField, d.sampling, d.samplingControls, d.echo, d.stop, d.stream, d.logprobs, d.n, d.promptLogprobs, d.user, d.priority, d.constraint, d.thinking, d.otherFields,
	} {
		if e := step(); e != nil {
			return nil, e
		}
	}
	return d.r, nil
}

// splitBody checks the body is UTF-8 JSON holding one object. UTF-8 is
// checked first because encoding/json silently replaces invalid bytes.
func splitBody(body []byte) (fields, *Error) {
	if len(body) == 0 {
		return nil, InvalidRequest("", CodeInvalidJSON, "The request body is empty; send a JSON object.")
	}
	if !utf8.Valid(body) {
		return nil, InvalidRequest("", CodeInvalidEncoding, "The request body is not valid UTF-8.")
	}
	var f fields
	if err := json.Unmarshal(body, &f); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return nil, InvalidRequest("", CodeInvalidJSON,
				fmt.Sprintf("We could not parse the JSON body of your request: %v (at byte %d).", syn, syn.Offset))
		}
		return nil, InvalidRequest("", CodeInvalidJSON, "The request body must be a JSON object.")
	}
	if f == nil {
		return nil, InvalidRequest("", CodeInvalidJSON, "The request body must be a JSON object.")
	}
	return f, nil
}

func missing(param string) *Error {
	return InvalidRequest(param, CodeMissingParameter, fmt.Sprintf("Missing required parameter: '%s'.", param))
}

func (d *decoder) model() *Error {
	raw := d.f.get("model")
	if raw == nil {
		return missing("model")
	}
	m, e := decodeString(raw, "model")
	switch {
	case e != nil:
		return e
	case m == "":
		return missing("model")
	case len(m) > maxModelNameLen:
		return InvalidRequest("model", CodeInvalidValue, fmt.Sprintf("Invalid 'model': longer than %d bytes.", maxModelNameLen))
	}
	d.r.Model = m
	return nil
}

// maxTokensField reads max_tokens and its newer alias
// max_completion_tokens; if both are sent they must agree.
func (d *decoder) maxTokensField() *Error {
	for _, name := range []string{"max_tokens", "max_completion_tokens"} {
		raw := d.f.get(name)
		if raw == nil {
			continue
		}
		v, e := decodeIntIn(raw, name, 1, d.maxTokens)
		if e != nil {
			return e
		}
		if d.r.MaxTokens != nil && *d.r.MaxTokens != v {
			return InvalidRequest(name, CodeInvalidValue, "max_tokens and max_completion_tokens are both set and differ; send one.")
		}
		d.r.MaxTokens = &v
	}
	return nil
}

func (d *decoder) sampling() *Error {
	if raw := d.f.get("temperature"); raw != nil {
		t, e := decodeNumber(raw, "temperature")
		switch {
		case e != nil:
			return e
		case t < 0:
			return belowMin("temperature", CodeDecimalTooSmall, 0, t)
		case t > 2:
			return aboveMax("temperature", CodeDecimalTooLarge, 2, t)
		}
		d.r.Temperature = &t
	}
	if raw := d.f.get("top_p"); raw != nil {
		p, e := decodeNumber(raw, "top_p")
		switch {
		case e != nil:
			return e
		case p <= 0:
			return InvalidRequest("top_p", CodeDecimalTooSmall,
				fmt.Sprintf("Invalid 'top_p': value below minimum. Expected a value > 0, but got %g instead.", p))
		case p > 1:
			return aboveMax("top_p", CodeDecimalTooLarge, 1, p)
		}
		d.r.TopP = &p
	}
	if raw := d.f.get("seed"); raw != nil {
		s, e := decodeInt(raw, "seed")
		if e != nil {
			return e
		}
		d.r.Seed = &s
	}
	if raw := d.f.get("speculative"); raw != nil {
		on, e := decodeBool(raw, "speculative")
		if e != nil {
			return e
		}
		d.r.Speculative = &on
	}
	return nil
}

// stop accepts a string or an array of at most four strings; empty
// stop strings are refused because they would end every generation at once.
func (d *decoder) stop() *Error {
	raw := d.f.get("stop")
	if raw == nil {
		return nil
	}
	var items []json.RawMessage
	if raw[0] == '"' {
		items = []json.RawMessage{raw}
	} else {
		var e *Error
		if items, e = decodeArray(raw, "stop", "a string or an array of strings"); e != nil {
			return e
		}
	}
	if len(items) > maxStopSequences {
		return InvalidRequest("stop", CodeArrayTooLong, fmt.Sprintf(
			"Invalid 'stop': array too long. Expected an array with at most %d elements, but got %d instead.", maxStopSequences, len(items)))
	}
	for i, item := range items {
		param := "stop"
		if raw[0] == '[' {
			param = fmt.Sprintf("stop[%d]", i)
		}
		s, e := decodeString(item, param)
		if e != nil {
			return e
		}
		if s == "" {
			return InvalidRequest(param, CodeInvalidValue, fmt.Sprintf("Invalid '%s': stop sequences must not be empty.", param))
		}
		d.r.Stop = append(d.r.Stop, s)
	}
	return nil
}

// stream reads stream and stream_options.include_usage; the latter
// only matters when streaming (non-streaming responses always carry usage).
func (d *decoder) stream() *Error {
	if raw := d.f.get("stream"); raw != nil {
		var e *Error
		if d.r.Stream, e = decodeBool(raw, "stream"); e != nil {
			return e
		}
	}
	raw := d.f.get("stream_options")
	if raw == nil {
		return nil
	}
	opts, e := decodeObject(raw, "stream_options")
	if e != nil {
		return e
	}
	if raw := opts.get("include_usage"); raw != nil {
		inc, e := decodeBool(raw, "stream_options.include_usage")
		if e != nil {
			return e
		}
		d.r.IncludeUsage = inc && d.r.Stream
	}
	return nil
}

// n is the number of choices, 1 when absent; Config.MaxChoices bounds
// it (checkChoices).
func (d *decoder) n() *Error {
	d.r.N = 1
	raw := d.f.get("n")
	if raw == nil {
		return nil
	}
	n, e := decodeIntIn(raw, "n", 1, 1<<31)
	if e != nil {
		return e
	}
	d.r.N = int(n)
	return nil
}

// checkChoices refuses n above the configured maximum. With tools, each
// choice's output is read for tool calls on its own.
func checkChoices(req *GenerateRequest, max int) *Error {
	if req.N > max {
		return InvalidRequest("n", CodeIntegerTooLarge, fmt.Sprintf("Invalid 'n': at most %d choices per request, got %d.", max, req.N))
	}
	return nil
}

func (d *decoder) user() *Error {
	raw := d.f.get("user")
	if raw == nil {
		return nil
	}
	u, e := decodeString(raw, "user")
	if e != nil {
		return e
	}
	if len(u) > maxUserLen {
		return InvalidRequest("user", CodeInvalidValue, fmt.Sprintf("Invalid 'user': longer than %d bytes.", maxUserLen))
	}
	d.r.User = u
	return nil
}

// priority reads the scheduling priority: an integer in [0, MaxPriority],
// 0 when absent; a higher priority is served sooner when the workers are
// saturated.
func (d *decoder) priority() *Error {
	raw := d.f.get("priority")
	if raw == nil {
		return nil
	}
	p, e := decodeIntIn(raw, "priority", 0, MaxPriority)
	if e != nil {
		return e
	}
	d.r.Priority = int(p)
	return nil
}

// otherFields applies the policy for every top-level field the
// decoders above do not read, in name order so errors are deterministic.
func (d *decoder) otherFields() *Error {
	names := make([]string, 0, len(d.f))
	for name := range d.f {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if e := checkOtherField(name, d.f[name]); e != nil {
			return e
		}
	}
	return nil
}

package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/warden-ai/warden/internal/constrain"
)

// constraintFields are the chat and completions fields that ask for
// structured output; at most one may be set (response_format "text"
// counts as unset).
var constraintFields = []string{"response_format", "guided_json", "guided_choice", "guided_regex", "structured_outputs"}

// constraint reads response_format and vLLM's guided_json, guided_choice,
// guided_regex and structured_outputs into a compiled-and-checked
// constraint, and consumes them (otherFields does not see them).
// guided_decoding_backend is accepted and ignored with one of them.
func (d *decoder) constraint() *Error {
	var spec *constrain.Spec
	var from string
	for _, name := range constraintFields {
		raw := d.f.get(name)
		delete(d.f, name)
		if raw == nil {
			continue
		}
		s, e := d.constraintField(name, raw)
		if e != nil {
			return e
		}
		if s == nil {
			continue
		}
		if spec != nil {
			return InvalidRequest(name, CodeInvalidValue, fmt.Sprintf(
				"Invalid '%s': '%s' already asks for structured output; send only one of response_format, guided_json, guided_choice, guided_regex and structured_outputs.", name, from))
		}
		spec, from = s, name
	}
	if spec != nil && d.f.get("guided_decoding_backend") != nil {
		delete(d.f, "guided_decoding_backend")
	}
	return d.setConstraint(spec, from)
}

func (d *decoder) constraintField(name string, raw json.RawMessage) (*constrain.Spec, *Error) {
	switch name {
	case "response_format":
		f, e := decodeObject(raw, name)
		if e != nil {
			return nil, e
		}
		return formatSpec(f, name, false)
	case "guided_json":
		schema, e := schemaValue(raw, name)
		if e != nil {
			return nil, e
		}
		return &constrain.Spec{JSONSchema: schema}, nil
	case "guided_choice":
		choices, e := decodeStrings(raw, name)
		if e != nil {
			return nil, e
		}
		return &constrain.Spec{Choice: choices}, nil
	case "guided_regex":
		re, e := decodeString(raw, name)
		if e != nil {
			return nil, e
		}
		return &constrain.Spec{Regex: re}, nil
	}
	return structuredOutputs(raw, name)
}

// structuredOutputs reads vLLM's structured_outputs object: one of json,
// regex, choice (grammar and structural_tag are refused).
func structuredOutputs(raw json.RawMessage, param string) (*constrain.Spec, *Error) {
	f, e := decodeObject(raw, param)
	if e != nil {
		return nil, e
	}
	var spec *constrain.Spec
	names := slices.Sorted(maps.Keys(f))
	for _, name := range names {
		v := f[name]
		if isNull(v) {
			continue
		}
		p := param + "." + name
		var s *constrain.Spec
		switch name {
		case "json":
			schema, e := schemaValue(v, p)
			if e != nil {
				return nil, e
			}
			s = &constrain.Spec{JSONSchema: schema}
		case "regex":
			re, e := decodeString(v, p)
			if e != nil {
				return nil, e
			}
			s = &constrain.Spec{Regex: re}
		case "choice":
			choices, e := decodeStrings(v, p)
			if e != nil {
				return nil, e
			}
			s = &constrain.Spec{Choice: choices}
		case "json_object":
			on, e := decodeBool(v, p)
			if e != nil {
				return nil, e
			}
			if !on {
				continue
			}
			s = &constrain.Spec{JSONObject: true}
		default:
			return nil, InvalidRequest(p, CodeUnsupportedParameter, fmt.Sprintf(
				"Unsupported parameter: '%s' is not supported by this server (supported: json, json_object, regex, choice).", p))
		}
		if spec != nil {
			return nil, InvalidRequest(param, CodeInvalidValue, fmt.Sprintf("Invalid '%s': set exactly one kind of constraint.", param))
		}
		spec = s
	}
	return spec, nil
}

// formatSpec reads an OpenAI output format: chat's response_format, where
// a json_schema format nests its fields under "json_schema", or the
// Responses API's text.format (flat), where they sit beside "type". A
// "text" format is no constraint (nil).
func formatSpec(f fields, param string, flat bool) (*constrain.Spec, *Error) {
	rawType := f.get("type")
	if rawType == nil {
		return nil, missing(param + ".type")
	}
	typ, e := decodeString(rawType, param+".type")
	if e != nil {
		return nil, e
	}
	switch typ {
	case "text":
		return nil, nil
	case "json_object":
		return &constrain.Spec{JSONObject: true}, nil
	case "json_schema":
	default:
		return nil, InvalidRequest(param+".type", CodeInvalidValue,
			fmt.Sprintf("Invalid value for '%s.type': expected \"text\", \"json_object\" or \"json_schema\", got %q.", param, typ))
	}
	js, jsParam := f, param
	if !flat {
		jsParam = param + ".json_schema"
		raw := f.get("json_schema")
		if raw == nil {
			return nil, missing(jsParam)
		}
		if js, e = decodeObject(raw, jsParam); e != nil {
			return nil, e
		}
	}
	raw := js.get("name")
	if raw == nil {
		return nil, missing(jsParam + ".name")
	}
	if _, e := decodeString(raw, jsParam+".name"); e != nil {
		return nil, e
	}
	if raw := js.get("strict"); raw != nil {
		if _, e := decodeBool(raw, jsParam+".strict"); e != nil {
			return nil, e
		}
	}
	schema := js.get("schema")
	if schema == nil {
		// No schema: any JSON object, as with json_object.
		return &constrain.Spec{JSONObject: true}, nil
	}
	if schema[0] != '{' {
		return nil, wrongType(jsParam+".schema", "an object", schema)
	}
	return &constrain.Spec{JSONSchema: schema}, nil
}

// schemaValue reads a JSON Schema given as an object or, as vLLM also
// accepts, as a string holding one.
func schemaValue(raw json.RawMessage, param string) (json.RawMessage, *Error) {
	switch raw[0] {
	case '{', 't', 'f':
		return raw, nil
	case '"':
		s, e := decodeString(raw, param)
		if e != nil {
			return nil, e
		}
		if !json.Valid([]byte(s)) {
			return nil, InvalidRequest(param, CodeInvalidValue, fmt.Sprintf("Invalid '%s': the string is not a JSON document.", param))
		}
		return json.RawMessage(s), nil
	}
	return nil, wrongType(param, "an object (a JSON Schema)", raw)
}

func decodeStrings(raw json.RawMessage, param string) ([]string, *Error) {
	items, e := decodeArray(raw, param, "an array of strings")
	if e != nil {
		return nil, e
	}
	if len(items) == 0 {
		return nil, InvalidRequest(param, CodeEmptyArray, fmt.Sprintf("Invalid '%s': expected at least one string.", param))
	}
	out := make([]string, len(items))
	for i, it := range items {
		if out[i], e = decodeString(it, fmt.Sprintf("%s[%d]", param, i)); e != nil {
			return nil, e
		}
	}
	return out, nil
}

// setConstraint encodes spec and checks it as a worker would, within the
// default limits (so a schema warden cannot enforce is refused now,
// naming the keyword); the gateway checks it again against the limits of
// the model's workers once it knows the model (ConstraintError).
func (d *decoder) setConstraint(spec *constrain.Spec, param string) *Error {
	if spec == nil {
		return nil
	}
	wire, err := spec.Encode()
	if err == nil {
		_, err = constrain.DefaultLimits.Accept(d.grammars, wire)
	}
	if err != nil {
		return ConstraintError(param, err)
	}
	d.r.Constraint, d.r.ConstraintParam = wire, param
	return nil
}

// ConstraintError maps a constrain error about the constraint of field
// param to the 400 the client gets; one over a limit names the limit,
// the constraint's measure and the limit.
func ConstraintError(param string, err error) *Error {
	var ue *constrain.UnsupportedError
	switch {
	case errors.As(err, &ue):
		msg := fmt.Sprintf("Unsupported parameter: '%s' uses the JSON Schema keyword '%s' (at %s), which this server cannot enforce", param, ue.Keyword, "#"+ue.Path)
		if ue.Keyword == "regex" {
			msg = fmt.Sprintf("Unsupported parameter: '%s' uses a regular expression feature this server cannot enforce", param)
		}
		if ue.Detail != "" {
			msg += " (" + ue.Detail + ")"
		}
		return InvalidRequest(param, CodeUnsupportedParameter, msg+". The supported subset is listed in the API documentation.")
	case errors.Is(err, constrain.ErrTooLarge):
		return InvalidRequest(param, CodeInvalidValue, fmt.Sprintf("Invalid '%s': the constraint is too large to enforce (%v).", param, err))
	}
	return InvalidRequest(param, CodeInvalidValue, fmt.Sprintf("Invalid '%s': %v.", param, err))
}
